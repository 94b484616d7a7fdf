//! Every `luau` block in `docs/` is a complete script: run each one with `examples/` as the
//! module root, so the documentation cannot drift from what Skein does.

use std::path::{Path, PathBuf};

use skein::{DomainSpec, Plan, Pool, ScriptDomain};

fn blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```luau" => current = Some((n + 1, String::new())),
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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

#[test]
fn every_luau_block_in_the_docs_runs() {
    let pool = Pool::new(2);
    let mut ran = 0;
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, body) in blocks(&text) {
            let domain = ScriptDomain::new(
                &pool,
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
    }
    assert!(ran >= 6, "only {ran} luau blocks found in docs/");
}
