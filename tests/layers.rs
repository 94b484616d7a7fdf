//! The layer rule, checked: a file of a lower layer of `src/` never names a higher one.
//!
//! The layers, lowest first, are written once here ([`LAYERS`]) and once in
//! `docs/architecture.md`. A file belongs to the layer of its top-level folder (`src/vm/...` is
//! `vm`) or is a layer of its own (`src/error.rs`). It *names* a layer through a path that starts
//! at the crate root: `crate::vm::Plan`, `use crate::{jobs, value::Message}`, or a name the crate
//! root re-exports (`crate::ScriptDomain` is `domain`'s, read from `src/lib.rs`). Comments (doc
//! links included) are not dependencies and are skipped; `src/lib.rs` and the runner (`src/bin/`,
//! which sees only the public API) sit above every layer.
//!
//! [`the_checker_catches_an_upward_import`] shows the check failing: it feeds the checker a
//! `vm` file that names `domain`, and a `shared` file that names `crate::Error`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first. A file may name its own layer and those before it.
const LAYERS: &[&str] = &[
    "sync",
    "value",
    "pool",
    "principal",
    "vm",
    "shared",
    "error",
    "jobs",
    "domain",
    "resource",
];

fn rank(layer: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == layer)
}

/// The code of a Rust file with its comments blanked out (line comments, doc comments and block
/// comments), leaving string literals alone.
fn code_of(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if c == b'\\' {
                out.push_str("  ");
                i += 2;
                continue;
            }
            if c == b'"' {
                in_string = false;
            }
            out.push(' ');
            i += 1;
            continue;
        }
        if c == b'r'
            && (text[i + 1..].starts_with('"') || text[i + 1..].starts_with("#\""))
            && !(i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
        {
            // A raw string `r#"..."#`: blank it through its own closing delimiter.
            let hashes = text[i + 1..].bytes().take_while(|b| *b == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 1 + hashes + 1;
            let end = text[body..]
                .find(&close)
                .map_or(bytes.len(), |e| body + e + close.len());
            out.extend(std::iter::repeat_n(' ', text[i..end].chars().count()));
            i = end;
            continue;
        }
        if c == b'"' && !(i > 0 && bytes[i - 1] == b'\'' && bytes.get(i + 1) == Some(&b'\'')) {
            // A string's contents cannot name a module: blank them, so a Luau source or an error
            // text that mentions `crate::` is not read as a path.
            in_string = true;
            out.push(' ');
            i += 1;
            continue;
        }
        if text[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if text[i..].starts_with("/*") {
            let end = text[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |e| i + 2 + e + 2);
            i = end;
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The names `src/lib.rs` re-exports at the crate root, each with the layer it comes from.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let code = code_of(lib);
    let mut names = BTreeMap::new();
    for item in code.split(';') {
        let item = item.trim();
        let Some(rest) = item.strip_prefix("pub use ") else {
            continue;
        };
        let Some((layer, tail)) = rest.split_once("::") else {
            continue;
        };
        if rank(layer).is_none() {
            continue;
        }
        for name in tail.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if name.chars().next().is_some_and(|c| c.is_uppercase()) {
                names.insert(name.to_owned(), layer.to_owned());
            }
        }
    }
    names
}

/// Every layer `code` names through a path from the crate root, with the path's first segment.
fn named_layers(code: &str, roots: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut note = |segment: &str| {
        if rank(segment).is_some() {
            found.push((segment.to_owned(), segment.to_owned()));
        } else if let Some(layer) = roots.get(segment) {
            found.push((layer.clone(), segment.to_owned()));
        }
    };
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `skein_crate::`, not the crate root
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, D}`: the first segment of each entry, at any depth of braces
            // only the top level counts.
            let mut depth = 0;
            let mut entry_start = true;
            let mut segment = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    c if depth == 0 && entry_start && (c.is_alphanumeric() || c == '_') => {
                        segment.push(c)
                    }
                    _ if depth == 0 && entry_start && !segment.is_empty() => {
                        note(&segment);
                        segment.clear();
                        entry_start = false;
                    }
                    _ => {}
                }
            }
            if !segment.is_empty() {
                note(&segment);
            }
        } else {
            let segment: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            note(&segment);
        }
    }
    found
}

/// The layer a file under `src/` belongs to, or `None` for the crate root and the runner.
fn layer_of(relative: &Path) -> Option<String> {
    let mut parts = relative.components();
    let first = parts.next()?.as_os_str().to_str()?.to_owned();
    let is_file = parts.next().is_none();
    let layer = if is_file {
        first.strip_suffix(".rs")?.to_owned()
    } else {
        first
    };
    rank(&layer).map(|_| layer)
}

/// Every upward name in `code`, a file of `layer`: `"names <layer> (<segment>)"`.
fn violations(layer: &str, code: &str, roots: &BTreeMap<String, String>) -> Vec<String> {
    let own = rank(layer).expect("a known layer");
    let mut out: Vec<String> = named_layers(&code_of(code), roots)
        .into_iter()
        .filter(|(named, _)| rank(named).is_some_and(|r| r > own))
        .map(|(named, segment)| format!("names {named} (crate::{segment})"))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_names_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let roots = root_names(&lib);
    assert!(
        roots.get("ScriptDomain").map(String::as_str) == Some("domain")
            && roots.get("Message").map(String::as_str) == Some("value"),
        "the crate root's re-exports were not read: {roots:?}"
    );
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut checked = BTreeMap::<String, usize>::new();
    let mut found = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&src).expect("under src");
        let Some(layer) = layer_of(relative) else {
            continue;
        };
        *checked.entry(layer.clone()).or_default() += 1;
        let text = fs::read_to_string(path).expect("a source file");
        for v in violations(&layer, &text, &roots) {
            found.push(format!("src/{} ({layer}) {v}", relative.display()));
        }
    }
    // Every layer has files, so a renamed folder cannot silently drop out of the check.
    for layer in LAYERS {
        assert!(
            checked.contains_key(*layer),
            "no file of layer {layer} was found: {checked:?}"
        );
    }
    assert!(
        found.is_empty(),
        "files that name a higher layer (order, lowest first: {}):\n{}",
        LAYERS.join(" < "),
        found.join("\n")
    );
}

#[test]
fn the_checker_catches_an_upward_import() {
    let roots = root_names(
        "pub use domain::{ScriptDomain, DomainSpec};\npub use error::{Error, Result};\n\
         pub use value::{Message, Limits};\n",
    );
    let vm_file = "use crate::value::Message;\nuse crate::domain::capability::Authority;\n";
    assert_eq!(
        violations("vm", vm_file, &roots),
        ["names domain (crate::domain)"]
    );
    let shared_file = "use crate::{sync::Arc, Error};\nfn f() -> crate::Result<()> { Ok(()) }\n";
    assert_eq!(
        violations("shared", shared_file, &roots),
        ["names error (crate::Error)", "names error (crate::Result)"]
    );
    // Comments and strings are not dependencies; a lower layer's own names are fine.
    let quiet = "/// See [`ScriptDomain`](crate::ScriptDomain).\n// crate::jobs is above\n\
                 const T: &str = \"crate::domain\";\nuse crate::value::Limits;\n";
    assert!(violations("vm", quiet, &roots).is_empty());
    // The same file is fine one layer up.
    assert!(violations("domain", vm_file, &roots).is_empty());
}
