//! The write lease and the minter state of a collection in object storage, both
//! kept by conditional writes since a bucket has no locks. The lease is an object
//! taken with a create-only write, renewed by its holder's thread with `If-Match`
//! on its ETag, and given an expiry: a holder that dies stops renewing, and the
//! next writer takes the lease over once it expires, or at once when the holder
//! was a process of this machine that no longer runs. The minter state is a
//! timestamp updated by compare-and-swap, so two writers never hand out one date;
//! minting also takes the machine-wide state of the subsystem (as local
//! collections do), so an S3 collection and a local one of one subsystem never
//! mint one name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::{PutMode, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::minter::MinterState;
use crate::id::Timestamp;
use crate::store::s3::keys::Keys;
use crate::store::s3::objects::{Fence, Lost, Objects};
use crate::store::StateFile;
use crate::store::{Lease, LockWait};

/// How long a lease lasts unless renewed, and how often its holder renews it.
const LEASE_FOR: Duration = Duration::from_secs(30);
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How long after its last renewal the holder still writes: another writer
/// takes a lease over only once it has seen it unchanged for `LEASE_FOR` and
/// `RENEW_EVERY` more, so the holder stops first, with `2 * RENEW_EVERY` to spare.
const WRITES_FOR: Duration = Duration::from_secs(LEASE_FOR.as_secs() - RENEW_EVERY.as_secs());
const POLL: Duration = Duration::from_millis(200);

/// The lease object.
#[derive(Debug, Serialize, Deserialize)]
struct Holder {
    holder: String,
    host: String,
    pid: u32,
    expires_ms: u128,
    /// When the holder took it (kept as it renews).
    #[serde(default)]
    since_ms: u128,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

impl Holder {
    fn new(holder: &str, since_ms: u128) -> Holder {
        let expires_ms = now_ms() + LEASE_FOR.as_millis();
        Holder { holder: holder.to_string(), host: this_host(), pid: std::process::id(), expires_ms, since_ms }
    }

    /// Who holds it and since when, for a message.
    fn describe(&self) -> String {
        let since = chrono::DateTime::from_timestamp_millis(self.since_ms as i64)
            .filter(|_| self.since_ms > 0)
            .map_or("an unknown time".to_string(), |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string());
        format!(
            "ibi process {} on {} since {since}",
            self.pid,
            if self.host.is_empty() { "an unknown host" } else { &self.host }
        )
    }

    /// Whether nobody holds it any more: expired, or held by a dead process of this machine.
    fn is_stale(&self) -> bool {
        let dead_here = self.host == this_host()
            && !self.host.is_empty()
            && self.pid != std::process::id()
            && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists();
        dead_here || self.expires_ms < now_ms()
    }
}

/// Holds the lease: a thread renews it until dropped, then it is deleted (if it
/// is still ours). The handle it was taken through writes only while `fence`
/// says the lease holds.
struct HeldLease {
    stop: Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
    /// Unfenced: the lease's own writes.
    objects: Objects,
    fenced: Objects,
    fence: Arc<Fence>,
    key: object_store::path::Path,
    token: String,
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(renewer) = self.renewer.take() {
            renewer.thread().unpark();
            let _ = renewer.join();
        }
        self.fenced.unfence(&self.fence);
        let _ = self.objects.run(async {
            let found = self.objects.get(&self.key).await?;
            let ours = found
                .and_then(|f| serde_json::from_slice::<Holder>(&f.bytes).ok())
                .is_some_and(|h| h.holder == self.token);
            if ours {
                self.objects.delete(&self.key).await?;
            }
            Ok::<_, Error>(())
        });
    }
}

/// A lease object seen unchanged (one version) since `since`, by this process.
struct Watched {
    version: UpdateVersion,
    since: Instant,
}

/// What one try found.
enum Try {
    Taken(UpdateVersion),
    /// Another holds it: who, for the message.
    Held(Option<String>),
}

/// One try: the lease when it was free or stale, else who holds it. A live holder
/// renews every `RENEW_EVERY`, so a lease seen unchanged for longer than `LEASE_FOR`,
/// or last written more than twice `LEASE_FOR` ago by the server's clock, is stale
/// whatever expiry it claims (a dead holder whose clock ran ahead).
fn try_take(objects: &Objects, keys: &Keys, token: &str, watched: &mut Option<Watched>) -> Result<Try> {
    let key = keys.lease();
    let body = || serde_json::to_vec(&Holder::new(token, now_ms())).expect("a lease serializes");
    if let Ok(version) = objects.run(objects.put(&key, body(), PutMode::Create))? {
        return Ok(Try::Taken(version));
    }
    let Some(current) = objects.run(objects.get(&key))? else { return Ok(Try::Held(None)) };
    let holder = serde_json::from_slice::<Holder>(&current.bytes).ok();
    let unchanged_for = match watched {
        Some(w) if w.version == current.version => w.since.elapsed(),
        _ => {
            *watched = Some(Watched { version: current.version.clone(), since: Instant::now() });
            Duration::ZERO
        }
    };
    // Not renewed for twice its duration by the server's own clock: dead, whatever it claims.
    let unrenewed = chrono::Utc::now().signed_duration_since(current.modified).to_std().unwrap_or_default();
    let stale = holder.as_ref().is_none_or(|h| h.is_stale())
        || unchanged_for > LEASE_FOR + RENEW_EVERY
        || unrenewed > 2 * LEASE_FOR;
    if !stale {
        return Ok(Try::Held(holder.map(|h| h.describe())));
    }
    match objects.run(objects.put(&key, body(), PutMode::Update(current.version)))? {
        Ok(version) => Ok(Try::Taken(version)),
        Err(Lost) => Ok(Try::Held(None)),
    }
}

