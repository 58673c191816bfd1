//! Where an item's bytes physically are, as the cluster behind a store proves
//! it (`ibi audit --placement`): the data centres that hold every object of the
//! item, whether the cluster keeps fewer replicas than it asks for, or why it
//! proves nothing. The types only; a backend that can ask its cluster answers
//! `Store::placement`.

use std::collections::BTreeSet;

/// Where one item's objects are held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemPlacement {
    /// The data centres holding a live replica of every chunk of every object
    /// of the item (empty when nothing is proven).
    pub data_centres: BTreeSet<String>,
    /// Some of its volumes have fewer live replicas than their replication asks for.
    pub degraded: bool,
    /// Why the cluster proves no place for it, when it does not.
    pub unproven: Option<String>,
}

impl ItemPlacement {
    /// Nothing proven, for `why`.
    pub fn unproven(why: impl Into<String>) -> ItemPlacement {
        ItemPlacement { unproven: Some(why.into()), ..ItemPlacement::default() }
    }
}
