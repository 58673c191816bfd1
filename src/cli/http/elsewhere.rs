//! Where a request goes when this server cannot read an item's bytes (its
//! copy here is damaged or missing, or its store does not answer): a `307` to
//! a site of the collection (`[[site]]` with a `public_url`) that holds a
//! verified copy (`ibi::ops::sites::holds_verified_copy`). This module owns
//! the served collections' sites, each site's store opened when first needed
//! (and again after it could not be), and the answers found, kept for `REMEMBER` so that a burst of
//! requests for a broken item asks each site once; the sites are asked one
//! request at a time, so a client cannot make this server flood them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ibi::id::RepositoryName;
use ibi::store::config::Site;
use ibi::store::Store;

/// How long a site's answer about one item is kept.
const REMEMBER: Duration = Duration::from_secs(60);
/// Answers kept at most (then all are forgotten).
const ANSWERS_KEPT: usize = 10_000;

/// A site with a public URL, and its store once opened (opened again after a failure).
struct SiteLink {
    site: Site,
    public_url: String,
    store: Mutex<Option<Box<dyn Store>>>,
}

/// Each site's answer about one item of one collection: when it was found, and
/// the public URL of the first site with a verified copy, if any.
type Answers = HashMap<(usize, RepositoryName), (Instant, Option<String>)>;

/// The sites of every collection served, by the collection's index.
pub struct Elsewhere {
    sites: Vec<Vec<SiteLink>>,
    answers: Mutex<Answers>,
    asking: Mutex<()>,
}

impl Elsewhere {
    /// The sites with a public URL of each of `stores` (read from their configurations).
    pub fn new(stores: &[Box<dyn Store>]) -> Elsewhere {
        let sites = stores
            .iter()
            .map(|store| {
                let sites = ibi::ops::sites::public_sites(store.as_ref());
                sites
                    .into_iter()
                    .map(|(site, public_url)| SiteLink { site, public_url, store: Mutex::new(None) })
                    .collect()
            })
            .collect();
        Elsewhere { sites, answers: Mutex::new(HashMap::new()), asking: Mutex::new(()) }
    }

    /// Whether any collection served has a site to send a request to.
    pub fn any(&self) -> bool {
        self.sites.iter().any(|s| !s.is_empty())
    }

    /// The public URLs of collection `index`'s sites.
    pub fn public_urls(&self, index: usize) -> impl Iterator<Item = &str> {
        self.sites.get(index).into_iter().flatten().map(|s| s.public_url.as_str())
    }

    /// The public URL of the first site of collection `index` (every collection's,
    /// when `None`) that holds a verified copy of `name` with the identity
    /// `expected` (when this server still knows it). Blocks: run it off the runtime.
    pub fn site_with(&self, index: Option<usize>, name: &RepositoryName, expected: Option<&str>) -> Option<String> {
        let indexes: Vec<usize> = match index {
            Some(index) => vec![index],
            None => (0..self.sites.len()).collect(),
        };
        indexes.into_iter().find_map(|i| self.answer(i, name, expected))
    }

    fn answer(&self, index: usize, name: &RepositoryName, expected: Option<&str>) -> Option<String> {
        let key = (index, name.clone());
        let fresh =
            |answers: &Answers| answers.get(&key).filter(|(at, _)| at.elapsed() < REMEMBER).map(|(_, url)| url.clone());
        if let Some(known) = fresh(&self.answers.lock().expect("answers lock")) {
            return known;
        }
        let _one_at_a_time = self.asking.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(known) = fresh(&self.answers.lock().expect("answers lock")) {
            return known;
        }
        let found = self.sites.get(index).into_iter().flatten().find_map(|link| {
            let mut store = link.store.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if store.is_none() {
                *store = super::super::open(Path::new(&link.site.url)).ok();
            }
            let holds =
                store.as_ref().is_some_and(|s| ibi::ops::sites::holds_verified_copy(s.as_ref(), name, expected));
            holds.then(|| link.public_url.clone())
        });
        let mut answers = self.answers.lock().expect("answers lock");
        if answers.len() >= ANSWERS_KEPT {
            answers.clear();
        }
        answers.insert(key, (Instant::now(), found.clone()));
        found
    }
}
