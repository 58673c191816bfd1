//! The shared conformance suite: the checks of the `Store` and `Writer`
//! contracts, run against every backend (local folder, memory, far over pipes,
//! object storage in memory). Every change goes through a `Writer` taken with
//! `begin_write`. A backend in this crate adds one line to `backends!`; one
//! outside it calls `run_all` (public with the `conformance` feature) from its
//! own tests, as `tests/it/out_of_tree.rs` does.

use std::io::Cursor;
use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use crate::bag::{self, verify_bag, BagContents, BagInfo};
use crate::digest::Digests;
use crate::error::Error;
use crate::events::{ChainCheck, Event, EventKind};
use crate::id::minter::ReplayClock;
use crate::id::{Granularity, Minted, RepositoryName, Subsystem, Timestamp};
use crate::store::config::{Minting, Peer, Successor};
use crate::store::log::Action;
use crate::store::{
    identity_digest, FileSource, ItemRecord, Listed, LockWait, Placement, RecordSummary, Slot, StageId, Status, Store,
    Writer,
};

/// The subsystem every collection of the suite is made with.
pub fn subsystem() -> Subsystem {
    Subsystem::new("conformance.example.org", 80, Some("192.0.2.7".parse().unwrap()), 800, Granularity::MILLISECOND)
        .unwrap()
}

/// A name and IBIp at `seconds` past 2026-01-01.
fn minted(seconds: i128) -> Minted {
    let base = Timestamp::parse_user("2026-01-01T00:00:00Z").unwrap();
    subsystem().identify(base.checked_add_nanos(seconds * 1_000_000_000)).unwrap()
}

fn writer(store: &dyn Store) -> Box<dyn Writer + '_> {
    store.begin_write(LockWait::No).expect("the lease is free")
}

fn stage_bytes(writer: &dyn Writer, stage: StageId, rel: &str, bytes: &[u8]) -> Digests {
    let mut reader = Cursor::new(bytes.to_vec());
    let source = FileSource { reader: &mut reader, origin: Path::new(rel), mtime: None, also: &[], progress: &|_| {} };
    writer.stage_file(stage, rel, source).map_err(Error::from).unwrap()
}

/// Stages a complete bag for `m` holding `data/a.txt` = `content`.
fn stage_bag(writer: &dyn Writer, m: &Minted, content: &[u8]) -> StageId {
    stage_bag_in(writer, writer.stage().unwrap(), m, content)
}

/// Stages the bag into `stage`.
fn stage_bag_in(writer: &dyn Writer, stage: StageId, m: &Minted, content: &[u8]) -> StageId {
    writer.stage_dir(stage, "data").unwrap();
    let payload = vec![("data/a.txt".to_string(), stage_bytes(writer, stage, "data/a.txt", content))];
    let mut info = BagInfo::default();
    info.push("External-Identifier", m.name.to_string());
    info.push("External-Identifier", m.ibip.as_ref().unwrap().to_string());
    info.push("Payload-Oxum", format!("{}.1", content.len()));
    let contents = BagContents { info: &info, algorithms: &[], payload: &payload, tag_files: &[] };
    bag::write_tag_files_with(&contents, &mut |name, bytes| {
        stage_bytes(writer, stage, name, bytes);
        Ok(())
    })
    .unwrap();
    stage
}

fn place(writer: &dyn Writer, m: &Minted, stage: StageId, replace: bool) -> Result<(), Error> {
    let batch =
        [Placement { stage, name: m.name.clone(), ibip: m.ibip, replace, record: None, action: Default::default() }];
    let mut outcomes = writer.place(&batch)?;
    assert_eq!(outcomes.len(), 1);
    outcomes.remove(0).1
}

fn read_a(store: &dyn Store, name: &RepositoryName) -> Vec<u8> {
    store.item_files(name).read("data/a.txt").unwrap()
}

/// The items a walk finds, strays left out.
pub fn names(store: &dyn Store) -> Vec<RepositoryName> {
    store
        .walk()
        .filter_map(|l| match l.unwrap() {
            Listed::Item(name) => Some(name),
            Listed::Stray { .. } => None,
        })
        .collect()
}

pub fn placement_never_overwrites(store: &dyn Store) {
    let w = writer(store);
    let m = minted(1);
    let first = stage_bag(w.as_ref(), &m, b"first");
    assert!(verify_bag(w.staged_files(first).as_ref(), "staged", &|_| {}).problems.is_empty());
    place(w.as_ref(), &m, first, false).unwrap();
    let second = stage_bag(w.as_ref(), &m, b"second");
    let refused = place(w.as_ref(), &m, second, false);
    assert!(matches!(refused, Err(Error::AlreadyExists { .. })), "a second placement is refused: {refused:?}");
    assert_eq!(read_a(store, &m.name), b"first");
    let third = stage_bag(w.as_ref(), &m, b"third");
    place(w.as_ref(), &m, third, true).unwrap();
    assert_eq!(read_a(store, &m.name), b"third", "a replacement replaces");
    assert!(verify_bag(store.item_files(&m.name).as_ref(), "placed", &|_| {}).problems.is_empty());
}

pub fn walk_is_in_name_order(store: &dyn Store) {
    let w = writer(store);
    let all: Vec<Minted> = [5, 1, 4, 2, 3, 600, 3_000_000].iter().map(|s| minted(*s)).collect();
    for m in &all {
        let stage = stage_bag(w.as_ref(), m, m.name.to_string().as_bytes());
        place(w.as_ref(), m, stage, false).unwrap();
    }
    let mut expected: Vec<RepositoryName> = all.iter().map(|m| m.name.clone()).collect();
    expected.sort();
    assert_eq!(names(store), expected);
}

