//! The `ibi` binary: a thin shell over the library; all command-line types,
//! progress bars and exit codes live in `cli`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
