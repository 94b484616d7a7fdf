//! Every `luau` block in `docs/` and in `README.md` is a complete script: run each one from its
//! file with `examples/` as the module root, so the documentation cannot drift from what Skein
//! does. Blocks tagged `luau runner` run the same way through the `skein` runner. (Blocks tagged
//! `luau no-run` need a host this harness does not build; some are read from the file by the
//! tests of that host: `contexts`, `logs`, `actors`.)

use std::path::{Path, PathBuf};

use skein::{DomainSpec, Plan, Pool, ScriptDomain};

use crate::support::skein_in;

/// The blocks of `markdown` whose opening fence is exactly `fence` (```` ```luau ````, ...), each
/// with the line number of its fence.
fn blocks_tagged(markdown: &str, fence: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == fence => current = Some((n + 1, String::new())),
            Some(_) if line.trim_start() == "```" => out.push(current.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

fn blocks(markdown: &str) -> Vec<(usize, String)> {
    blocks_tagged(markdown, "```luau")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

/// Runs every `luau` block of the markdown file at `path`; answers how many ran.
fn run_blocks(pool: &Pool, path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let mut ran = 0;
    for (line, body) in blocks(&text) {
        let domain = ScriptDomain::new(
            pool,
            DomainSpec::new("docs").plan(Plan::new().root(root().join("examples"))),
        )
        .unwrap();
        if let Err(e) = domain.eval(&body) {
            panic!(
                "{}:{line}: the example failed:\n{e}\n---\n{body}",
                path.display()
            );
        }
        ran += 1;
    }
    ran
}

#[test]
fn every_luau_block_in_the_docs_runs() {
    let pool = Pool::new(2);
    let mut ran = 0;
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("md") {
            ran += run_blocks(&pool, &path);
        }
    }
    assert!(ran >= 6, "only {ran} luau blocks found in docs/");
}

#[test]
fn every_luau_block_in_the_readme_runs() {
    let pool = Pool::new(2);
    let ran = run_blocks(&pool, &root().join("README.md"));
    assert!(ran >= 2, "only {ran} luau blocks found in README.md");
}

/// A `luau runner` block is the main script of `skein run main.luau -- a b`, with no `--allow-*`
/// flag: it needs the `runner` global and the runner's (empty) grant.
#[test]
fn every_luau_runner_block_in_the_docs_runs_through_the_runner() {
    let mut ran = 0;
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, body) in blocks_tagged(&text, "```luau runner") {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("main.luau"), &body).unwrap();
            let (code, stdout, stderr) =
                skein_in(dir.path(), &["run", "main.luau", "--", "a", "b"]);
            assert_eq!(
                code,
                0,
                "{}:{line}: the example failed:\n{stderr}\n---\n{body}",
                path.display()
            );
            assert!(
                stdout.contains("a b"),
                "{}:{line}: {stdout}",
                path.display()
            );
            ran += 1;
        }
    }
    assert!(ran >= 1, "no luau runner block found in docs/");
}
