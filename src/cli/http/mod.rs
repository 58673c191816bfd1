//! `ibi serve ROOT… --listen ADDR:PORT`: the HTTP resolver and repository. This
//! module owns the server's life: its threads (a single-threaded tokio runtime
//! on each core, all accepting from one listening socket), the bounds every
//! connection gets (header size, header read timeout, a cap on connections, a
//! response timeout) and the graceful stop on SIGTERM or SIGINT (no new
//! connections; downloads under way finish, up to `DRAIN`). What a request gets
//! is `routes`; resolution itself is the library's (`ibi::ops::resolution`).
//! Store calls that may wait on a network run on tokio's blocking pool.

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
    let listener = listen_on(listen)?;
    let bound = listener.local_addr()?;
    let count = app.resolver.stores().len();
    stderr_line(&format!("ibi: serving {count} collection(s) at http://{bound}/"));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let router = routes::router(app.clone());
    // One handle on the socket a thread: it closes (new connections refused) once
    // every thread has stopped accepting.
    let handles = (0..threads).map(|_| listener.try_clone()).collect::<std::io::Result<Vec<_>>>();
    drop(listener);
    let handles = handles.context("cannot share the listening socket among the server's threads")?;
    let served: Vec<Result<()>> = std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for (index, listener) in handles.into_iter().enumerate() {
            let (router, slots) = (router.clone(), slots.clone());
            let worker = std::thread::Builder::new()
                .name(format!("ibi-http-{index}"))
                .spawn_scoped(scope, move || serve_on_this_thread(listener, router, slots));
            match worker {
                Ok(worker) => workers.push(worker),
                Err(e) => {
                    // The threads already serving stop too, or the scope would wait on them.
                    super::STOP.store(true, Ordering::SeqCst);
                    return Err(anyhow::Error::new(e).context("cannot start a thread of the HTTP server"));
                }
            }
        }
        let panicked = || Err(anyhow::anyhow!("a thread of the HTTP server panicked"));
        Ok::<_, anyhow::Error>(workers.into_iter().map(|w| w.join().unwrap_or_else(|_| panicked())).collect())
    })?;
    // The stores may hold a runtime of their own (object storage), which must not be
    // dropped inside the server's: the last reference goes here, after they stopped.
    drop(app);
    served.into_iter().collect()
}

/// The listening socket, with a backlog of 1,024 (std's `bind` asks for 128): every
/// server thread accepts from it, each on its own runtime.
fn listen_on(listen: SocketAddr) -> Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
    // listen(2) again on a listening socket sets its backlog anew.
    rustix::net::listen(&listener, 1024).with_context(|| format!("cannot listen on {listen}"))?;
    listener.set_nonblocking(true).with_context(|| format!("cannot listen on {listen}"))?;
    Ok(listener)
}

/// One thread of the server: a single-threaded runtime accepting from the shared
/// socket and serving the connections it took to their end. A connection and its
/// requests stay on one thread, so no request wakes another thread (with one
/// runtime of several threads, each request crossed threads: a tenth of the time
/// of a 4 KiB request went to switching between them).
fn serve_on_this_thread(
    listener: std::net::TcpListener,
    router: axum::Router,
    slots: Arc<tokio::sync::Semaphore>,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the HTTP server's runtime")?;
    let served = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).context("cannot listen")?;
        accept_until_stopped(listener, router, slots).await
    });
    runtime.shutdown_timeout(DRAIN);
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

/// Accepts connections until `STOP`, then lets the responses under way finish.
async fn accept_until_stopped(
    listener: TcpListener,
    router: axum::Router,
    slots: Arc<tokio::sync::Semaphore>,
) -> Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
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