pub fn aliases_follow_placement_and_removal(store: &dyn Store) {
    let w = writer(store);
    let m = minted(7);
    let ibip = m.ibip.unwrap();
    assert_eq!(store.aliases().alias(&ibip).unwrap(), None);
    let stage = stage_bag(w.as_ref(), &m, b"x");
    place(w.as_ref(), &m, stage, false).unwrap();
    assert_eq!(store.aliases().alias(&ibip).unwrap(), Some(m.name.clone()));
    assert_eq!(store.aliases().alias_problem(&ibip, &m.name), None);
    assert_eq!(store.slot(&m.name).unwrap(), Slot::Item);
    let before = identity_digest(store, &m.name).unwrap();
    assert_eq!(before.len(), 64);
    assert!(store.aliases().dangling_aliases(&|_| false).unwrap().is_empty());
    w.restore_alias(&ibip, &m.name).unwrap();
    assert_eq!(store.aliases().alias(&ibip).unwrap(), Some(m.name.clone()), "restoring a right alias keeps it right");
    w.remove(std::slice::from_ref(&m.name)).unwrap();
    assert_eq!(store.aliases().alias(&ibip).unwrap(), None);
    assert!(store.aliases().dangling_aliases(&|_| false).unwrap().is_empty(), "removal takes the alias with it");
    assert_eq!(store.slot(&m.name).unwrap(), Slot::Empty);
    assert!(names(store).is_empty());
}

/// `slots` and `records` of a batch (enough names that a backend may answer
/// from one listing, asked out of order, held and absent ones mixed, a name
/// sorting between two held ones) answer as `slot` and `records` of each name.
pub fn a_batch_is_answered_as_each_name(store: &dyn Store) {
    let w = writer(store);
    let held: Vec<Minted> = [1, 3, 5].into_iter().map(minted).collect();
    for m in &held {
        let stage = stage_bag(w.as_ref(), m, m.name.to_string().as_bytes());
        place(w.as_ref(), m, stage, false).unwrap();
    }
    let asked: Vec<RepositoryName> = [6, 3, 2, 1, 4, 5, 0].into_iter().map(|s| minted(s).name).collect();
    let one_by_one: Vec<Slot> = asked.iter().map(|name| store.slot(name).unwrap()).collect();
    assert_eq!(store.slots(&asked).unwrap(), one_by_one);
    let held_names: Vec<bool> = one_by_one.iter().map(|slot| *slot == Slot::Item).collect();
    assert_eq!(held_names, [false, true, false, true, false, true, false]);
    let records: Vec<Option<RepositoryName>> =
        store.inventory().records(&asked).unwrap().into_iter().map(|r| r.map(|r| r.name)).collect();
    let each: Vec<Option<RepositoryName>> = asked
        .iter()
        .map(|n| store.inventory().records(std::slice::from_ref(n)).unwrap().remove(0).map(|r| r.name))
        .collect();
    assert_eq!(records, each);
    if store.inventory().has_inventory() {
        assert_eq!(records.iter().map(Option::is_some).collect::<Vec<_>>(), held_names, "a record for each held");
    }
}

/// A second `begin_write` is refused (exit 75), at once or after waiting; dropping
/// the `Writer` releases the lease.
pub fn lease_is_exclusive(store: &dyn Store, other: &dyn Store) {
    let held = writer(store);
    assert!(matches!(other.begin_write(LockWait::No), Err(Error::Locked { .. })), "a second writer is refused");
    let waited = other.begin_write(LockWait::For(Duration::from_millis(200)));
    assert!(matches!(waited, Err(Error::Locked { .. })), "and refused after waiting");
    drop(held);
    other.begin_write(LockWait::No).expect("free once the writer is dropped");
}

/// Two placements of one name at once, from two threads of the writer.
pub fn one_of_two_concurrent_placements_wins(store: &dyn Store) {
    let w = writer(store);
    let w = w.as_ref();
    for round in 0..20 {
        let m = minted(100 + round);
        let a = stage_bag(w, &m, b"from a");
        let b = stage_bag(w, &m, b"from b");
        let barrier = Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                barrier.wait();
                place(w, &m, a, false)
            });
            let tb = s.spawn(|| {
                barrier.wait();
                place(w, &m, b, false)
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(ra.is_ok() != rb.is_ok(), "round {round}: exactly one wins: {ra:?} {rb:?}");
        assert!(matches!((&ra, &rb), (Err(Error::AlreadyExists { .. }), _) | (_, Err(Error::AlreadyExists { .. }))));
        let winner: &[u8] = if ra.is_ok() { b"from a" } else { b"from b" };
        assert_eq!(read_a(store, &m.name), winner);
    }
}

/// A writer that ends with an item staged (its handle never cleans up, as a killed
/// process): the next writer's recovery clears it, and it was never an item.
pub fn recovery_clears_an_interrupted_batch(killed: Box<dyn Store>, next: &dyn Store) {
    let m = minted(9);
    let w = writer(killed.as_ref());
    let stage = stage_bag(w.as_ref(), &m, b"never placed");
    assert!(names(next).is_empty(), "staging is never an item");
    // A round trip after the staged files, so that none is still on its way when the writer "dies".
    let _ = w.staged_files(stage).entries();
    drop(w);
    std::mem::forget(killed);
    assert!(seen_as_left_over(next), "the killed writer's staging is seen as left over");
    let recovered = writer(next);
    assert!(next.leftovers().is_empty(), "nothing is left over once a writer began");
    assert!(names(next).is_empty());
    assert!(recovered.staged_files(stage).root_kind().is_err(), "the staged item is gone");
}

/// Whether `store` reports leftovers within two seconds: a far session's last
/// frames, and the release of its lease, may still be landing when its writer "dies".
fn seen_as_left_over(store: &dyn Store) -> bool {
    (0..100).any(|_| {
        let found = !store.leftovers().is_empty();
        if !found {
            std::thread::sleep(Duration::from_millis(20));
        }
        found
    })
}