/// Whether a live writer holds the lease, found by reading it (never by taking
/// it, so that a reader with read-only credentials can tell).
pub fn is_held(objects: &Objects, keys: &Keys) -> Result<bool> {
    let Some(current) = objects.run(objects.get(&keys.lease()))? else { return Ok(false) };
    Ok(serde_json::from_slice::<Holder>(&current.bytes).is_ok_and(|h| !h.is_stale()))
}

/// Takes the lease, waiting as `wait` says.
pub fn take(objects: &Objects, keys: &Keys, wait: LockWait) -> Result<Lease> {
    let token = uuid::Uuid::new_v4().to_string();
    let start = Instant::now();
    let mut watched = None;
    let (version, asked) = loop {
        // The lease lasts from when it was asked for, not from the answer.
        let asked = Instant::now();
        let holder = match try_take(objects, keys, &token, &mut watched)? {
            Try::Taken(version) => break (version, asked),
            Try::Held(holder) => holder,
        };
        let waited_out = match wait {
            LockWait::No => true,
            LockWait::Forever => false,
            LockWait::For(limit) => start.elapsed() >= limit,
        };
        if waited_out {
            return Err(Error::Locked { path: format!("{}/.ibi/lease", objects.place).into(), holder });
        }
        std::thread::sleep(POLL);
    };
    let stop = Arc::new(AtomicBool::new(false));
    let fence = Arc::new(Fence::new(asked + WRITES_FOR));
    objects.fence_with(fence.clone());
    let renewing = Renewing { token: token.clone(), since: now_ms(), version, fence: fence.clone() };
    let renewer = spawn_renewer(objects.unfenced(), keys.clone(), renewing, stop.clone());
    let (unfenced, fenced, key) = (objects.unfenced(), objects.clone(), keys.lease());
    let held = HeldLease { stop, renewer: Some(renewer), objects: unfenced, fenced, fence, key, token };
    Ok(Lease(Box::new(held)))
}

/// What the renewing thread keeps: the lease's token, when it was taken, its
/// current version, and the fence it moves on.
struct Renewing {
    token: String,
    since: u128,
    version: UpdateVersion,
    fence: Arc<Fence>,
}

fn spawn_renewer(
    objects: Objects,
    keys: Keys,
    mut held: Renewing,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || loop {
        std::thread::park_timeout(RENEW_EVERY);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let asked = Instant::now();
        let body = serde_json::to_vec(&Holder::new(&held.token, held.since)).expect("a lease serializes");
        match objects.run(objects.put(&keys.lease(), body, PutMode::Update(held.version.clone()))) {
            Ok(Ok(next)) => {
                held.version = next;
                held.fence.extend(asked + WRITES_FOR);
            }
            Ok(Err(Lost)) => {
                let taken = "another party rewrote it since this run last renewed it (taken over)";
                held.fence.lose(taken.into());
                return;
            }
            Err(_) => {}
        }
    })
}

/// The minter state: one timestamp object, updated by compare-and-swap, and the
/// machine-wide state of the subsystem, held locked around it.
pub struct ObjectMinter<'a> {
    pub objects: &'a Objects,
    pub keys: &'a Keys,
    /// The machine-wide states (`local::minter::machine_states`); empty when no
    /// machine-wide folder can be named.
    pub machine: Vec<StateFile>,
    /// The newest name the collection holds or held, found when first asked.
    pub floor: Box<dyn Fn() -> Result<Option<Timestamp>> + 'a>,
}

impl MinterState for ObjectMinter<'_> {
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()> {
        let (_machine_locks, shared) = crate::store::local::minter::lock_machine_states(&self.machine)?;
        let shared = shared.max((self.floor)()?);
        let key = self.keys.minter();
        let next = loop {
            let current = self.objects.run(self.objects.get(&key))?;
            let own = match &current {
                Some(found) => Some(parse_state(&found.bytes, &self.objects.place)?),
                None => None,
            };
            let next = step(own.max(shared))?;
            let mode = current.map_or(PutMode::Create, |found| PutMode::Update(found.version));
            if self.objects.run(self.objects.put(&key, next.to_decimal().into_bytes(), mode))?.is_ok() {
                break next;
            }
        };
        crate::store::local::minter::write_machine_states(&self.machine, next)
    }
    fn last(&self) -> Result<Option<Timestamp>> {
        let machine = crate::store::local::minter::last_of_machine_states(&self.machine)?;
        let own = match self.objects.run(self.objects.get(&self.keys.minter()))? {
            Some(found) => Some(parse_state(&found.bytes, &self.objects.place)?),
            None => None,
        };
        Ok([machine, own, (self.floor)()?].into_iter().flatten().max())
    }
}

fn parse_state(bytes: &[u8], place: &str) -> Result<Timestamp> {
    let corrupt = |problem: String| Error::CorruptState { path: format!("{place}/.ibi/minter").into(), problem };
    let text = std::str::from_utf8(bytes).map_err(|_| corrupt("it is not UTF-8".into()))?;
    Timestamp::parse_decimal(text.trim()).map_err(|e| corrupt(e.to_string()))
}
