//! A backend written outside the crate, as a user of the library would write
//! one: every `Store` and `WriteBackend` call delegates to the in-memory backend,
//! and `begin_write` hands out the library's `Leased` writer. It must pass the
//! public conformance suite (feature `conformance`), which this test runs.

use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

use ibi::bag::{BagCheck, BagFiles};
use ibi::digest::Digests;
use ibi::fsx::CopyError;
use ibi::id::minter::MinterState;
use ibi::store::memory::MemoryStore;
use ibi::store::{
    conformance, FileSource, ItemRecord, Lease, Leased, Listed, LockWait, Placed, Placement, Slot, StageId, Store,
    WriteBackend, Writer,
};
use ibi::{Ibip, Problem, RepositoryName, Result, Subsystem};

/// The out-of-tree backend: a thin shell around a memory store.
struct Shell(MemoryStore);

impl Store for Shell {
    fn aliases(&self) -> &dyn ibi::store::aliases::Aliases {
        self
    }

    fn inventory(&self) -> &dyn ibi::store::records::Records {
        self
    }

    /// The memory store's ledger, whole: the shell keeps no records of its own.
    fn ledger(&self) -> &dyn ibi::store::ledger::Ledger {
        self.0.ledger()
    }

    fn location(&self) -> String {
        format!("shell:{}", self.0.location())
    }
    fn local_root(&self) -> Option<&Path> {
        None
    }
    fn subsystem(&self) -> &Subsystem {
        self.0.subsystem()
    }
    fn organisation(&self) -> Option<&str> {
        None
    }
    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_> {
        self.0.walk()
    }
    fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        self.0.slot(name)
    }
    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a> {
        self.0.item_files(name)
    }
    fn check_item(&self, name: &RepositoryName, on_bytes: &(dyn Fn(u64) + Sync)) -> (BagCheck, Vec<Problem>) {
        self.0.check_item(name, on_bytes)
    }
    fn open(
        &self,
        name: &RepositoryName,
        rel: &str,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        self.0.open(name, rel)
    }
    fn as_dyn(&self) -> &dyn Store {
        self
    }
    fn leftovers(&self) -> Vec<Problem> {
        self.0.leftovers()
    }
    fn begin_write(&self, wait: LockWait) -> Result<Box<dyn Writer + '_>> {
        Leased::begin(self, wait)
    }
}

impl ibi::store::aliases::Aliases for Shell {
    fn alias(&self, ibip: &Ibip) -> Result<Option<RepositoryName>> {
        self.0.alias(ibip)
    }

    fn dangling_aliases(&self, checked: &dyn Fn(&Ibip) -> bool) -> Result<Vec<(Ibip, RepositoryName)>> {
        self.0.dangling_aliases(checked)
    }

    fn alias_problem(&self, ibip: &Ibip, name: &RepositoryName) -> Option<String> {
        self.0.alias_problem(ibip, name)
    }
}

impl ibi::store::records::Records for Shell {
    fn has_inventory(&self) -> bool {
        self.0.has_inventory()
    }
    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        self.0.records(names)
    }
    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_> {
        self.0.all_records()
    }
    fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>> {
        self.0.deposit_record(key)
    }

    fn collection_id(&self) -> Option<String> {
        self.0.collection_id()
    }

    fn minting(&self) -> ibi::Result<ibi::store::Minting> {
        self.0.minting()
    }
}

impl WriteBackend for Shell {
    fn lease(&self, wait: LockWait) -> Result<Lease> {
        self.0.lease(wait)
    }
    fn recover(&self) -> Result<()> {
        self.0.recover()
    }
    fn minter_state(&self) -> Box<dyn MinterState + '_> {
        self.0.minter_state()
    }
    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()> {
        self.0.write_deposit_records(records)
    }
    fn stage(&self) -> Result<StageId> {
        self.0.stage()
    }
    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()> {
        self.0.stage_dir(stage, rel)
    }
    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError> {
        self.0.stage_file(stage, rel, from)
    }
    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a> {
        self.0.staged_files(stage)
    }
    fn discard(&self, stage: StageId) {
        self.0.discard(stage)
    }
    fn place(&self, batch: &[Placement]) -> Result<Placed> {
        self.0.place(batch)
    }
    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
        self.0.restore_alias(ibip, name)
    }
    fn remove(&self, names: &[RepositoryName]) -> Result<()> {
        self.0.remove(names)
    }
    fn note_moved(&self, names: &[RepositoryName], to: &ibi::store::inventory::Forward) -> Result<()> {
        self.0.note_moved(names, to)
    }
    fn set_minting(&self, minting: &ibi::store::Minting) -> Result<()> {
        self.0.set_minting(minting)
    }
}

#[test]
fn a_backend_outside_the_crate_passes_the_public_conformance_suite() {
    conformance::run_all(|| {
        let store = MemoryStore::new(conformance::subsystem());
        let other = store.handle();
        (Shell(store), move || Shell(other.handle()))
    });
}