/// A stage made for a known name (`stage_for`) is unseen until placed, a second
/// writer of the name never changes the placed item, and a killed writer's direct
/// stage is cleared by the next writer, leaving nothing in a later item of that name.
pub fn staging_for_a_name_is_unseen_until_placed(store: &dyn Store, other: &dyn Store, killed: Box<dyn Store>) {
    let m = minted(11);
    {
        let w = writer(store);
        let stage = stage_bag_in(w.as_ref(), w.stage_for(&m.name, false).unwrap(), &m, b"direct");
        assert!(names(other).is_empty() && other.slot(&m.name).unwrap() == Slot::Empty, "unseen until placed");
        place(w.as_ref(), &m, stage, false).unwrap();
    }
    assert_eq!(read_a(other, &m.name), b"direct");
    {
        let second = writer(other);
        if let Ok(stage) = second.stage_for(&m.name, false) {
            // A backend that stages at the item's keys may refuse the file already.
            second.stage_dir(stage, "data").unwrap();
            let mut reader = Cursor::new(b"intruder".to_vec());
            let source =
                FileSource { reader: &mut reader, origin: Path::new("x"), mtime: None, also: &[], progress: &|_| {} };
            if second.stage_file(stage, "data/a.txt", source).is_ok() {
                assert!(place(second.as_ref(), &m, stage, false).is_err(), "the name is taken");
            }
            second.discard(stage);
        }
    }
    assert_eq!(read_a(store, &m.name), b"direct", "a second writer changed nothing");
    assert!(verify_bag(store.item_files(&m.name).as_ref(), "placed", &|_| {}).problems.is_empty());

    let gone = minted(12);
    let w = writer(killed.as_ref());
    let stage = stage_bag_in(w.as_ref(), w.stage_for(&gone.name, false).unwrap(), &gone, b"killed");
    stage_bytes(w.as_ref(), stage, "data/extra.txt", b"left behind");
    let _ = w.staged_files(stage).entries();
    drop(w);
    std::mem::forget(killed);
    cleared_then_placed_again(other, &gone);
    let check = verify_bag(other.item_files(&gone.name).as_ref(), "again", &|_| {});
    assert!(check.problems.is_empty(), "nothing of the killed stage is left: {:?}", check.problems);
}

/// After a writer was killed with a direct stage of `m` left: `other` sees it as
/// left over, its next writer clears it (nothing at `m`'s place, nothing left
/// over), and `m` is then staged and placed anew (its content `again`).
fn cleared_then_placed_again(other: &dyn Store, m: &Minted) {
    assert!(seen_as_left_over(other), "the killed writer's stage is seen as left over");
    let w = writer(other);
    assert!(other.leftovers().is_empty() && other.slot(&m.name).unwrap() == Slot::Empty);
    let again = stage_bag_in(w.as_ref(), w.stage_for(&m.name, false).unwrap(), m, b"again");
    place(w.as_ref(), m, again, false).unwrap();
}

/// Stages begun together (`Writer::stages_for`, where a backend offers it) are
/// each what one `stage_for` makes: one placed is read, one discarded leaves
/// nothing, and one a killed writer left is cleared by the next writer, while
/// the one placed stays whole.
pub fn stages_begun_together_are_each_placed_or_cleared(store: &dyn Store, other: &dyn Store, killed: Box<dyn Store>) {
    let (kept, dropped, left) = (minted(31), minted(32), minted(33));
    let items: Vec<(RepositoryName, bool)> = [&kept, &dropped, &left].iter().map(|m| (m.name.clone(), false)).collect();
    let w = writer(killed.as_ref());
    let stages = match w.stages_for(&items).unwrap() {
        Some(stages) => stages,
        None => items.iter().map(|(name, replace)| w.stage_for(name, *replace).unwrap()).collect(),
    };
    assert_eq!(stages.len(), 3, "a stage for each item, in order");
    let staged: Vec<StageId> = [&kept, &dropped, &left]
        .iter()
        .zip(&stages)
        .map(|(m, stage)| stage_bag_in(w.as_ref(), *stage, m, b"together"))
        .collect();
    place(w.as_ref(), &kept, staged[0], false).unwrap();
    w.discard(staged[1]);
    stage_bytes(w.as_ref(), staged[2], "data/extra.txt", b"left behind");
    assert_eq!(read_a(other, &kept.name), b"together", "the one placed is read");
    assert_eq!(other.slot(&dropped.name).unwrap(), Slot::Empty, "the one discarded left nothing");
    drop(w);
    std::mem::forget(killed);
    cleared_then_placed_again(other, &left);
    for m in [&kept, &left] {
        let check = verify_bag(other.item_files(&m.name).as_ref(), "after", &|_| {});
        assert!(check.problems.is_empty(), "{} is whole: {:?}", m.name, check.problems);
    }
    assert_eq!(read_a(store, &left.name), b"again", "a first handle reads the item placed after the kill");
}

/// Two handles take turns at the lease, minting one date each time: no date twice.
pub fn minter_state_never_repeats(store: &dyn Store, other: &dyn Store) {
    let start = Timestamp::parse_user("2026-01-01T00:00:00Z").unwrap();
    let dates: Vec<Vec<Timestamp>> = std::thread::scope(|s| {
        [store, other]
            .map(|st| {
                s.spawn(move || {
                    let clock = ReplayClock::new(start);
                    (0..50)
                        .flat_map(|_| {
                            let w = st.begin_write(LockWait::Forever).unwrap();
                            w.minter().mint_dates(1, &clock).unwrap()
                        })
                        .collect()
                })
            })
            .map(|t| t.join().unwrap())
            .into_iter()
            .collect()
    });
    let mut all: Vec<Timestamp> = dates.concat();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 100, "no date handed out twice");
}

