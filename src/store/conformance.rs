//! The shared conformance suite: the same checks of the `Store` contract run
//! against every backend (local folder, memory, far over pipes, object storage in memory). A new backend adds one line
//! to `backends!` and must pass them all.

use std::io::Cursor;
use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use crate::bag::{self, verify_bag, BagContents, BagInfo};
use crate::digest::Digests;
use crate::error::Error;
use crate::id::minter::ReplayClock;
use crate::id::{Granularity, Minted, RepositoryName, Subsystem, Timestamp};
use crate::store::local::config::CollectionConfig;
use crate::store::local::Collection;
use crate::store::memory::MemoryStore;
use crate::store::s3::objects::Objects;
use crate::store::s3::S3Store;
use crate::store::{
    identity_digest, FileSource, ItemRecord, Listed, LockWait, Placement, Slot, StageId, Status, Store,
};

pub(crate) fn subsystem() -> Subsystem {
    Subsystem::new("conformance.example.org", 80, Some("192.0.2.7".parse().unwrap()), 800, Granularity::MILLISECOND)
        .unwrap()
}

/// A name and IBIp at `seconds` past 2026-01-01.
fn minted(seconds: i128) -> Minted {
    let base = Timestamp::parse_user("2026-01-01T00:00:00Z").unwrap();
    subsystem().identify(base.checked_add_nanos(seconds * 1_000_000_000)).unwrap()
}

fn stage_bytes(store: &dyn Store, stage: StageId, rel: &str, bytes: &[u8]) -> Digests {
    let mut reader = Cursor::new(bytes.to_vec());
    let source = FileSource { reader: &mut reader, origin: Path::new(rel), mtime: None, also: &[], progress: &|_| {} };
    store.stage_file(stage, rel, source).map_err(Error::from).unwrap()
}

/// Stages a complete bag for `m` holding `data/a.txt` = `content`.
fn stage_bag(store: &dyn Store, m: &Minted, content: &[u8]) -> StageId {
    stage_bag_in(store, store.stage().unwrap(), m, content)
}

/// Stages the bag into `stage`.
fn stage_bag_in(store: &dyn Store, stage: StageId, m: &Minted, content: &[u8]) -> StageId {
    store.stage_dir(stage, "data").unwrap();
    let payload = vec![("data/a.txt".to_string(), stage_bytes(store, stage, "data/a.txt", content))];
    let mut info = BagInfo::default();
    info.push("External-Identifier", m.name.to_string());
    info.push("External-Identifier", m.ibip.as_ref().unwrap().to_string());
    info.push("Payload-Oxum", format!("{}.1", content.len()));
    let contents = BagContents { info: &info, algorithms: &[], payload: &payload, tag_files: &[] };
    bag::write_tag_files_with(&contents, &mut |name, bytes| {
        stage_bytes(store, stage, name, bytes);
        Ok(())
    })
    .unwrap();
    stage
}

fn place(store: &dyn Store, m: &Minted, stage: StageId, replace: bool) -> Result<(), Error> {
    let batch = [Placement { stage, name: m.name.clone(), ibip: m.ibip, replace, record: None }];
    let mut outcomes = store.place(&batch).unwrap();
    assert_eq!(outcomes.len(), 1);
    outcomes.remove(0).1
}

fn read_a(store: &dyn Store, name: &RepositoryName) -> Vec<u8> {
    store.item_files(name).read("data/a.txt").unwrap()
}

pub(crate) fn names(store: &dyn Store) -> Vec<RepositoryName> {
    store
        .walk()
        .filter_map(|l| match l.unwrap() {
            Listed::Item(name) => Some(name),
            Listed::Stray { .. } => None,
        })
        .collect()
}

pub fn placement_never_overwrites(store: &dyn Store) {
    let _lease = store.lease(LockWait::No).unwrap();
    let m = minted(1);
    let first = stage_bag(store, &m, b"first");
    assert!(verify_bag(store.staged_files(first).as_ref(), "staged", &|_| {}).problems.is_empty());
    place(store, &m, first, false).unwrap();
    let second = stage_bag(store, &m, b"second");
    let refused = place(store, &m, second, false);
    assert!(matches!(refused, Err(Error::AlreadyExists { .. })), "a second placement is refused: {refused:?}");
    assert_eq!(read_a(store, &m.name), b"first");
    let third = stage_bag(store, &m, b"third");
    place(store, &m, third, true).unwrap();
    assert_eq!(read_a(store, &m.name), b"third", "a replacement replaces");
    assert!(verify_bag(store.item_files(&m.name).as_ref(), "placed", &|_| {}).problems.is_empty());
}

