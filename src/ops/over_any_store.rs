//! Operations over any store: deposit into memory, copy to another memory
//! collection, mirror into a local folder, on into a far one and into object storage,
//! verify them all, and a damaged copy is found and repaired. Proof that ops need nothing but the `Store` seam.

#[cfg(all(test, feature = "far", feature = "s3"))]
mod tests {
    use crate::error::{Error, Result};
    use crate::id::minter::SystemClock;
    use crate::id::RepositoryName;
    use crate::ops::copy::{transfer, TransferKind, TransferOptions};
    use crate::ops::deposit::{deposit, DepositOptions};
    use crate::ops::minting::{handover, HandoverOptions};
    use crate::ops::mirror::{mirror, MirrorOptions};
    use crate::ops::repair::{repair, RepairOptions};
    use crate::ops::verify::verify;
    use crate::ops::Silent;
    use crate::store::config::Peer;
    use crate::store::conformance::{far, local, names, object_store_in_memory, subsystem};
    use crate::store::memory::MemoryStore;
    use crate::store::{identity_digest, LockWait, Minting, Store};

    #[test]
    fn deposit_copy_mirror_and_verify_across_backends() {
        let sources = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for i in 0..5 {
            let path = sources.path().join(format!("s{i}"));
            std::fs::create_dir_all(path.join("sub")).unwrap();
            std::fs::write(path.join("sub/f.txt"), format!("file {i}")).unwrap();
            paths.push(path);
        }
        let a = MemoryStore::new(subsystem());
        let options = DepositOptions { each: true, ..DepositOptions::default() };
        let count = deposit(&a, &paths, &options, &SystemClock, &Silent, &mut |_| {}).unwrap();
        assert_eq!(count, 5);
        assert_eq!(names(&a).len(), 5);
        assert_eq!(verify(&a, &[], &Silent).unwrap().problems, 0);

        let b = MemoryStore::new(subsystem());
        follow(&b, &a);
        let copy = TransferOptions { dry_run: false, wait: LockWait::No, forward_url: None };
        let summary = transfer(TransferKind::Copy, &a, &b, &[], copy.clone(), &Silent).unwrap();
        assert_eq!((summary.copied, summary.problems), (5, 0));
        assert_eq!(names(&b), names(&a));

        let (c, _reopen, _dir) = local();
        follow(&c, &a);
        let options = MirrorOptions { dry_run: false, wait: LockWait::No, checksum: true };
        assert_eq!(mirror(&b, &c, &options, &Silent).unwrap().copied, 5);
        assert_eq!(verify(&c, &[], &Silent).unwrap().problems, 0);
        for name in names(&a) {
            assert_eq!(identity_digest(&a, &name).unwrap(), identity_digest(&c, &name).unwrap());
        }

        // A damaged copy in C is found by verify and repaired by mirror --checksum.
        let victim = names(&c)[0].clone();
        std::fs::write(c.layout.item(&victim).join("data/sub/f.txt"), b"rotten").unwrap();
        assert_eq!(verify(&c, &[], &Silent).unwrap().problems, 1);
        let repaired = mirror(&b, &c, &options, &Silent).unwrap();
        assert_eq!(repaired.replaced, 1);
        assert_eq!(verify(&c, &[], &Silent).unwrap().problems, 0);

        // A far collection (served over pipes): mirror into it, damage it there, verify
        // finds it, mirror --checksum repairs it.
        let (d, _reopen, far_dir) = far();
        follow(&d, &a);
        assert_eq!(mirror(&c, &d, &options, &Silent).unwrap().copied, 5);
        assert_eq!(verify(&d, &[], &Silent).unwrap().problems, 0);
        std::fs::write(far_dir.path().join("c").join(victim.to_string()).join("data/sub/f.txt"), b"rotten").unwrap();
        assert_eq!(verify(&d, &[], &Silent).unwrap().problems, 1);
        assert_eq!(mirror(&c, &d, &options, &Silent).unwrap().replaced, 1);
        assert_eq!(verify(&d, &[], &Silent).unwrap().problems, 0);

        object_storage_is_mirrored_damaged_repaired_and_migrated_out(&d, &victim);

        // Migrate: B already holds identical copies, so A's items are re-verified in B and removed from A.
        let summary = transfer(TransferKind::Migrate, &a, &b, &[], copy, &Silent).unwrap();
        assert_eq!((summary.skipped, summary.migrated), (5, 5));
        assert!(names(&a).is_empty(), "migrate removed what B verifiably holds");
    }

    /// Makes `store` follow `minting`: one subsystem has one minting collection.
    fn follow(store: &dyn Store, minting: &dyn Store) {
        let peer = Peer { id: minting.inventory().collection_id().unwrap(), location: minting.location() };
        store.begin_write(LockWait::No).unwrap().minter().set_minting(&Minting::Follows(peer)).unwrap();
    }