/// A collection's part in minting is stored, seen by another handle at once, and
/// obeyed: one that follows or retired mints nothing and keeps its state; raising
/// its minter still works (copies arrive); minting again starts after the raise.
pub fn minting_role_is_kept_and_obeyed(store: &dyn Store, other: &dyn Store) {
    assert_eq!(store.inventory().minting().unwrap(), Minting::Mints, "a new collection mints");
    let clock = ReplayClock::new(Timestamp::parse_user("2026-01-01T00:00:00Z").unwrap());
    let w = writer(store);
    let first = w.minter().mint_dates(1, &clock).unwrap()[0];
    let peer = Peer { id: "urn:uuid:00000000-0000-4000-8000-000000000001".into(), location: "elsewhere".into() };
    w.minter().set_minting(&Minting::Follows(peer.clone())).unwrap();
    assert_eq!(other.inventory().minting().unwrap(), Minting::Follows(peer), "another handle sees the change");
    assert!(matches!(w.minter().mint_dates(1, &clock), Err(Error::NotMinting { .. })), "a follower mints nothing");
    assert_eq!(w.minter().minted_up_to().unwrap(), Some(first), "a refused mint leaves the state alone");
    // A far server mints with its own clock, so `first` may be today.
    let later = first.checked_add_nanos(1_000_000);
    w.minter().raise_minter_to(later).unwrap();
    assert_eq!(w.minter().minted_up_to().unwrap(), Some(later));
    let next =
        Successor { id: "x".into(), location: "y".into(), since: "2026-06-01T00:00:00Z".into(), forward_url: None };
    w.minter().set_minting(&Minting::Retired(Some(next.clone()))).unwrap();
    assert_eq!(store.inventory().minting().unwrap(), Minting::Retired(Some(next)));
    assert!(
        matches!(w.minter().mint_dates(1, &clock), Err(Error::NotMinting { .. })),
        "a retired collection mints nothing"
    );
    w.minter().set_minting(&Minting::Mints).unwrap();
    let clock = ReplayClock::new(later);
    assert!(w.minter().mint_dates(1, &clock).unwrap()[0] > later, "minting resumes after the raised floor");
}

pub fn inventory_records_placement_replacement_and_removal(store: &dyn Store, other: &dyn Store) {
    assert!(
        store.inventory().has_inventory()
            && store.inventory().collection_id().is_some_and(|id| id.starts_with("urn:uuid:"))
    );
    let w = writer(store);
    let (a, b) = (minted(1), minted(2));
    place(w.as_ref(), &a, stage_bag(w.as_ref(), &a, b"first"), false).unwrap();
    place(w.as_ref(), &b, stage_bag(w.as_ref(), &b, b"other"), false).unwrap();
    let records = other.inventory().records(&[a.name.clone(), b.name.clone(), minted(3).name]).unwrap();
    let first = records[0].as_ref().expect("a placed item is recorded, and another handle sees it");
    assert_eq!((first.status, first.ibip, first.versions.len()), (Status::Present, a.ibip, 1));
    assert_eq!(first.current().digest, identity_digest(store, &a.name).unwrap());
    assert!(records[1].is_some() && records[2].is_none());
    place(w.as_ref(), &a, stage_bag(w.as_ref(), &a, b"replaced"), true).unwrap();
    let replaced = store.inventory().records(std::slice::from_ref(&a.name)).unwrap().remove(0).unwrap();
    assert_eq!(replaced.current().digest, identity_digest(store, &a.name).unwrap());
    assert_ne!(replaced.current().digest, first.current().digest);
    w.remove(std::slice::from_ref(&b.name)).unwrap();
    let all: Vec<ItemRecord> = other.inventory().all_records().map(Result::unwrap).collect();
    let seen: Vec<(RepositoryName, Status)> = all.iter().map(|r| (r.name.clone(), r.status)).collect();
    assert_eq!(seen, [(a.name, Status::Present), (b.name, Status::Removed)], "a removed item stays known");
    let summaries: Vec<RecordSummary> = other.inventory().record_summaries().map(Result::unwrap).collect();
    let whole: Vec<RecordSummary> = all.into_iter().map(RecordSummary::from).collect();
    assert_eq!(summaries, whole, "the summaries say what the whole records say");
}

/// Every change is logged once, in one chain that another handle reads: a
/// placement, a replacement, an arrival carrying its history (which keeps its
/// ids), a removal. A page starts after the seq asked for; an item's page holds
/// its own events only.
pub fn log_records_each_change_once_in_a_chain(store: &dyn Store, other: &dyn Store) {
    let w = writer(store);
    let (a, b) = (minted(11), minted(12));
    place(w.as_ref(), &a, stage_bag(w.as_ref(), &a, b"first"), false).unwrap();
    let stage = stage_bag(w.as_ref(), &a, b"second");
    let update = Action::of(EventKind::Update, String::new());
    let batch = [Placement { stage, name: a.name.clone(), ibip: a.ibip, replace: true, record: None, action: update }];
    assert!(w.place(&batch).unwrap()[0].1.is_ok());
    let history = Event::new(EventKind::Deposit, Some(b.name.to_string()), "success", "elsewhere".into());
    let arrival = Action { kind: Some(EventKind::MirrorIn), note: "from there".into(), carried: vec![history.clone()] };
    let stage = stage_bag(w.as_ref(), &b, b"arrived");
    let batch =
        [Placement { stage, name: b.name.clone(), ibip: b.ibip, replace: false, record: None, action: arrival }];
    assert!(w.place(&batch).unwrap()[0].1.is_ok());
    w.remove(std::slice::from_ref(&b.name)).unwrap();
    drop(w);
    let all = other.ledger().events(None, 0).unwrap().expect("every backend keeps a log");
    let mut chain = ChainCheck::default();
    let id = other.inventory().collection_id().expect("a collection with a log has an id");
    chain.bind_to(&id);
    all.iter().for_each(|stored| chain.next(stored));
    assert_eq!((chain.broken(), chain.count(), chain.unbound()), (None, 5, false), "bound to {id}: {all:?}");
    let mut elsewhere = ChainCheck::default();
    elsewhere.bind_to("urn:uuid:another-collection");
    all.iter().for_each(|stored| elsewhere.next(stored));
    assert!(elsewhere.broken().is_some_and(|b| b.contains("another collection")), "{:?}", elsewhere.broken());
    let events: Vec<Event> = all.iter().map(|stored| stored.event().unwrap()).collect();
    let kinds: Vec<(&str, String)> =
        events.iter().map(|e| (e.kind.as_str(), e.item.clone().unwrap_or_default())).collect();
    let (a, b) = (a.name.to_string(), b.name.to_string());
    let expected = [("deposit", &a), ("update", &a), ("deposit", &b), ("mirror-in", &b), ("migrate-out", &b)];
    assert_eq!(kinds, expected.map(|(kind, item)| (kind, item.clone())));
    assert_eq!(events[2].id, history.id, "a carried event keeps its id");
    assert!(events[2].carried_from.is_some() && events[3].carried_from.is_none());
    assert!(events[3].detail.contains("from there"), "{}", events[3].detail);
    let of_b = other.ledger().events(Some(&RepositoryName::parse(&b).unwrap()), 0).unwrap().unwrap();
    assert_eq!(of_b.iter().map(|stored| stored.seq).collect::<Vec<_>>(), [3, 4, 5]);
    let after = other.ledger().events(None, 3).unwrap().unwrap();
    assert_eq!(after.iter().map(|stored| stored.seq).collect::<Vec<_>>(), [4, 5]);
    // The item comes back carrying the same history: it is logged once.
    let back = minted(12);
    let w = writer(store);
    let stage = stage_bag(w.as_ref(), &back, b"arrived");
    let again = Action { kind: Some(EventKind::MirrorIn), note: String::new(), carried: vec![history.clone()] };
    let batch =
        [Placement { stage, name: back.name.clone(), ibip: back.ibip, replace: false, record: None, action: again }];
    assert!(w.place(&batch).unwrap()[0].1.is_ok());
    let ids: Vec<String> =
        other.ledger().events(None, 0).unwrap().unwrap().iter().map(|stored| stored.event().unwrap().id).collect();
    assert_eq!(ids.iter().filter(|id| **id == history.id).count(), 1, "a carried event is logged once: {ids:?}");
}