pub fn walk_is_in_name_order(store: &dyn Store) {
    let _lease = store.lease(LockWait::No).unwrap();
    let all: Vec<Minted> = [5, 1, 4, 2, 3, 600, 3_000_000].iter().map(|s| minted(*s)).collect();
    for m in &all {
        let stage = stage_bag(store, m, m.name.to_string().as_bytes());
        place(store, m, stage, false).unwrap();
    }
    let mut expected: Vec<RepositoryName> = all.iter().map(|m| m.name.clone()).collect();
    expected.sort();
    assert_eq!(names(store), expected);
}

pub fn aliases_follow_placement_and_removal(store: &dyn Store) {
    let _lease = store.lease(LockWait::No).unwrap();
    let m = minted(7);
    let ibip = m.ibip.unwrap();
    assert_eq!(store.alias(&ibip).unwrap(), None);
    let stage = stage_bag(store, &m, b"x");
    place(store, &m, stage, false).unwrap();
    assert_eq!(store.alias(&ibip).unwrap(), Some(m.name.clone()));
    assert_eq!(store.alias_problem(&ibip, &m.name), None);
    assert_eq!(store.slot(&m.name).unwrap(), Slot::Item);
    let before = identity_digest(store, &m.name).unwrap();
    assert_eq!(before.len(), 64);
    assert!(store.dangling_aliases().unwrap().is_empty());
    store.restore_alias(&ibip, &m.name).unwrap();
    assert_eq!(store.alias(&ibip).unwrap(), Some(m.name.clone()), "restoring a right alias keeps it right");
    store.remove(std::slice::from_ref(&m.name)).unwrap();
    assert_eq!(store.alias(&ibip).unwrap(), None);
    assert!(store.dangling_aliases().unwrap().is_empty(), "removal takes the alias with it");
    assert_eq!(store.slot(&m.name).unwrap(), Slot::Empty);
    assert!(names(store).is_empty());
}

pub fn lease_is_exclusive(store: &dyn Store, other: &dyn Store) {
    let held = store.lease(LockWait::No).unwrap();
    assert!(matches!(other.lease(LockWait::No), Err(Error::Locked { .. })), "a second writer is refused");
    let waited = other.lease(LockWait::For(std::time::Duration::from_millis(200)));
    assert!(matches!(waited, Err(Error::Locked { .. })), "and refused after waiting");
    drop(held);
    other.lease(LockWait::No).expect("free once released");
}

/// Two placements of one name at once, from two threads of the lease holder.
pub fn one_of_two_concurrent_placements_wins(store: &dyn Store) {
    let _lease = store.lease(LockWait::No).unwrap();
    let other = store;
    for round in 0..20 {
        let m = minted(100 + round);
        let a = stage_bag(store, &m, b"from a");
        let b = stage_bag(other, &m, b"from b");
        let barrier = Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                barrier.wait();
                place(store, &m, a, false)
            });
            let tb = s.spawn(|| {
                barrier.wait();
                place(other, &m, b, false)
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(ra.is_ok() != rb.is_ok(), "round {round}: exactly one wins: {ra:?} {rb:?}");
        assert!(matches!((&ra, &rb), (Err(Error::AlreadyExists { .. }), _) | (_, Err(Error::AlreadyExists { .. }))));
        let winner: &[u8] = if ra.is_ok() { b"from a" } else { b"from b" };
        assert_eq!(read_a(store, &m.name), winner);
    }
}

/// A writer killed with an item staged: the next one's `recover` clears it, and it
/// was never an item.
pub fn recovery_clears_an_interrupted_batch(killed: Box<dyn Store>, next: &dyn Store) {
    let m = minted(9);
    let lease = killed.lease(LockWait::No).unwrap();
    let stage = stage_bag(killed.as_ref(), &m, b"never placed");
    assert!(names(next).is_empty(), "staging is never an item");
    // A round trip after the staged files, so that none is still on its way when the writer "dies".
    let _ = killed.staged_files(stage).entries();
    drop(lease);
    std::mem::forget(killed);
    assert!(!next.leftovers().is_empty(), "the killed writer's staging is seen as left over");
    let _lease = next.lease(LockWait::No).unwrap();
    next.recover().unwrap();
    assert!(next.leftovers().is_empty(), "nothing is left over");
    assert!(names(next).is_empty());
    assert!(next.staged_files(stage).root_kind().is_err(), "the staged item is gone");
}

