//! `ibi serve ROOT… --listen ADDR:PORT`: the HTTP resolver and repository. This
//! module owns the server's life: the tokio runtime, the listening socket, the
//! bounds every connection gets (header size, header read timeout, a cap on
//! connections, a response timeout) and the graceful stop on SIGTERM or SIGINT
//! (no new connections; downloads under way finish, up to `DRAIN`). What a
//! request gets is `routes`; resolution itself is the library's
//! (`ibi::ops::resolution`). Store calls block, so they run on tokio's blocking pool.

mod common;
mod elsewhere;
mod files;
mod pages;
mod routes;
mod zipped;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hyper_util::rt::{TokioIo, TokioTimer};
use ibi::ops::resolution::Resolver;
use tokio::net::TcpListener;

use super::stderr_line;

/// The longest request head (request line and headers) read; a longer one gets 431.
const MAX_HEAD: usize = 16 * 1024;
/// A client must send its whole request head within this, or the connection closes.
const HEAD_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest a handler may take to start its response (a stuck store).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16 * 1024;
/// How long a stop waits for responses under way.
const DRAIN: Duration = Duration::from_secs(30);

/// What every request handler shares.
pub struct App {
    pub resolver: Resolver,
    /// The URL this server is reached at (ends in `/`), when given.
    pub public_url: Option<String>,
    /// Other places serving the same collections (each ends in `/`).
    pub mirrors: Vec<String>,
    /// Every store is on this machine's filesystem (`routes::short` runs inline).
    pub all_local: bool,
    /// Small files checked against their manifests, by digest.
    pub small_files: files::SmallFiles,
    /// Hash large files as they stream, and cut a damaged one short.
    pub verify_streams: bool,
    /// The collections' sites, where a request goes when the bytes here cannot be read.
    pub elsewhere: elsewhere::Elsewhere,
}

impl App {
    /// The other places serving collection `store`'s items: `--mirror`s, then its
    /// sites' public URLs (for 10320/loc and the landing page), each once.
    pub fn mirrors_of(&self, store: usize) -> Vec<String> {
        let mut all = self.mirrors.clone();
        for url in self.elsewhere.public_urls(store) {
            if !all.iter().any(|m| m == url) {
                all.push(url.to_string());
            }
        }
        all
    }
}

/// How to serve, from the command line.
pub struct Options {
    pub listen: SocketAddr,
    pub public_url: Option<String>,
    pub mirrors: Vec<String>,
    pub verify_streams: bool,
}

/// Serves `roots` as `options` say until SIGTERM or SIGINT.
pub fn serve(roots: &[PathBuf], options: Options) -> Result<()> {
    let Options { listen, public_url, mirrors, verify_streams } = options;
    let stores = roots.iter().map(|root| super::open(root)).collect::<ibi::Result<Vec<_>>>()?;
    let with_slash = |url: String| if url.ends_with('/') { url } else { format!("{url}/") };
    let all_local = stores.iter().all(|store| store.local_root().is_some());
    let elsewhere = elsewhere::Elsewhere::new(&stores);
    let app = Arc::new(App {
        elsewhere,
        all_local,
        small_files: files::SmallFiles::new(),
        verify_streams,
        resolver: Resolver::new(stores),
        public_url: public_url.map(with_slash),
        mirrors: mirrors.into_iter().map(with_slash).collect(),
    });
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ibi-http")
        .build()
        .context("cannot start the HTTP server's runtime")?;
    // The stores may hold a runtime of their own (object storage), which must not be
    // dropped inside this one: the last reference is dropped here, after it stopped.
    let kept = app.clone();
    let served = runtime.block_on(run(app, listen));
    runtime.shutdown_timeout(DRAIN);
    drop(kept);
    served
}

/// Lifts the soft limit on open files to the hard one: every connection is a file.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

async fn run(app: Arc<App>, listen: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr()?;
    let count = app.resolver.stores().len();
    stderr_line(&format!("ibi: serving {count} collection(s) at http://{bound}/"));
    let router = routes::router(app);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut stop = tokio::time::interval(Duration::from_millis(50));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = stop.tick(), if super::STOP.load(Ordering::SeqCst) => break,
        };
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors or a connection reset before accept: go on.
                    stderr_line(&format!("ibi: warning: accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.tick() => {
                if super::STOP.load(Ordering::SeqCst) { break }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(stream), service);
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = watched.await;
            drop(slot);
        });
    }
    drop(listener);
    stderr_line("ibi: stopping: no new connections; finishing the responses under way");
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        stderr_line(&format!("ibi: stopped with responses still under way after {}s", DRAIN.as_secs()));
    }
    Ok(())
}