/// What a copy of an item carries is its history without its fixity checks
/// (they stay with the copy they checked), however often it was checked.
pub fn a_copy_carries_no_fixity_checks(store: &dyn Store, other: &dyn Store) {
    use crate::store::inventory::FixityCheck;
    let w = writer(store);
    let a = minted(13);
    place(w.as_ref(), &a, stage_bag(w.as_ref(), &a, b"first"), false).unwrap();
    drop(w);
    for day in 10..13 {
        let check = FixityCheck::read(a.name.clone(), format!("2026-01-{day}T00:00:00Z"), true, 1, 5);
        store
            .ledger()
            .writer()
            .expect("a writable handle hands out its ledger writer")
            .record_fixity(&[check])
            .unwrap();
    }
    let w = writer(store);
    let stage = stage_bag(w.as_ref(), &a, b"second");
    let update = Action::of(EventKind::Update, String::new());
    let batch = [Placement { stage, name: a.name.clone(), ibip: a.ibip, replace: true, record: None, action: update }];
    assert!(w.place(&batch).unwrap()[0].1.is_ok());
    drop(w);
    let whole = other.ledger().events(Some(&a.name), 0).unwrap().expect("every backend keeps a log");
    let kinds = |events: &[crate::events::StoredEvent]| -> Vec<String> {
        events.iter().map(|stored| stored.event().unwrap().kind.as_str().to_string()).collect()
    };
    // A backend that keeps the checks it is given logs each; one that keeps
    // none (in memory; far, whose server checks and logs its own) logs none.
    let logged = kinds(&whole);
    let checks = logged.iter().filter(|kind| *kind == "fixity").count();
    assert!(checks == 0 || checks == 3, "{logged:?}");
    assert_eq!(logged.iter().filter(|kind| *kind != "fixity").collect::<Vec<_>>(), ["deposit", "update"]);
    let carried = other.ledger().items_events(std::slice::from_ref(&a.name)).unwrap();
    assert_eq!(carried.len(), 1);
    assert_eq!(kinds(&carried[0]), ["deposit", "update"]);
}

/// A repair (a replacement that brings another collection's copy) keeps the
/// copy it displaces, and an update does not; a kept copy leaves only when it
/// is removed by its id. A backend that keeps them elsewhere (far: on its
/// server's machine) offers no `kept_copies` here.
pub fn a_repair_keeps_what_it_replaces(store: &dyn Store) {
    let Some(kept) = store.kept_copies() else { return };
    let w = writer(store);
    let a = minted(14);
    place(w.as_ref(), &a, stage_bag(w.as_ref(), &a, b"first"), false).unwrap();
    let update = Action::of(EventKind::Update, String::new());
    let stage = stage_bag(w.as_ref(), &a, b"second");
    let batch = [Placement { stage, name: a.name.clone(), ibip: a.ibip, replace: true, record: None, action: update }];
    assert!(w.place(&batch).unwrap()[0].1.is_ok());
    assert!(kept.list_kept().unwrap().is_empty(), "an update keeps its versions in the item");
    let repair = Action::of(EventKind::Repair, "from there".into());
    let stage = stage_bag(w.as_ref(), &a, b"third");
    let batch = [Placement { stage, name: a.name.clone(), ibip: a.ibip, replace: true, record: None, action: repair }];
    assert!(w.place(&batch).unwrap()[0].1.is_ok());
    drop(w);
    let listed = kept.list_kept().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, a.name.to_string());
    assert!(listed[0].bytes > 0);
    assert!(kept.remove_kept("nothing@here").is_err());
    assert_eq!(kept.remove_kept(&listed[0].id).unwrap(), listed[0]);
    assert!(kept.list_kept().unwrap().is_empty());
}

/// Reads while a writer replaces an item, again and again: each read sees the old
/// item or the new one, never a half, and never an error.
pub fn reads_during_a_write_see_old_or_new(store: &dyn Store, other: &dyn Store) {
    let w = writer(store);
    let m = minted(20);
    place(w.as_ref(), &m, stage_bag(w.as_ref(), &m, b"old"), false).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) || reads == 0 {
                let seen = other.item_files(&m.name).read("data/a.txt");
                let seen = seen.unwrap_or_else(|e| panic!("a read during a write failed: {e}"));
                assert!(seen == b"old" || seen == b"new", "a half-written item: {seen:?}");
                reads += 1;
            }
        });
        for round in 0..10 {
            let content: &[u8] = if round % 2 == 0 { b"new" } else { b"old" };
            place(w.as_ref(), &m, stage_bag(w.as_ref(), &m, content), true).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        reader.join().unwrap();
    });
}