/// A stage made for a known name (`stage_for`) is unseen until placed, a second
/// writer of the name never changes the placed item, and a killed writer's direct
/// stage is cleared by `recover`, leaving nothing in a later item of that name.
pub fn staging_for_a_name_is_unseen_until_placed(store: &dyn Store, other: &dyn Store, killed: Box<dyn Store>) {
    let m = minted(11);
    let lease = store.lease(LockWait::No).unwrap();
    let stage = stage_bag_in(store, store.stage_for(&m.name, false).unwrap(), &m, b"direct");
    assert!(names(other).is_empty() && other.slot(&m.name).unwrap() == Slot::Empty, "unseen until placed");
    place(store, &m, stage, false).unwrap();
    drop(lease);
    assert_eq!(read_a(other, &m.name), b"direct");
    if let Ok(second) = other.stage_for(&m.name, false) {
        other.stage_dir(second, "data").unwrap();
        let mut reader = Cursor::new(b"intruder".to_vec());
        let source =
            FileSource { reader: &mut reader, origin: Path::new("x"), mtime: None, also: &[], progress: &|_| {} };
        if other.stage_file(second, "data/a.txt", source).is_ok() {
            // Refused for the name, or as a whole (a far server: this handle holds no lease).
            let batch = [Placement { stage: second, name: m.name.clone(), ibip: m.ibip, replace: false, record: None }];
            assert!(other.place(&batch).map_or(true, |o| o[0].1.is_err()), "the name is taken");
        }
        other.discard(second);
    }
    assert_eq!(read_a(store, &m.name), b"direct", "a second writer changed nothing");
    assert!(verify_bag(store.item_files(&m.name).as_ref(), "placed", &|_| {}).problems.is_empty());

    let (writer, killed) = (killed, minted(12));
    let lease = writer.lease(LockWait::No).unwrap();
    let stage = stage_bag_in(writer.as_ref(), writer.stage_for(&killed.name, false).unwrap(), &killed, b"killed");
    let mut reader = Cursor::new(b"left behind".to_vec());
    let source = FileSource { reader: &mut reader, origin: Path::new("x"), mtime: None, also: &[], progress: &|_| {} };
    writer.stage_file(stage, "data/extra.txt", source).map_err(Error::from).unwrap();
    let _ = writer.staged_files(stage).entries();
    drop(lease);
    std::mem::forget(writer);
    // A far session's last frames may still be landing: give them a moment.
    let seen = (0..100).any(|_| {
        let found = !other.leftovers().is_empty();
        if !found {
            std::thread::sleep(Duration::from_millis(20));
        }
        found
    });
    assert!(seen, "the killed writer's stage is seen as left over");
    let _lease = other.lease(LockWait::No).unwrap();
    other.recover().unwrap();
    assert!(other.leftovers().is_empty() && other.slot(&killed.name).unwrap() == Slot::Empty);
    let again = stage_bag_in(other, other.stage_for(&killed.name, false).unwrap(), &killed, b"again");
    place(other, &killed, again, false).unwrap();
    let check = verify_bag(other.item_files(&killed.name).as_ref(), "again", &|_| {});
    assert!(check.problems.is_empty(), "nothing of the killed stage is left: {:?}", check.problems);
}

pub fn minter_state_never_repeats(store: &dyn Store, other: &dyn Store) {
    let start = Timestamp::parse_user("2026-01-01T00:00:00Z").unwrap();
    let dates: Vec<Vec<Timestamp>> = std::thread::scope(|s| {
        [store, other]
            .map(|st| {
                s.spawn(move || {
                    let clock = ReplayClock::new(start);
                    (0..100).flat_map(|_| st.mint_dates(1, &clock).unwrap()).collect()
                })
            })
            .map(|t| t.join().unwrap())
            .into_iter()
            .collect()
    });
    let mut all: Vec<Timestamp> = dates.concat();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 200, "no date handed out twice");
}

pub fn inventory_records_placement_replacement_and_removal(store: &dyn Store, other: &dyn Store) {
    let _lease = store.lease(LockWait::No).unwrap();
    assert!(store.has_inventory() && store.collection_id().is_some_and(|id| id.starts_with("urn:uuid:")));
    let (a, b) = (minted(1), minted(2));
    place(store, &a, stage_bag(store, &a, b"first"), false).unwrap();
    place(store, &b, stage_bag(store, &b, b"other"), false).unwrap();
    let records = other.records(&[a.name.clone(), b.name.clone(), minted(3).name]).unwrap();
    let first = records[0].as_ref().expect("a placed item is recorded, and another handle sees it");
    assert_eq!((first.status, first.ibip, first.versions.len()), (Status::Present, a.ibip, 1));
    assert_eq!(first.current().digest, identity_digest(store, &a.name).unwrap());
    assert!(records[1].is_some() && records[2].is_none());
    place(store, &a, stage_bag(store, &a, b"replaced"), true).unwrap();
    let replaced = store.records(std::slice::from_ref(&a.name)).unwrap().remove(0).unwrap();
    assert_eq!(replaced.current().digest, identity_digest(store, &a.name).unwrap());
    assert_ne!(replaced.current().digest, first.current().digest);
    store.remove(std::slice::from_ref(&b.name)).unwrap();
    let all: Vec<ItemRecord> = other.all_records().map(Result::unwrap).collect();
    let seen: Vec<(RepositoryName, Status)> = all.iter().map(|r| (r.name.clone(), r.status)).collect();
    assert_eq!(seen, [(a.name, Status::Present), (b.name, Status::Removed)], "a removed item stays known");
}

