//! The binary's `Reporter`: indicatif progress on a terminal, JSON Lines with
//! `--json`, and nothing but results and errors under cron (stderr not a
//! terminal, or `--quiet`). Problems are results: they always reach stdout.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use ibi::ops::Reporter;
use ibi::Problem;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use super::args::GlobalArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bars,
    Json,
    Plain,
}

pub struct Printer {
    mode: Mode,
    quiet: bool,
    verbose: bool,
    bar: Mutex<Option<ProgressBar>>,
    started: Instant,
}

impl Printer {
    pub fn new(global: GlobalArgs) -> Self {
        let bars = !global.quiet && !global.no_progress && std::io::stderr().is_terminal();
        let mode = if global.json {
            Mode::Json
        } else if bars {
            Mode::Bars
        } else {
            Mode::Plain
        };
        Printer { mode, quiet: global.quiet, verbose: global.verbose, bar: Mutex::new(None), started: Instant::now() }
    }

    pub fn json(&self) -> bool {
        self.mode == Mode::Json
    }

    pub fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Prints a line on stdout without tearing a progress bar.
    pub fn line(&self, text: &str) {
        let print = || super::write_stdout(&format!("{text}\n")).unwrap_or(());
        match self.bar.lock().ok().and_then(|b| b.clone()) {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Prints a JSON Lines event (with `--json` only).
    pub fn event(&self, event: &str, mut fields: Value) {
        if self.mode == Mode::Json {
            if let Value::Object(map) = &mut fields {
                let mut ordered = serde_json::Map::new();
                ordered.insert("event".into(), event.into());
                ordered.append(map);
                *map = ordered;
            }
            self.line(&fields.to_string());
        }
    }

    /// A narrative or summary line for people, on stderr; silent under -q and --json.
    pub fn note(&self, text: &str) {
        if !self.quiet && self.mode != Mode::Json {
            match self.bar.lock().ok().and_then(|b| b.clone()) {
                Some(bar) => bar.suspend(|| super::stderr_line(text)),
                None => super::stderr_line(text),
            }
        }
    }

    /// The final summary: a JSON `summary` event, or one line on stderr.
    pub fn summary(&self, text: &str, fields: Value) {
        self.event("summary", fields);
        self.note(text);
    }
}

impl Reporter for Printer {
    fn begin(&self, task: &str, _items: Option<u64>, bytes: Option<u64>) {
        if self.mode != Mode::Bars {
            return;
        }
        let bar = match bytes {
            Some(total) => ProgressBar::new(total),
            None => ProgressBar::new_spinner(),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        let template = "{spinner} {prefix} {bytes} ({bytes_per_sec}) {wide_msg}";
        bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()));
        bar.set_prefix(task.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        if let Ok(mut slot) = self.bar.lock() {
            *slot = Some(bar);
        }
    }

    fn bytes(&self, n: u64) {
        if let Some(bar) = self.bar.lock().ok().and_then(|b| b.clone()) {
            bar.inc(n);
        }
    }

    fn item(&self, name: &str, outcome: &str) {
        self.event("item", json!({"name": name, "outcome": outcome}));
        if let Some(bar) = self.bar.lock().ok().and_then(|b| b.clone()) {
            bar.set_message(name.to_string());
        } else if self.verbose {
            self.note(&format!("{outcome}: {name}"));
        }
    }

    fn problem(&self, problem: &Problem) {
        match self.mode {
            Mode::Json => self.event(
                "problem",
                json!({"item": problem.item, "kind": problem.kind.as_str(), "file": problem.file, "detail": problem.detail}),
            ),
            _ => self.line(&problem.to_string()),
        }
    }

    fn warning(&self, message: &str) {
        self.event("warning", json!({"message": message}));
        self.note(&format!("ibi: warning: {message}"));
    }

    fn end(&self) {
        if let Some(bar) = self.bar.lock().ok().and_then(|mut b| b.take()) {
            bar.finish_and_clear();
        }
    }
}
