//! The `ibi` binary: a thin shell over the library; all command-line types,
//! progress bars and exit codes live in `cli`. Only `main` ends the process:
//! by returning the exit code, or, on SIGINT or SIGTERM, by exiting 130 once
//! `cli::on_interrupt` has removed what the command had in staging (a run that
//! finishes meanwhile waits for that exit: `cli::unless_interrupted`).

mod cli;

/// mimalloc: `serve --listen` allocates and frees a little for every request, and
/// glibc's malloc took about 8% of a loaded server's time (perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (its place in the options of mimalloc 3, the
/// version `mimalloc` builds by default; `mimalloc.h`, `mi_option_e`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps freed memory before it gives it back, in ms. mimalloc 3
/// waits 1,000 ms: a deposit that places 5,000 small items a second then held
/// 30-50 MiB of freed memory (peak RSS 81-90 MiB against 40-51 MiB at 0-10 ms,
/// for a live heap of a few MiB). 10 ms was mimalloc 2's default.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

fn main() -> std::process::ExitCode {
    // SAFETY: set once, before any other thread exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    let code = cli::run(|| {
        ctrlc::set_handler(|| {
            if cli::on_interrupt() {
                std::process::exit(cli::EXIT_INTERRUPTED);
            }
        })
        .map_err(|e| e.to_string())
    });
    cli::unless_interrupted(code)
}