/// A writer restricted to appending adds items and refuses every replacement,
/// removal, retirement and alias re-pointing, changing nothing.
pub fn append_only_refuses_what_would_change(store: &dyn Store) {
    let writer = writer(store);
    writer.restrict_to_appending();
    let w = writer.as_ref();
    let (a, b) = (minted(30), minted(31));
    place(w, &a, stage_bag(w, &a, b"kept"), false).unwrap();
    let replacing = w.stage_for(&a.name, true).map(|stage| stage_bag_in(w, stage, &a, b"changed"));
    if let Ok(stage) = replacing {
        assert!(matches!(place(w, &a, stage, true), Err(Error::Refused { .. })), "a replacement is refused");
    }
    assert!(matches!(w.remove(std::slice::from_ref(&a.name)), Err(Error::Refused { .. })));
    assert!(matches!(w.minter().set_minting(&Minting::Retired(None)), Err(Error::Refused { .. })));
    assert!(store.inventory().minting().unwrap().mints(), "an append-only writer never changes who mints");
    assert!(matches!(w.restore_alias(a.ibip.as_ref().unwrap(), &b.name), Err(Error::Refused { .. })));
    assert_eq!(read_a(store, &a.name), b"kept");
    assert_eq!(store.aliases().alias(a.ibip.as_ref().unwrap()).unwrap(), Some(a.name.clone()));
}

/// The calls no other check makes answer as the contract says: reading a file
/// whole and from an offset, identities and a check where the bytes are, the item
/// stamp, prefetch, deposit records both ways, a link into a stage, raising the
/// minter past a name, and asking whether items can be adopted.
pub fn every_other_call_answers(store: &dyn Store, other: &dyn Store) {
    assert!(!store.location().is_empty() && store.subsystem().prefix() == subsystem().prefix());
    let _ = (store.organisation(), store.local_root());
    let w = writer(store);
    let m = minted(40);
    place(w.as_ref(), &m, stage_bag(w.as_ref(), &m, b"0123456789"), false).unwrap();
    let mut whole = Vec::new();
    std::io::Read::read_to_end(&mut store.open(&m.name, "data/a.txt").unwrap().0, &mut whole).unwrap();
    assert_eq!(whole, b"0123456789");
    let mut tail = Vec::new();
    std::io::Read::read_to_end(&mut store.open_from(&m.name, "data/a.txt", 7).unwrap().0, &mut tail).unwrap();
    assert_eq!(tail, b"789");
    let identity = identity_digest(store, &m.name).unwrap();
    assert_eq!(other.identities(std::slice::from_ref(&m.name))[0].as_deref().unwrap(), identity);
    let (check, problems) = other.check_item(&m.name, &|_| {});
    assert!(problems.is_empty() && check.files == 1, "{problems:?}");
    other.prefetch(std::slice::from_ref(&m.name));
    let stamp = store.item_stamp(&m.name);
    let linked = w.stage().unwrap();
    w.stage_dir(linked, "data").unwrap();
    w.stage_link(linked, "data/a.txt", &m.name, "data/a.txt").unwrap();
    assert_eq!(w.staged_files(linked).read("data/a.txt").unwrap(), b"0123456789", "a linked file keeps its bytes");
    w.discard(linked);
    place(w.as_ref(), &m, stage_bag(w.as_ref(), &m, b"replaced"), true).unwrap();
    if stamp.is_some() {
        assert_ne!(store.item_stamp(&m.name), stamp, "a replacement changes the item's stamp");
    }
    w.minter().write_deposit_records(&[("c0ffee".into(), m.name.clone())]).unwrap();
    assert_eq!(other.inventory().deposit_record("c0ffee").unwrap(), Some(m.name.clone()));
    assert_eq!(other.inventory().deposit_record("beef").unwrap(), None);
    w.minter().raise_minter_to(m.name.date()).unwrap();
    let clock = ReplayClock::new(m.name.date().checked_add_nanos(100_000_000_000));
    assert!(w.minter().mint_dates(1, &clock).unwrap()[0] > m.name.date(), "no name at or before one raised past");
    assert!(w.adopt_from(w.as_ref(), &[]).is_ok());
}

/// A place that cosigns (`Store::cosigner`) keeps the newest checkpoint of a
/// collection it cosigned, cosigns one that extends it through the events
/// between, and refuses one that goes back or names another head, or that
/// another key signed. A place that keeps none is not asked.
pub fn cosigning_keeps_only_what_extends(store: &dyn Store, other: &dyn Store) {
    use crate::checkpoint::{self, Head};
    use crate::events::{Event, EventKind, GENESIS};
    let (Some(cosigner), Some(again)) = (store.cosigner(), other.cosigner()) else { return };
    let (seed, stranger) = ([3u8; 32], [4u8; 32]);
    let key = hex::encode(ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key().as_bytes());
    let mut prev = GENESIS.to_string();
    let events: Vec<_> = (1..=6)
        .map(|seq| {
            let stored = Event::new(EventKind::Deposit, None, "success", String::new()).seal(seq, &prev);
            prev = stored.hash.clone();
            stored
        })
        .collect();
    let origin = checkpoint::origin("urn:uuid:conformance");
    let head = |n: usize| Head { origin: origin.clone(), size: n as u64, head: events[n - 1].hash.clone() };
    assert_eq!(cosigner.seen_checkpoint(&origin).unwrap(), None);
    let first = checkpoint::sign(&head(3), &seed).unwrap();
    let cosigned = cosigner.cosign(&first, &key, &[]).unwrap();
    let (name, site_key) = cosigner.cosigner_key().unwrap().expect("a cosigner has a key");
    assert!(checkpoint::cosigned_by(&cosigned, &name, &site_key).unwrap());
    assert_eq!(again.seen_checkpoint(&origin).unwrap().as_deref(), Some(cosigned.as_str()), "kept for every handle");
    let later = checkpoint::sign(&head(6), &seed).unwrap();
    assert!(cosigner.cosign(&later, &key, &events[4..]).is_err(), "a gap in the events is refused");
    cosigner.cosign(&later, &key, &events[3..]).unwrap();
    assert!(cosigner.cosign(&first, &key, &[]).is_err(), "a checkpoint that goes back is refused");
    let stranger_key = hex::encode(ed25519_dalek::SigningKey::from_bytes(&stranger).verifying_key().as_bytes());
    let by_stranger = checkpoint::sign(&head(6), &stranger).unwrap();
    assert!(cosigner.cosign(&by_stranger, &stranger_key, &[]).is_err(), "another key is refused");
    let kept = cosigner.seen_checkpoint(&origin).unwrap().unwrap();
    assert_eq!(checkpoint::open(&kept, &key).unwrap(), head(6));
}

