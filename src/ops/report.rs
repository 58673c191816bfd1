//! The `Reporter` trait: how long operations tell the outside world about
//! progress, problems and warnings. The library calls it; the binary
//! implements it with indicatif bars, JSON Lines, or nothing under cron.

use crate::problem::Problem;

/// Receives progress from operations. Every method has a silent default.
pub trait Reporter: Send + Sync {
    /// A phase starts; totals are given when known.
    fn begin(&self, _task: &str, _items: Option<u64>, _bytes: Option<u64>) {}
    /// Bytes were read or copied.
    fn bytes(&self, _n: u64) {}
    /// One item finished (with what happened to it: "deposited", "verified", …).
    fn item(&self, _name: &str, _outcome: &str) {}
    fn problem(&self, _problem: &Problem) {}
    fn warning(&self, _message: &str) {}
    /// The phase ends.
    fn end(&self) {}
}

/// A reporter that reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Reporter for Silent {}
