//! The binary's `Reporter`: indicatif progress on a terminal, JSON Lines with
//! `--json`, and nothing but results and errors under cron (stderr not a
//! terminal, or `--quiet`). Problems are results: they always reach stdout.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use ibi::ops::{Event, Outcome, Reporter, Task};
use ibi::Problem;
use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
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
    /// stderr is a terminal: sizes are written for people.
    terminal: bool,
    bar: Mutex<Option<ProgressBar>>,
    task: Mutex<Option<Task>>,
    progress: Mutex<Progress>,
    started: Instant,
}

impl Printer {
    pub fn new(global: GlobalArgs) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bars = !global.quiet && !global.no_progress && terminal;
        let mode = if global.json {
            Mode::Json
        } else if bars {
            Mode::Bars
        } else {
            Mode::Plain
        };
        Printer {
            mode,
            quiet: global.quiet,
            verbose: global.verbose,
            terminal: terminal && !global.json,
            bar: Mutex::new(None),
            task: Mutex::new(None),
            progress: Mutex::new(Progress::default()),
            started: Instant::now(),
        }
    }

    pub fn json(&self) -> bool {
        self.mode == Mode::Json
    }

    pub fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Prints a line on stdout without tearing a progress bar.
    pub fn line(&self, text: &str) {
        let text = escape_controls(text);
        let print = || super::write_stdout(&format!("{text}\n")).unwrap_or(());
        match self.bar() {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Prints the lines gathered in `block` (each ending in a newline) in one
    /// write, then empties it: for commands that print a line per item.
    pub fn lines(&self, block: &mut String) {
        if !block.is_empty() {
            let text = escape_controls(block);
            let print = || super::write_stdout(&text).unwrap_or(());
            match self.bar() {
                Some(bar) => bar.suspend(print),
                None => print(),
            }
        }
        block.clear();
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
            match self.bar() {
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

/// The progress line while nothing is counted yet, and once a total is known.
const SURVEYING: &str = "{spinner} {prefix} {wide_msg}";
const COUNTED: &str = "{prefix} {bytes}/{total_bytes} {percent}% ({bytes_per_sec}, ETA {eta}) {wide_msg}";

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// How far a phase has come, for the progress line.
#[derive(Default)]
struct Progress {
    items_done: u64,
    items_total: u64,
    /// The bar shows bytes against a total.
    counted: bool,
}

impl Printer {
    fn bar(&self) -> Option<ProgressBar> {
        self.bar.lock().ok().and_then(|b| b.clone())
    }

    fn begin_bar(&self, task: Task) {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        // Until the survey finds something there is no total: a spinner, never "0/0 100%".
        bar.set_style(style(SURVEYING));
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        if let Ok(mut progress) = self.progress.lock() {
            *progress = Progress::default();
        }
        if let Ok(mut slot) = self.bar.lock() {
            *slot = Some(bar);
        }
        self.task.lock().map(|mut t| *t = Some(task)).unwrap_or(());
        self.update_prefix(0, 0);
    }

    /// Counts items done and found, and redraws "TASK done/total items".
    fn update_prefix(&self, done: u64, found: u64) {
        let Some(bar) = self.bar() else { return };
        let Ok(mut progress) = self.progress.lock() else { return };
        progress.items_done += done;
        progress.items_total += found;
        let task = self.task.lock().ok().and_then(|t| *t).map_or("", Task::as_str);
        let total = progress.items_total.max(progress.items_done);
        if total == 0 {
            bar.set_prefix(format!("{task}: counting what to do"));
            return;
        }
        // Bytes to count, at last: the bar, its percentage and ETA.
        if !progress.counted && bar.length().unwrap_or(0) > 0 {
            progress.counted = true;
            bar.set_style(style(COUNTED));
        }
        bar.set_prefix(format!("{task} {}/{total} items", progress.items_done));
    }

    fn item_event(&self, name: &dyn std::fmt::Display, original: Outcome) {
        let outcome = original.describe();
        // Built only for JSON: a no-op mirror reports every item, and making
        // each object for nothing was 3% of its time.
        if self.mode == Mode::Json {
            self.event("item", json!({"name": name.to_string(), "outcome": outcome}));
        }
        if let Some(bar) = self.bar() {
            self.update_prefix(1, 0);
            bar.set_message(name.to_string());
        } else if self.verbose {
            self.note(&format!("{outcome}: {name}"));
        }
        if let (Outcome::NotCopied { why }, false) = (original, self.mode == Mode::Json) {
            let text = format!("ibi: {name} was not copied: {why}");
            match self.bar() {
                Some(bar) => bar.suspend(|| super::stderr_line(&text)),
                None => super::stderr_line(&text),
            }
        }
    }

    fn problem_event(&self, problem: &Problem) {
        match self.mode {
            Mode::Json => self.event(
                "problem",
                json!({"item": problem.item, "kind": problem.kind.as_str(), "file": problem.file, "detail": problem.detail}),
            ),
            _ => self.line(&problem.to_string()),
        }
    }

    /// A size for people: exact in JSON and when nobody watches, human-readable on a terminal.
    pub fn size(&self, bytes: u64) -> String {
        if self.terminal {
            format!("{}", HumanBytes(bytes))
        } else {
            format!("{bytes} bytes")
        }
    }
}

impl Reporter for Printer {
    fn report(&self, event: Event<'_>) {
        match event {
            Event::Begin(task) if self.mode == Mode::Bars => self.begin_bar(task),
            Event::Begin(_) => {}
            Event::Found { items, bytes } => {
                if let Some(bar) = self.bar() {
                    bar.inc_length(bytes);
                    self.update_prefix(0, items);
                }
            }
            Event::Bytes(n) => {
                if let Some(bar) = self.bar() {
                    bar.inc(n);
                }
            }
            Event::Item { name, outcome } => self.item_event(&name, outcome),
            Event::Problem(problem) => self.problem_event(problem),
            Event::Warning(message) => {
                self.event("warning", json!({"message": message}));
                self.note(&format!("ibi: warning: {message}"));
            }
            Event::WaitingForMinter { seconds } => {
                self.note(&format!(
                    "ibi: waiting {seconds:.1} s for the minter: at this granularity it has no free name sooner"
                ));
            }
            Event::End => {
                if let Some(bar) = self.bar.lock().ok().and_then(|mut b| b.take()) {
                    bar.finish_and_clear();
                }
            }
        }
    }

    fn wants_totals(&self) -> bool {
        self.mode == Mode::Bars
    }
}

/// Text for a terminal: control characters other than newline and tab (ESC, BEL,
/// the C1 controls, DEL), which bag-info or a file name may carry, are written as
/// `\x1b`-style escapes, so what an item holds can never drive the terminal.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    // Bytes first: C0 and DEL are single bytes, and every C1 control (U+0080 to
    // U+009F) is written in UTF-8 as 0xC2 then a byte; text without them passes
    // on a byte scan, without decoding characters.
    // A chunk is folded whole (no early exit), which the compiler vectorizes.
    let may_hold_control = |b: u8| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f || b == 0xc2;
    let chunk_may = |chunk: &[u8]| chunk.iter().fold(false, |seen, b| seen | may_hold_control(*b));
    if !text.as_bytes().chunks(64).any(chunk_may) {
        return std::borrow::Cow::Borrowed(text);
    }
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    let escaped = text
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => format!("\\x{:02x}", c as u32),
            c => c.to_string(),
        })
        .collect();
    std::borrow::Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::escape_controls;

    /// Control characters never reach a terminal raw: C0, DEL and C1 are
    /// escaped; newlines and tabs stay, and text without controls is passed
    /// through unchanged.
    #[test]
    fn controls_are_escaped_in_ascii_and_other_text() {
        assert!(matches!(escape_controls("a\tb\nc"), std::borrow::Cow::Borrowed("a\tb\nc")));
        assert_eq!(escape_controls("x\x1b[2Jy\x7f\r"), "x\\x1b[2Jy\\x7f\\x0d");
        assert_eq!(escape_controls("é\u{9b}2J\x07"), "é\\x9b2J\\x07");
        assert!(matches!(escape_controls("name\tünïcode\n"), std::borrow::Cow::Borrowed(_)));
    }

    proptest::proptest! {
        /// The byte scan that passes text through is the character test it
        /// stands for: text is passed unchanged exactly when it holds no control
        /// but newline and tab (C0, DEL, C1 and the characters near them).
        #[test]
        fn the_byte_scan_passes_exactly_the_text_without_controls(text in "[\\x{0}-\\x{17f}\\x{2028}]{0,24}") {
            let holds_control = text.chars().any(|c| c.is_control() && c != '\n' && c != '\t');
            let passed = matches!(escape_controls(&text), std::borrow::Cow::Borrowed(_));
            proptest::prop_assert_eq!(passed, !holds_control);
        }
    }
}
