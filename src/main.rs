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
/// 30-50 MiB of freed memory (peak RSS 81-90 MiB, for a live heap of a few MiB).
/// At 10 ms the deposit peaked at 47-51 MiB, but a no-op mirror of a million
/// items spent 0.2 s more in `madvise` (2.90-3.05 s against 2.71-2.95 s); at
/// 100 ms, 54-58 MiB and 2.84-2.96 s.
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// mimalloc's `arena_purge_mult` option (as `MI_OPTION_PURGE_DELAY`): how many
/// purge delays freed arena memory waits before it goes back to the system.
const MI_OPTION_ARENA_PURGE_MULT: libmimalloc_sys::mi_option_t = 24;

/// Tunes mimalloc to a command's churn. An audit frees large buffers all along
/// (each listing page of each site); held a second (ten purge delays) before
/// they went back, its peak at 100,000 items over three sites was 89-102 MiB,
/// and at once 80 MiB, in the same time. A no-op mirror of 100,000 items took
/// 0.28 s instead of 0.22 s with that setting, so the others keep the default.
fn tune_allocator(churn: cli::Churn) {
    if churn == cli::Churn::LargeBuffers {
        // SAFETY: sets one of mimalloc's options, which it reads atomically.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_PURGE_MULT, 0) };
    }
}

fn main() -> std::process::ExitCode {
    // SAFETY: set once, before any other thread exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    // No transparent huge pages for this process (mimalloc asks for them on its
    // arenas, and decides so before `main`, where its own option cannot reach):
    // on a machine whose page cache is full and fragmented each fresh 2 MiB page
    // was compacted for, 15% of a one-file deposit's samples in those faults and
    // 12% in the kernel's compaction, paid again by every process; without
    // them the deposit's peak fell from 47-52 to 22 MiB. A kernel without the
    // call answers an error, which changes nothing.
    // SAFETY: a plain system call on this process, with no pointer.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let code = cli::run(
        || {
            ctrlc::set_handler(|| {
                if cli::on_interrupt() {
                    std::process::exit(cli::EXIT_INTERRUPTED);
                }
            })
            .map_err(|e| e.to_string())
        },
        tune_allocator,
    );
    cli::unless_interrupted(code)
}
