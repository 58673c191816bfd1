//! The docs are tests: every `sh` block of README.md and docs/guide.md runs,
//! in order, as one script per page against a scratch folder, with the
//! `ibi` under test first on `PATH`; and every relative link of the Markdown
//! pages resolves, to a file and, where it names one, a heading.

use std::path::{Path, PathBuf};

use crate::env::{ibi_bin, repo, TestEnv};

/// The `sh` blocks of a Markdown page, in order.
fn sh_blocks(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(page)).unwrap();
    let mut blocks = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + "```sh\n".len()..];
        let end = body.find("\n```").expect("a closed block");
        blocks.push(body[..end + 1].to_string());
        rest = &body[end..];
    }
    blocks
}

/// Runs `script` with bash (`-euo pipefail`) in a fresh folder of `env`; its output.
fn run_page(env: &TestEnv, page: &str, script: &str) -> String {
    let dir = env.path(&format!("page-{}", page.replace('/', "-")));
    std::fs::create_dir_all(dir.join("home")).unwrap();
    let bin = ibi_bin();
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(&dir)
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("IBI_MINTER_DIR", crate::env::minter_dir(env.root()))
        .env("IBI_KEY_DIR", crate::env::key_dir(env.root()))
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{page}'s sh blocks failed:\n{script}\n---\n{said}");
    said
}

/// The guide's task pages run as written.
#[test]
fn every_sh_block_of_the_guide_runs() {
    let env = TestEnv::new();
    let blocks = sh_blocks("docs/guide.md");
    assert!(blocks.len() >= 8, "{blocks:?}");
    let said = run_page(&env, "docs/guide.md", &blocks.join("\n"));
    assert!(said.contains("already deposited as"), "{said}");
    assert!(said.contains("copied back with every version"), "{said}");
    assert!(said.contains("301 "), "the resolver redirected the IBIp: {said}");
}

/// The README's blocks run too. Its install line is `cargo install --locked
/// --path .`, which builds what the test harness has already built: the test
/// holds the line to that exact text and puts the binary under test where it
/// installs (`$HOME/.cargo/bin`) rather than compiling the crate a second
/// time. `scripts/test`, named in a table, is the runner of this very test;
/// the test holds `.ci/run` to calling it.
#[test]
fn every_sh_block_of_the_readme_runs() {
    let env = TestEnv::new();
    let blocks = sh_blocks("README.md");
    assert!(blocks.len() >= 2, "{blocks:?}");
    assert_eq!(blocks[0].trim(), "cargo install --locked --path .", "the install block");
    let install = format!(
        "mkdir -p \"$HOME/.cargo/bin\" && ln -s '{}' \"$HOME/.cargo/bin/ibi\" && export PATH=\"$HOME/.cargo/bin:$PATH\"\n",
        ibi_bin().display()
    );
    let said = run_page(&env, "README.md", &format!("{install}{}", blocks[1..].join("\n")));
    assert!(said.contains("http://127.0.0.1:"), "the resolver said where it listens: {said}");
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains("`cargo run --release -- demo`") && readme.contains("`scripts/test`"));
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim() == "exec scripts/test" || l.trim() == "scripts/test"), "{ci}");
    let lines = readme.lines().count();
    assert!(lines <= 400, "README.md stays short: {lines} lines");
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let mut in_code = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(slug(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every relative link of the Markdown pages names a file that exists and,
/// where it has `#anchor`, a heading of that file.
#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut pages: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"].iter().map(|p| repo().join(p)).collect();
    pages.extend(
        std::fs::read_dir(repo().join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let Some(end) = target.find(')') else { continue };
            let target = &target[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            checked += 1;
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
            } else if !anchor.is_empty() && !anchors(&file).iter().any(|a| a == anchor) {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(checked >= 20, "links checked: {checked}");
    assert!(broken.is_empty(), "{broken:#?}");
}
