//! Storage backends. Each backend is one module; what every backend must
//! guarantee is written in ARCHITECTURE.md ("Storage"). `local` keeps
//! collections on a POSIX filesystem.

pub mod local;