/// What a ledger writer is given reads back from another handle: a witness
/// (where the backend keeps the one it is handed, rather than making its own)
/// and a change to the configuration (where it keeps one here). A backend
/// that keeps none of these answers without error.
pub fn the_ledger_writer_keeps_what_it_is_given(store: &dyn Store, other: &dyn Store) {
    let Some(writer) = store.ledger().writer() else { return };
    if !store.ledger().makes_own_witness() {
        writer.keep_witness("{\"conformance\":1}").unwrap();
        if let Some(kept) = other.ledger().latest_witness().unwrap() {
            assert_eq!(kept, "{\"conformance\":1}", "the witness kept is the one read");
        }
    }
    let zone = Some("conformance-zone".to_string());
    let changed = writer
        .change_config(&mut |config| {
            config.zone = zone.clone();
            Ok(())
        })
        .unwrap();
    if let Some(changed) = changed {
        assert_eq!(changed.zone, zone);
        let read = other.inventory().current_config().unwrap().expect("a backend that changes its config reads it");
        assert_eq!(read.zone, zone, "another handle reads the change");
    }
}

/// One check of the list: its name, and how it runs on a handle and a reopener.
pub type Check<S, F> = (&'static str, Box<dyn Fn(&S, &F)>);

/// The one list of conformance checks, which every backend in this crate and
/// one outside it (`run_all`) run: each needs a fresh, empty collection, a
/// handle on it and a function that opens another handle.
pub fn checks<S: Store + 'static, F: Fn() -> S>() -> Vec<Check<S, F>> {
    fn check<S, F>(name: &'static str, run: impl Fn(&S, &F) + 'static) -> Check<S, F> {
        (name, Box::new(run))
    }
    vec![
        check::<S, F>("minting_role_is_kept_and_obeyed", |s, r| minting_role_is_kept_and_obeyed(s, &r())),
        check::<S, F>("a_batch_is_answered_as_each_name", |s, _| a_batch_is_answered_as_each_name(s)),
        check::<S, F>("placement_never_overwrites", |s, _| placement_never_overwrites(s)),
        check::<S, F>("walk_is_in_name_order", |s, _| walk_is_in_name_order(s)),
        check::<S, F>("aliases_follow_placement_and_removal", |s, _| aliases_follow_placement_and_removal(s)),
        check::<S, F>("lease_is_exclusive", |s, r| lease_is_exclusive(s, &r())),
        check::<S, F>("one_of_two_concurrent_placements_wins", |s, _| one_of_two_concurrent_placements_wins(s)),
        check::<S, F>("recovery_clears_an_interrupted_batch", |s, r| {
            recovery_clears_an_interrupted_batch(Box::new(r()), s)
        }),
        check::<S, F>("inventory", |s, r| inventory_records_placement_replacement_and_removal(s, &r())),
        check::<S, F>("log", |s, r| log_records_each_change_once_in_a_chain(s, &r())),
        check::<S, F>("a_copy_carries_no_fixity_checks", |s, r| a_copy_carries_no_fixity_checks(s, &r())),
        check::<S, F>("a_repair_keeps_what_it_replaces", |s, _| a_repair_keeps_what_it_replaces(s)),
        check::<S, F>("staging_for_a_name", |s, r| staging_for_a_name_is_unseen_until_placed(s, &r(), Box::new(r()))),
        check::<S, F>("stages_begun_together", |s, r| {
            stages_begun_together_are_each_placed_or_cleared(s, &r(), Box::new(r()))
        }),
        check::<S, F>("minter_state_never_repeats", |s, r| minter_state_never_repeats(s, &r())),
        check::<S, F>("reads_during_a_write_see_old_or_new", |s, r| reads_during_a_write_see_old_or_new(s, &r())),
        check::<S, F>("append_only_refuses_what_would_change", |s, _| append_only_refuses_what_would_change(s)),
        check::<S, F>("a_chain_cursor_reads_back_from_another_handle", |s, r| {
            a_chain_cursor_reads_back_from_another_handle(s, &r())
        }),
        check::<S, F>("cosigning_keeps_only_what_extends", |s, r| cosigning_keeps_only_what_extends(s, &r())),
        check::<S, F>("every_other_call_answers", |s, r| every_other_call_answers(s, &r())),
        check::<S, F>("the_ledger_writer_keeps_what_it_is_given", |s, r| {
            the_ledger_writer_keeps_what_it_is_given(s, &r())
        }),
        check::<S, F>("kept_checksums_are_the_files_own", |s, _| kept_checksums_are_the_files_own(s)),
    ]
}

/// A backend whose store keeps checksums (`store::attest`) attests only the
/// digest a file has: for each file of a placed item it answers none, or the
/// file's own SHA-256; a file that is not there is an error, never attested.
pub fn kept_checksums_are_the_files_own(store: &dyn Store) {
    let Some(checksums) = store.store_checksums() else { return };
    let w = writer(store);
    let a = minted(17);
    place(w.as_ref(), &a, stage_bag(w.as_ref(), &a, b"attested"), false).unwrap();
    drop(w);
    let payload = crate::fsx::hash_bytes(b"attested");
    if let Some(kept) = checksums.stored_sha256(&a.name, "data/a.txt").unwrap() {
        assert_eq!(kept, payload, "the store keeps the file's own digest");
    }
    let tags = store.item_files(&a.name).read(crate::bag::TAGMANIFEST).unwrap();
    if let Some(kept) = checksums.stored_sha256(&a.name, crate::bag::TAGMANIFEST).unwrap() {
        assert_eq!(kept, crate::fsx::hash_bytes(&tags));
    }
    let gone = checksums.stored_sha256(&a.name, "data/never-there.txt");
    assert!(!matches!(gone, Ok(Some(_))), "a file that is not there is never attested: {gone:?}");
}

