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

fn main() -> std::process::ExitCode {
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
