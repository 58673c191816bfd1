//! The audit's `--placement` part (ARCHITECTURE.md, "Sites and the copy
//! policy"): a site that names the SeaweedFS cluster behind it is asked in which
//! data centres every object of each item it holds is, and a good copy there
//! then counts as one zone per data centre proven (`ZONE/DATACENTRE`) instead of
//! the site's one declared zone. An item whose volumes keep fewer replicas than
//! they ask for is degraded; an item the cluster proves nowhere counts as the
//! declared zone alone.

use std::collections::BTreeMap;

use crate::id::RepositoryName;
use crate::store::config::SeaweedFs;
use crate::store::placement::ItemPlacement;
use crate::store::Store;

/// What a site's cluster proved, counted over the items the site holds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlacementFacts {
    /// Items held in each data centre.
    pub data_centres: BTreeMap<String, u64>,
    /// Items held in this many data centres (0: proven nowhere).
    pub spread: BTreeMap<usize, u64>,
    /// Items some of whose volumes keep fewer live replicas than they ask for.
    pub degraded: u64,
    /// Items the cluster proves nowhere, and the first reason.
    pub unproven: u64,
    pub unproven_because: Option<String>,
    /// Why the cluster could not be asked, when it could not.
    pub error: Option<String>,
}

impl PlacementFacts {
    /// Whether the cluster was asked and every item is placed as it asks.
    pub fn sound(&self) -> bool {
        self.error.is_none() && self.degraded == 0
    }
}

/// How many items' placement is asked of a cluster at once.
pub const PLACEMENT_PAGE: usize = 1000;

/// What a store says of the redundancy of its items, for the commands that
/// read or list them: its cluster, when the collection names the SeaweedFS
/// cluster behind it (`ibi site here`).
pub struct Redundancy<'a> {
    store: &'a dyn Store,
    cluster: Option<SeaweedFs>,
}

/// The text every command gives for a degraded item.
pub const DEGRADED: &str = "its store keeps fewer replicas of its objects than they ask for (a volume server or \
                            data centre is down): it reads, with less redundancy than its store promises";

impl<'a> Redundancy<'a> {
    /// The redundancy `store` can tell (none when its configuration names no cluster).
    pub fn of(store: &'a dyn Store) -> crate::error::Result<Redundancy<'a>> {
        let cluster = store.inventory().current_config()?.and_then(|config| config.seaweedfs);
        Ok(Redundancy { store, cluster })
    }

    /// Whether there is a cluster to ask.
    pub fn told(&self) -> bool {
        self.cluster.is_some()
    }

    /// Which of `names` are degraded, in order (all `false` when there is no
    /// cluster to ask or it proves nothing here); an error when the cluster
    /// could not be asked.
    pub fn degraded(&self, names: &[RepositoryName]) -> crate::error::Result<Vec<bool>> {
        let Some(cluster) = &self.cluster else { return Ok(vec![false; names.len()]) };
        let placed = self.store.placement(names, cluster)?;
        Ok(match placed {
            Some(placed) => placed.iter().map(|p| p.degraded).collect(),
            None => vec![false; names.len()],
        })
    }

    /// The cluster's master, for messages.
    pub fn master(&self) -> &str {
        self.cluster.as_ref().map_or("", |c| c.master.as_str())
    }
}

/// Asks `store`'s cluster where each of `held` is; the placements follow `held`'s
/// order. On failure the facts carry the error and no item is proven anywhere.
pub fn ask(store: &dyn Store, cluster: &SeaweedFs, held: &[RepositoryName]) -> (PlacementFacts, Vec<ItemPlacement>) {
    let failed = |why: String| (PlacementFacts { error: Some(why), ..Default::default() }, Vec::new());
    let placements = match store.placement(held, cluster) {
        Ok(Some(placements)) => placements,
        Ok(None) => return failed("its backend cannot say where its objects are (only an s3:// site can)".into()),
        Err(e) => return failed(e.to_string()),
    };
    let mut facts = PlacementFacts::default();
    for placed in &placements {
        for data_centre in &placed.data_centres {
            *facts.data_centres.entry(data_centre.clone()).or_default() += 1;
        }
        *facts.spread.entry(placed.data_centres.len()).or_default() += 1;
        facts.degraded += u64::from(placed.degraded);
        if let Some(why) = &placed.unproven {
            facts.unproven += 1;
            facts.unproven_because.get_or_insert_with(|| why.clone());
        }
    }
    (facts, placements)
}

/// Adds the facts of one more batch of items to `total`; the first error stays.
pub fn add(total: &mut PlacementFacts, more: PlacementFacts) {
    for (data_centre, items) in more.data_centres {
        *total.data_centres.entry(data_centre).or_default() += items;
    }
    for (spread, items) in more.spread {
        *total.spread.entry(spread).or_default() += items;
    }
    total.degraded += more.degraded;
    total.unproven += more.unproven;
    total.unproven_because = total.unproven_because.take().or(more.unproven_because);
    total.error = total.error.take().or(more.error);
}

/// The zones a good copy counts as: one per data centre its cluster proves, or
/// the site's declared zone when none is proven (or placement was not asked).
pub fn zones_of(zone: &str, placed: Option<&ItemPlacement>) -> Vec<String> {
    match placed {
        Some(placed) if !placed.data_centres.is_empty() => {
            placed.data_centres.iter().map(|dc| format!("{zone}/{dc}")).collect()
        }
        _ => vec![zone.to_string()],
    }
}

/// A one-line account of the facts, for the audit's report.
pub fn describe(facts: &PlacementFacts) -> String {
    if let Some(error) = &facts.error {
        return format!("placement unknown: {error}");
    }
    let spread: Vec<String> = facts.spread.iter().map(|(n, items)| format!("{items} in {n}")).collect();
    let held: Vec<String> = facts.data_centres.iter().map(|(dc, items)| format!("{dc} {items}")).collect();
    let mut text = format!(
        "items by data centres holding them: {}; per data centre: {}; {} degraded",
        spread.join(", "),
        if held.is_empty() { "-".into() } else { held.join(", ") },
        facts.degraded
    );
    if let Some(why) = &facts.unproven_because {
        text.push_str(&format!("; {} proven nowhere ({why})", facts.unproven));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_counts_one_zone_per_data_centre_proven() {
        let placed = ItemPlacement { data_centres: ["dc1".into(), "dc2".into()].into(), ..Default::default() };
        assert_eq!(zones_of("cloud", Some(&placed)), ["cloud/dc1", "cloud/dc2"]);
        assert_eq!(zones_of("cloud", Some(&ItemPlacement::unproven("inline"))), ["cloud"]);
        assert_eq!(zones_of("cloud", None), ["cloud"]);
    }
}