/// Runs every check against a backend: `$fresh` makes a new, empty collection and
/// returns (a handle, a function that opens another handle on it).
macro_rules! backends {
    ($($backend:ident => $fresh:expr;)*) => {$(
        mod $backend {
            use super::*;

            #[test]
            fn placement_never_overwrites() {
                let (store, _reopen, _dir) = $fresh;
                super::placement_never_overwrites(&store);
            }

            #[test]
            fn walk_is_in_name_order() {
                let (store, _reopen, _dir) = $fresh;
                super::walk_is_in_name_order(&store);
            }

            #[test]
            fn aliases_follow_placement_and_removal() {
                let (store, _reopen, _dir) = $fresh;
                super::aliases_follow_placement_and_removal(&store);
            }

            #[test]
            fn lease_is_exclusive() {
                let (store, reopen, _dir) = $fresh;
                super::lease_is_exclusive(&store, &reopen());
            }

            #[test]
            fn one_of_two_concurrent_placements_wins() {
                let (store, _reopen, _dir) = $fresh;
                super::one_of_two_concurrent_placements_wins(&store);
            }

            #[test]
            fn recovery_clears_an_interrupted_batch() {
                let (store, reopen, _dir) = $fresh;
                super::recovery_clears_an_interrupted_batch(Box::new(reopen()), &store);
            }

            #[test]
            fn inventory_records_placement_replacement_and_removal() {
                let (store, reopen, _dir) = $fresh;
                super::inventory_records_placement_replacement_and_removal(&store, &reopen());
            }

            #[test]
            fn staging_for_a_name_is_unseen_until_placed() {
                let (store, reopen, _dir) = $fresh;
                super::staging_for_a_name_is_unseen_until_placed(&store, &reopen(), Box::new(reopen()));
            }

            #[test]
            fn minter_state_never_repeats() {
                let (store, reopen, _dir) = $fresh;
                super::minter_state_never_repeats(&store, &reopen());
            }
        }
    )*};
}

pub(crate) fn local() -> (Collection, impl Fn() -> Collection, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("c");
    let minters = dir.path().join("minters");
    let store = Collection::init(&root, subsystem(), None).unwrap().with_minter_dir(&minters);
    (store, move || Collection::open(&root).unwrap().with_minter_dir(&minters), dir)
}

/// A far collection served by `far::serve` on a thread, over pipes: each handle is a session of its own.
pub(crate) fn far() -> (crate::store::far::FarStore, impl Fn() -> crate::store::far::FarStore, tempfile::TempDir) {
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

fn memory() -> (MemoryStore, impl Fn() -> MemoryStore, ()) {
    let store = MemoryStore::new(subsystem());
    let other = store.handle();
    (store, move || other.handle(), ())
}

/// The object-storage backend over `object_store`'s in-memory store (conditional
/// writes included); `tests/it/s3.rs` runs it against a real S3 server.
pub(crate) fn object_store_in_memory() -> (S3Store, impl Fn() -> S3Store, tempfile::TempDir) {
    let memory: std::sync::Arc<dyn object_store::ObjectStore> =
        std::sync::Arc::new(object_store::memory::InMemory::new());
    let objects = Objects::new(memory, "s3://memory/c".into()).unwrap();
    let config = CollectionConfig::new(&subsystem(), None);
    let minters = tempfile::tempdir().unwrap();
    let dir = minters.path().to_path_buf();
    let store = S3Store::init_on(objects.clone(), "c", &config, false).unwrap().with_minter_dir(&dir);
    (store, move || S3Store::open_on(objects.clone(), "c").unwrap().with_minter_dir(&dir), minters)
}

backends! {
    local_folder => local();
    object_store_in_memory => object_store_in_memory();
    in_memory => memory();
    far_over_pipes => far();
}
