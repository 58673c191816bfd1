//! An S3 collection's kept copies (`store::kept`): the prefixes of
//! `.ibi/kept/`, each the objects of a bag a replacement displaced, complete
//! once its `<prefix>.complete` object exists.

use std::collections::BTreeMap;

use object_store::path::Path as Key;

use super::keys::KEPT;
use super::S3Store;
use crate::error::{Error, Result};
use crate::store::kept::{is_kept_id, KeptCopies, KeptCopy};

impl KeptCopies for S3Store {
    fn list_kept(&self) -> Result<Vec<KeptCopy>> {
        let root = self.keys.at(KEPT);
        let listed = self.objects.run(self.objects.list_all(&root))?;
        let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
        for meta in listed {
            let Some(mut parts) = meta.location.prefix_match(&root) else { continue };
            let Some(first) = parts.next().map(|p| p.as_ref().to_string()) else { continue };
            if parts.next().is_some() && is_kept_id(&first) {
                *sizes.entry(first).or_default() += meta.size;
            }
        }
        Ok(sizes.into_iter().map(|(id, bytes)| KeptCopy::from_id(&id, bytes)).collect())
    }

    fn remove_kept(&self, id: &str) -> Result<KeptCopy> {
        let found = self.list_kept()?.into_iter().find(|k| k.id == id);
        let Some(copy) = found.filter(|_| is_kept_id(id)) else {
            let place = self.objects.url(&self.keys.at(KEPT)).into();
            return Err(Error::NotFound { what: "kept copy", name: id.to_string(), place });
        };
        let base = self.keys.at(&format!("{KEPT}/{id}"));
        self.objects.run(self.objects.delete_all(&base))?;
        self.objects.run(self.objects.delete(&Key::from(format!("{base}.complete"))))?;
        Ok(copy)
    }
}
