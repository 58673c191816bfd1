//! `TestEnv`: a temporary directory plus helpers that run the real `ibi`
//! binary in it and check exit codes, stdout and stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

/// The finished run of one command, with its text already decoded.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

pub fn ibi_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ibi"))
}

pub fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

impl TestEnv {
    pub fn new() -> Self {
        TestEnv { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A `Command` for `ibi ARGS` running in the temp dir, with no terminal.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(ibi_bin());
        cmd.args(args).current_dir(self.dir.path()).env_remove("RUST_BACKTRACE");
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.command(args).output().expect("run ibi").into()
    }

    /// Runs and asserts exit 0 and no panic.
    pub fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, 0, "ibi {args:?} failed: {}", run.stderr);
        run
    }

    /// Runs and asserts the exit code, a one-line error, and no panic.
    pub fn fails(&self, args: &[&str], code: i32) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, code, "ibi {args:?}: stdout {} stderr {}", run.stdout, run.stderr);
        assert!(!run.stderr.contains("panicked"), "panic: {}", run.stderr);
        run
    }
}
