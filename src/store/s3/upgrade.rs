//! The one-time rewrite of the keys an older `ibi` percent-encoded
//! (`KeyForm::Encoded`) into the files' own names (`ibi upgrade`). Each item is
//! rewritten as a replacement of itself: its files are copied server-side into a
//! stage under their names, then the placement protocol of `place` swaps the
//! stage in (intent, marker claimed with `If-Match`, copies, old keys deleted,
//! marker `present` in the new form). A kill at any moment leaves the item
//! readable in one form or the other, and the next writer's recovery finishes or
//! drops the stage, so running the upgrade again completes it.

use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::keys::{self, KeyForm, Keys};
use super::objects::IN_FLIGHT;
use super::place::Marker;
use super::S3Store;
use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::{Listed, Placement, StageId, Store};

impl S3Store {
    /// Rewrites every item whose keys are percent-encoded; see `Writer::upgrade_stored_form`.
    pub fn upgrade_keys(&self, done: &dyn Fn(&RepositoryName, Option<&str>)) -> Result<usize> {
        let mut rewritten = 0;
        for listed in self.walk() {
            let Listed::Item(name) = listed? else { continue };
            let Some(marker) = self.objects.run(self.placer().marker(&name))? else { continue };
            if marker.keys == KeyForm::Names {
                continue;
            }
            match self.upgrade_item(&name, marker) {
                Ok(None) => {
                    rewritten += 1;
                    done(&name, None);
                }
                Ok(Some(why)) => done(&name, Some(&why)),
                // One hostile item is its own problem: named, kept readable, and the run goes on.
                Err(e) if e.class() == crate::error::ErrorClass::Data => done(&name, Some(&e.to_string())),
                Err(e) => return Err(e),
            }
        }
        Ok(rewritten)
    }

    /// Rewrites one item's keys; `Some(why)` when a path cannot be a key as named
    /// (the item stays as it is, readable).
    fn upgrade_item(&self, name: &RepositoryName, mut marker: Marker) -> Result<Option<String>> {
        let base = self.keys.item(name);
        let listed = self.objects.run(self.objects.list_all(&base))?;
        let rels: Vec<String> =
            listed.iter().filter_map(|m| Keys::relative(&base, &m.location, KeyForm::Encoded)).collect();
        if !rels.iter().any(|rel| keys::spelled_differently(rel)) {
            marker.keys = KeyForm::Names;
            let body = serde_json::to_vec(&marker).expect("a marker serialises");
            self.objects.run(self.objects.overwrite(&self.keys.marker(name), body))?;
            return Ok(None);
        }
        if let Some(rel) = rels.iter().find(|rel| !is_plain_path(rel)) {
            return Ok(Some(format!(
                "its file path {rel:?} is not a plain path inside the item (planted by another writer?)"
            )));
        }
        let stage = S3Store::new_stage();
        let stage_base = self.keys.stage(stage);
        if let Some(why) = rels.iter().find_map(|rel| keys::check_file_key(&stage_base, rel).err()) {
            return Ok(Some(why));
        }
        let staged = self.stage_and_place(name, &marker, stage, &rels);
        if staged.is_err() {
            // Nothing of a stage that was not placed is left behind.
            let _ = self.objects.run(self.objects.delete_all(&stage_base));
        }
        staged.map(|()| None)
    }

    /// Copies an item's files into `stage` under their names and swaps the
    /// stage in as a replacement of the item.
    fn stage_and_place(&self, name: &RepositoryName, marker: &Marker, stage: StageId, rels: &[String]) -> Result<()> {
        let copies = stream::iter(rels.iter())
            .map(|rel| {
                let from = self.keys.item_file(name, rel, KeyForm::Encoded);
                let to = self.keys.staged_file(stage, rel, KeyForm::Names);
                async move { self.objects.copy(&from, &to).await }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<()>();
        self.objects.run(copies)?;
        let record = self.record_batch(std::slice::from_ref(name))?.pop().flatten();
        let ibip = record.as_ref().and_then(|r| r.ibip);
        let placement =
            Placement { stage, name: name.clone(), ibip, replace: true, record, action: Default::default() };
        let dirs = marker.dirs.iter().cloned().collect();
        self.objects.run(self.placer().place_one(&placement, dirs))??;
        Ok(())
    }
}

/// Whether `rel` names a file inside an item: relative, with no empty, `.` or
/// `..` part.
fn is_plain_path(rel: &str) -> bool {
    !rel.starts_with('/') && rel.split('/').all(|part| !matches!(part, "" | "." | ".."))
}
