//! The aliases facet (`Store::aliases`): each item's IBIp alias, which names
//! the item by its opaque identifier, read where the backend keeps it (a
//! link under `.ibip/` locally, an object in S3, a question over the wire far
//! away). Placing and removing items changes them (`store::write::Writer`);
//! this facet only reads them and says what is wrong with one.

use crate::error::Result;
use crate::id::{Ibip, RepositoryName};

/// The aliases a collection keeps.
pub trait Aliases: Send + Sync {
    /// The item an IBIp alias names, if the alias exists.
    fn alias(&self, ibip: &Ibip) -> Result<Option<RepositoryName>>;
    /// Aliases (whose IBIp and name encode one date) naming an item the collection
    /// no longer holds: proof that it held it, and lost it. `checked` says which
    /// aliases were already found pointing at an item that is there (verify's
    /// walk): a backend skips reading those (local, S3: a link or a GET each); one
    /// that cannot take the hint across its wire (far) reads them all.
    fn dangling_aliases(&self, checked: &dyn Fn(&Ibip) -> bool) -> Result<Vec<(Ibip, RepositoryName)>>;
    /// Why the alias of `name` is broken, if it is.
    fn alias_problem(&self, ibip: &Ibip, name: &RepositoryName) -> Option<String>;
}