    /// A collection in object storage (object_store's in-memory store): mirror into
    /// it, overwrite an object behind ibi's back, verify names it, mirror repairs it,
    /// migrate empties it.
    fn object_storage_is_mirrored_damaged_repaired_and_migrated_out(d: &dyn Store, victim: &RepositoryName) {
        let options = MirrorOptions { dry_run: false, wait: LockWait::No, checksum: true };
        let (e, _reopen, _minters) = object_store_in_memory();
        follow(&e, d);
        assert_eq!(mirror(d, &e, &options, &Silent).unwrap().copied, 5);
        assert_eq!(verify(&e, &[], &Silent).unwrap().problems, 0);
        let key = e.keys.item_file(victim, "data/sub/f.txt", crate::store::s3::keys::KeyForm::Names);
        e.objects.run(e.objects.overwrite(&key, b"rotten".to_vec())).unwrap();
        assert_eq!(verify(&e, &[], &Silent).unwrap().problems, 1);
        assert_eq!(mirror(d, &e, &options, &Silent).unwrap().replaced, 1);
        assert_eq!(verify(&e, &[], &Silent).unwrap().problems, 0);
        let f = MemoryStore::new(subsystem());
        follow(&f, d);
        let copy = TransferOptions { dry_run: false, wait: LockWait::No, forward_url: None };
        let summary = transfer(TransferKind::Migrate, &e, &f, &[], copy, &Silent).unwrap();
        assert_eq!((summary.migrated, summary.problems), (5, 0));
        assert!(names(&e).is_empty() && names(&f).len() == 5, "migrated out of object storage");
    }

    /// A fresh minting collection of every backend the conformance suite covers
    /// (the temp dirs keep them alive).
    fn one_of_each() -> (Vec<Box<dyn Store>>, Vec<tempfile::TempDir>) {
        let (l, _, l_dir) = local();
        let (f, _, f_dir) = far();
        let (o, _, o_dir) = object_store_in_memory();
        let stores: Vec<Box<dyn Store>> =
            vec![Box::new(l), Box::new(f), Box::new(o), Box::new(MemoryStore::new(subsystem()))];
        (stores, vec![l_dir, f_dir, o_dir])
    }

    /// Every two-collection operation refuses two minting collections of one
    /// subsystem, in every ordered pair of backends, and changes nothing.
    #[test]
    fn two_minting_collections_are_refused_at_first_contact_in_every_backend_pair() {
        let (stores, _dirs) = one_of_each();
        let sources = tempfile::tempdir().unwrap();
        for (i, a) in stores.iter().enumerate() {
            let file = sources.path().join(format!("{i}.txt"));
            std::fs::write(&file, format!("item of {}", a.location())).unwrap();
            let options = DepositOptions::default();
            deposit(a.as_ref(), std::slice::from_ref(&file), &options, &SystemClock, &Silent, &mut |_| {}).unwrap();
            std::fs::remove_file(&file).unwrap();
        }
        for (i, a) in stores.iter().enumerate() {
            for (j, b) in stores.iter().enumerate().filter(|(j, _)| *j != i) {
                let (a, b) = (a.as_ref(), b.as_ref());
                let two = |r: Result<crate::ops::driver::TransferSummary>| matches!(r, Err(Error::TwoMinting { .. }));
                let two_stopped = |r: crate::ops::driver::RunResult| two(r.map_err(|stopped| stopped.error));
                let copy = TransferOptions { dry_run: false, wait: LockWait::No, forward_url: None };
                assert!(two_stopped(transfer(TransferKind::Copy, a, b, &[], copy.clone(), &Silent)), "copy {i} -> {j}");
                assert!(two_stopped(transfer(TransferKind::Migrate, a, b, &[], copy, &Silent)), "migrate {i} -> {j}");
                let mirroring = MirrorOptions { dry_run: false, wait: LockWait::No, checksum: false };
                assert!(two_stopped(mirror(a, b, &mirroring, &Silent)), "mirror {i} -> {j}");
                let repairing = RepairOptions { dry_run: false, wait: LockWait::No };
                assert!(two(repair(b, a, &[], repairing, &Silent)), "repair {j} from {i}");
                let handed = handover(a, b, &HandoverOptions::default());
                assert!(matches!(handed, Err(Error::TwoMinting { .. })), "handover {i} -> {j}");
                assert_eq!((names(a).len(), names(b).len()), (1, 1), "{i}, {j}: nothing moved");
                assert!(
                    a.inventory().minting().unwrap().mints() && b.inventory().minting().unwrap().mints(),
                    "{i}, {j}: nothing changed"
                );
            }
        }
    }
}