/// Runs one check on a handle and a reopener; a failure names the check.
pub fn run_one<S, F>(name: &str, check: &dyn Fn(&S, &F), store: &S, reopen: &F) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(store, reopen)));
    if let Err(panic) = ran {
        let why =
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
        panic!("conformance check {name} failed: {}", why.unwrap_or_default());
    }
}

/// Every check, for a backend outside this crate: `fresh` makes a new, empty
/// collection and returns a handle and a function that opens another handle on it.
pub fn run_all<S: Store + 'static, F: Fn() -> S>(fresh: impl Fn() -> (S, F)) {
    for (name, check) in checks::<S, F>() {
        let (store, reopen) = fresh();
        run_one(name, &*check, &store, &reopen);
    }
}

/// Fresh collections of each backend in this crate, for the suite and for tests
/// of operations over any store.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::subsystem;
    use crate::store::config::CollectionConfig;
    use crate::store::local::Collection;
    use crate::store::memory::MemoryStore;
    #[cfg(feature = "s3")]
    use crate::store::s3::{objects::Objects, S3Store};

    pub fn local() -> (Collection, impl Fn() -> Collection, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("c");
        let minters = dir.path().join("minters");
        let config = crate::store::config::CollectionConfig::new(&subsystem(), None);
        let store = Collection::init(&root, &config, Some(minters.clone())).unwrap();
        (store, move || Collection::open(&root).unwrap().with_minter_dir(&minters), dir)
    }

    #[cfg(feature = "far")]
    /// A far collection served by `far::serve` on a thread, over pipes: each handle is a session of its own.
    pub fn far() -> (crate::store::far::FarStore, impl Fn() -> crate::store::far::FarStore, tempfile::TempDir) {
        use crate::store::far::{conn::Connection, serve, FarStore};
        let (local, _, dir) = local();
        let root = local.layout.root.clone();
        let minters = dir.path().join("minters");
        let session = move || {
            let (from_client, to_server) = std::io::pipe().unwrap();
            let (from_server, to_client) = std::io::pipe().unwrap();
            let options = serve::ServeOptions { minter_dir: Some(minters.clone()), ..Default::default() };
            std::thread::spawn(move || serve::serve(options, from_client, Box::new(to_client)));
            let conn = Connection::over("lab:c".into(), from_server, to_server, "ibi").unwrap();
            FarStore::open_on(conn, &root, "lab:c").unwrap()
        };
        (session(), session, dir)
    }

    pub fn memory() -> (MemoryStore, impl Fn() -> MemoryStore, ()) {
        let store = MemoryStore::new(subsystem());
        let other = store.handle();
        (store, move || other.handle(), ())
    }

    #[cfg(feature = "s3")]
    /// The object-storage backend over `object_store`'s in-memory store (conditional
    /// writes included); `tests/it/s3.rs` runs it against a real S3 server.
    pub fn object_store_in_memory() -> (S3Store, impl Fn() -> S3Store, tempfile::TempDir) {
        let memory: std::sync::Arc<dyn object_store::ObjectStore> =
            std::sync::Arc::new(object_store::memory::InMemory::new());
        let objects = Objects::new(memory, "s3://memory/c".into()).unwrap();
        let config = CollectionConfig::new(&subsystem(), None);
        let minters = tempfile::tempdir().unwrap();
        let dir = minters.path().to_path_buf();
        let store = S3Store::init_on(objects.clone(), "c", &config, false).unwrap().with_minter_dir(&dir);
        (store, move || S3Store::open_on(objects.clone(), "c").unwrap().with_minter_dir(&dir), minters)
    }
}

#[cfg(all(test, feature = "far", feature = "s3"))]
pub(crate) use fixtures::{far, local, object_store_in_memory};

/// Where a chain check ended is kept by the backend and read back by another
/// handle, the last kept replacing the one before; a backend that checks its
/// own chain (far) keeps its cursor on its own side, where no client reads it.
pub fn a_chain_cursor_reads_back_from_another_handle(store: &dyn Store, other: &dyn Store) {
    use crate::events::ChainCursor;
    if store.ledger().checks_own_chain() {
        assert_eq!(other.ledger().chain_cursor().unwrap(), None);
        return;
    }
    assert_eq!(
        other.ledger().chain_cursor().unwrap(),
        None,
        "a new collection has none: its first check reads the log whole"
    );
    let first = ChainCursor { through: 7, hash: "ab".repeat(32), window_next: 3 };
    let writer = store.ledger().writer().expect("a writable handle hands out its ledger writer");
    writer.keep_chain_cursor(&first).unwrap();
    assert_eq!(other.ledger().chain_cursor().unwrap(), Some(first));
    let later = ChainCursor { through: 9, hash: "cd".repeat(32), window_next: 1 };
    writer.keep_chain_cursor(&later).unwrap();
    assert_eq!(other.ledger().chain_cursor().unwrap(), Some(later), "the last kept replaces the one before");
}

#[cfg(test)]
mod each_backend {
    use super::fixtures;

    /// Runs the one list (`checks`) against a backend: `$fresh` makes a new,
    /// empty collection and returns a handle, a function that opens another
    /// handle on it, and what keeps it alive.
    macro_rules! backends {
        ($($backend:ident => $fresh:expr;)*) => {$(
            #[test]
            fn $backend() {
                for (name, check) in super::checks() {
                    let (store, reopen, _dir) = $fresh;
                    super::run_one(name, &*check, &store, &reopen);
                }
            }
        )*};
    }

    backends! {
        local_folder => fixtures::local();
        in_memory => fixtures::memory();
    }

    #[cfg(feature = "s3")]
    backends! {
        object_store_in_memory => fixtures::object_store_in_memory();
    }

    #[cfg(feature = "far")]
    backends! {
        far_over_pipes => fixtures::far();
    }
}
