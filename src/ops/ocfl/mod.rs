//! OCFL 1.1 (ARCHITECTURE.md, "OCFL copies"): `export` writes an item as an
//! OCFL object, `import` takes OCFL objects in as items with every version;
//! the format itself is `store::ocfl::format`.

pub mod export;
pub mod import;
pub mod site;
pub mod validate;

pub use crate::store::ocfl::format::{object_path, read_inventory, Inventory, Version, LAYOUT, OBJECT_ID_BASE};
pub use export::{export, OcflExported};
