//! The layer rules of `src/`, checked on every `cargo test`; `docs/architecture.md` ("Layers and
//! files") says why each holds.
//!
//! - **Layers.** A file of a lower layer never names a higher one. The layers, lowest first, are
//!   written once here ([`LAYERS`]) and once in the architecture page. A file belongs to the
//!   layer of its top-level folder (`src/vm/...` is `vm`) or is a layer of its own
//!   (`src/error.rs`). It *names* a layer through a path that starts at the crate root:
//!   `crate::vm::Plan`, `use crate::{jobs, value::Message}`, or a name the crate root re-exports
//!   (`crate::ScriptDomain` is `domain`'s, read from `src/lib.rs`). `src/lib.rs` and the runner
//!   (`src/bin/`, which sees only the public API) sit above every layer.
//! - **The executor has no Luau.** No file of `src/executor/`, nor any file it names, names
//!   `mlua`: the loom models check the executor's shipped code, which they could not if it held a
//!   VM.
//! - **File cycles.** The groups of files that import each other are exactly the ones the
//!   architecture page lists in its `file-cycles` block: a new cycle fails, and so does a listed
//!   one that is gone, so the list cannot go stale.
//!
//! The last two read the *file graph* ([`Crate`]): which file each file names, through its `use`
//! lines and the paths written out in its code (`crate::..`, `super::..`, `self::..`, or a child
//! module's name). A name a `mod.rs` re-exports counts as the file that defines it, a re-export
//! counts as a dependency of its own file only where that file also uses the name, and code
//! compiled for tests only (`#[cfg(test)] mod`) names nothing. Comments (doc links included) and
//! strings are not dependencies and are skipped everywhere.
//!
//! [`the_checker_catches_an_upward_import`] and [`the_file_graph_reads_imports_as_the_compiler_does`]
//! show the checks failing on small made-up files.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first. A file may name its own layer and those before it.
const LAYERS: &[&str] = &[
    "sync",
    "value",
    "ledger",
    "executor",
    "principal",
    "vm",
    "shared",
    "error",
    "jobs",
    "domain",
    "resource",
];

/// The rows inside `jobs`, lowest first, one folder of `src/jobs/` each. A file of a row may name
/// the files of its own row and of those before it; `jobs/mod.rs`, which only re-exports, is in
/// none.
const JOBS_ROWS: &[&str] = &["leaves", "protocol", "luau", "worker", "host"];

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
        if c == b'\'' {
            // A character literal (`'{'`, `'\''`, `b'"'`) is blanked, so its brace or quote is not
            // read as code; a lifetime (`'a`) has no closing quote after one character.
            let body = &text[i + 1..];
            let len = if body.starts_with('\\') {
                body.get(2..).and_then(|b| b.find('\'')).map(|e| e + 2)
            } else {
                body.chars()
                    .next()
                    .filter(|ch| body[ch.len_utf8()..].starts_with('\''))
                    .map(char::len_utf8)
            };
            if let Some(len) = len {
                out.extend(std::iter::repeat_n(' ', body[..len].chars().count() + 2));
                i += len + 2;
                continue;
            }
        }
        if c == b'"' {
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

// ---------------------------------------------------------------------------------------------
// The file graph: which file of `src/` names which, for the rows of `jobs/` and the cycles.

/// One token of blanked code: an identifier (keywords and numbers included), `::`, or any other
/// single character.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut ident = String::from(c);
            while let Some(&n) = chars.peek() {
                if !(n.is_alphanumeric() || n == '_') {
                    break;
                }
                ident.push(n);
                chars.next();
            }
            out.push(Token::Ident(ident));
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push(Token::PathSep);
        } else if !c.is_whitespace() {
            out.push(Token::Punct(c));
        }
    }
    out
}

fn is_ident(token: Option<&Token>, name: &str) -> bool {
    matches!(token, Some(Token::Ident(i)) if i == name)
}

/// One name a `use` brings in: the path as written from its first segment, and the name it
/// binds (`None` for a glob).
#[derive(Debug)]
struct UseLeaf {
    path: Vec<String>,
    name: Option<String>,
}

/// Parses one use tree at `tokens[*at..]` below `prefix`.
fn use_tree(tokens: &[Token], at: &mut usize, prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    let mut path = prefix;
    while let Some(token) = tokens.get(*at) {
        *at += 1;
        match token {
            Token::PathSep => {}
            Token::Punct('{') => {
                while *at < tokens.len() && tokens[*at] != Token::Punct('}') {
                    use_tree(tokens, at, path.clone(), out);
                    if tokens.get(*at) == Some(&Token::Punct(',')) {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            Token::Punct('*') => {
                out.push(UseLeaf { path, name: None });
                return;
            }
            Token::Ident(segment) => {
                path.push(segment.clone());
                if tokens.get(*at) == Some(&Token::PathSep) {
                    continue;
                }
                let mut name = None;
                if is_ident(tokens.get(*at), "as") {
                    if let Some(Token::Ident(alias)) = tokens.get(*at + 1) {
                        name = Some(alias.clone());
                    }
                    *at += 2;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                let name = name.or_else(|| path.last().cloned());
                out.push(UseLeaf { path, name });
                return;
            }
            Token::Punct(_) => return,
        }
    }
}

/// A `use` statement: the module it sits in (a file's module, or an inline `mod` inside it),
/// whether it is a re-export (`pub`, `pub(crate)`, ...), and what it brings in.
#[derive(Debug)]
struct UseItem {
    module: Vec<String>,
    public: bool,
    leaves: Vec<UseLeaf>,
}

/// A path written out in code from `crate::`, `super::` or `self::`, with the module it sits in.
#[derive(Debug)]
struct WrittenPath {
    module: Vec<String>,
    path: Vec<String>,
}

/// One file of `src/`: where it is, its module, its imports and written-out paths, and the
/// identifiers of its code outside `use` statements (to tell a re-export it also uses).
#[derive(Debug)]
struct SourceFile {
    relative: String,
    uses: Vec<UseItem>,
    paths: Vec<WrittenPath>,
    idents: BTreeSet<String>,
    test_modules: Vec<Vec<String>>,
}

/// Whether the `mod` at `tokens[at]` is compiled for tests only: an attribute above it (after any
/// `pub(..)`) is a `cfg` that names `test` (`#[cfg(test)]`, `#[cfg(all(test, not(loom)))]`).
fn under_cfg_test(tokens: &[Token], at: usize) -> bool {
    let mut end = at;
    if end > 0 && tokens[end - 1] == Token::Punct(')') {
        end = tokens[..end]
            .iter()
            .rposition(|t| *t == Token::Punct('('))
            .unwrap_or(0);
    }
    if end > 0 && is_ident(tokens.get(end - 1), "pub") {
        end -= 1;
    }
    while end > 0 && tokens[end - 1] == Token::Punct(']') {
        let Some(open) = tokens[..end].iter().rposition(|t| *t == Token::Punct('[')) else {
            return false;
        };
        let attribute = &tokens[open..end];
        if is_ident(attribute.get(1), "cfg") && attribute.iter().any(|t| is_ident(Some(t), "test"))
        {
            return true;
        }
        end = open.saturating_sub(1); // the `#`
    }
    false
}

/// The module path of a file under `src/`: `jobs/worker/mod.rs` is `jobs::worker`.
fn module_of(relative: &str) -> Vec<String> {
    let trimmed = relative.strip_suffix(".rs").unwrap_or(relative);
    let mut parts: Vec<String> = trimmed.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Reads one file: its `use` statements and written-out paths, each in the module (inline
/// `mod name { .. }` blocks included) where it sits, and every inline module it declares.
fn read_source(relative: &str, text: &str, inline: &mut Vec<Vec<String>>) -> SourceFile {
    let tokens = tokens(&code_of(text));
    let base = module_of(relative);
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut file = SourceFile {
        relative: relative.to_owned(),
        uses: Vec::new(),
        paths: Vec::new(),
        idents: BTreeSet::new(),
        test_modules: Vec::new(),
    };
    let here = |open: &[(String, usize)]| {
        let mut module = base.clone();
        module.extend(open.iter().map(|(name, _)| name.clone()));
        module
    };
    let mut i = 0;
    while i < tokens.len() {
        let previous = i.checked_sub(1).map(|p| &tokens[p]);
        let module = here(&open);
        let in_test = file.test_modules.iter().any(|t| module.starts_with(t));
        match &tokens[i] {
            Token::Ident(word)
                if word == "mod" && matches!(tokens.get(i + 2), Some(Token::Punct('{' | ';'))) =>
            {
                if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                    let mut module = module.clone();
                    module.push(name.clone());
                    if under_cfg_test(&tokens, i) {
                        file.test_modules.push(module.clone());
                    }
                    if tokens[i + 2] == Token::Punct('{') {
                        open.push((name.clone(), depth));
                        inline.push(module);
                        depth += 1;
                    }
                }
                i += 3;
                continue;
            }
            Token::Ident(word) if word == "use" && previous != Some(&Token::PathSep) => {
                let public = is_ident(previous, "pub")
                    || (previous == Some(&Token::Punct(')'))
                        && tokens[..i - 1]
                            .iter()
                            .rposition(|t| *t == Token::Punct('('))
                            .is_some_and(|p| p > 0 && is_ident(tokens.get(p - 1), "pub")));
                let mut at = i + 1;
                let mut leaves = Vec::new();
                use_tree(&tokens, &mut at, Vec::new(), &mut leaves);
                if !in_test {
                    file.uses.push(UseItem {
                        module,
                        public,
                        leaves,
                    });
                }
                while at < tokens.len() && tokens[at] != Token::Punct(';') {
                    at += 1;
                }
                i = at + 1;
                continue;
            }
            Token::Ident(word)
                if tokens.get(i + 1) == Some(&Token::PathSep)
                    && previous != Some(&Token::PathSep)
                    && previous != Some(&Token::Punct('$')) =>
            {
                let mut path = vec![word.clone()];
                let mut at = i + 1;
                while tokens.get(at) == Some(&Token::PathSep) {
                    let Some(Token::Ident(segment)) = tokens.get(at + 1) else {
                        break;
                    };
                    path.push(segment.clone());
                    at += 2;
                }
                if !in_test {
                    file.idents.extend(path.iter().cloned());
                    file.paths.push(WrittenPath { module, path });
                }
                i = at;
                continue;
            }
            Token::Ident(word) if !in_test => {
                file.idents.insert(word.clone());
            }
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if open.last().is_some_and(|(_, d)| *d == depth) {
                    open.pop();
                }
            }
            _ => {}
        }
        i += 1;
    }
    file
}

/// The files of a crate, with what is needed to find the file a path names: each module's file
/// and the names each module brings in with `use`.
struct Crate {
    files: Vec<SourceFile>,
    modules: BTreeMap<Vec<String>, usize>,
    names: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    /// `sources` are `(path under src/, text)`; `lib.rs` is the crate root.
    fn new(sources: &[(String, String)]) -> Crate {
        let mut modules = BTreeMap::new();
        let mut files = Vec::new();
        for (index, (relative, text)) in sources.iter().enumerate() {
            let mut inline = Vec::new();
            files.push(read_source(relative, text, &mut inline));
            modules.insert(module_of(relative), index);
            for module in inline {
                modules.entry(module).or_insert(index);
            }
        }
        let mut krate = Crate {
            files,
            modules,
            names: BTreeMap::new(),
        };
        let mut names: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for file in &krate.files {
            for item in &file.uses {
                for leaf in &item.leaves {
                    let (Some(name), Some(path)) =
                        (&leaf.name, krate.absolute(&item.module, &leaf.path))
                    else {
                        continue;
                    };
                    names
                        .entry(item.module.clone())
                        .or_default()
                        .entry(name.clone())
                        .or_insert(path);
                }
            }
        }
        krate.names = names;
        krate
    }

    /// `path`, written in `module`, from the crate root; `None` outside the crate (`std::`,
    /// `mlua::`). In a `use`, a path may also start at a child module of `module`.
    fn absolute(&self, module: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut base: Vec<String>;
        let mut rest = path;
        match path.first()?.as_str() {
            "crate" => {
                base = Vec::new();
                rest = &path[1..];
            }
            "self" => {
                base = module.to_vec();
                rest = &path[1..];
            }
            "super" => {
                base = module.to_vec();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            first => {
                let mut child = module.to_vec();
                child.push(first.to_owned());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                base = module.to_vec();
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that defines what the absolute `path` names: the file of the longest module
    /// prefix, or, when that module only brings the next name in with `use` (a `mod.rs`
    /// re-export), the file that defines it.
    fn file_of(&self, path: &[String], depth: usize) -> usize {
        let mut k = path.len();
        while k > 0 && !self.modules.contains_key(&path[..k]) {
            k -= 1;
        }
        let file = self.modules[&path[..k]];
        if k == path.len() || depth > 16 {
            return file;
        }
        match self.names.get(&path[..k]).and_then(|m| m.get(&path[k])) {
            Some(target) => {
                let mut target = target.clone();
                target.extend(path[k + 1..].iter().cloned());
                self.file_of(&target, depth + 1)
            }
            None => file,
        }
    }

    /// The files each file names, by index. A re-export counts only when the file also uses the
    /// name itself; code compiled for tests only (`#[cfg(test)] mod`) names nothing.
    fn dependencies(&self) -> Vec<BTreeSet<usize>> {
        let tests: Vec<&Vec<String>> = self.files.iter().flat_map(|f| &f.test_modules).collect();
        let is_test = |index: usize| {
            let module = module_of(&self.files[index].relative);
            tests.iter().any(|t| module.starts_with(t))
        };
        let mut out = vec![BTreeSet::new(); self.files.len()];
        for (index, file) in self.files.iter().enumerate() {
            if is_test(index) {
                continue;
            }
            let mut named = Vec::new();
            for item in &file.uses {
                for leaf in &item.leaves {
                    if item.public && !leaf.name.as_ref().is_some_and(|n| file.idents.contains(n)) {
                        continue;
                    }
                    named.extend(self.absolute(&item.module, &leaf.path));
                }
            }
            for written in &file.paths {
                named.extend(self.absolute(&written.module, &written.path));
            }
            for path in named {
                let target = self.file_of(&path, 0);
                if target != index && !is_test(target) {
                    out[index].insert(target);
                }
            }
        }
        out
    }
}

/// The groups of files that import each other (every strongly connected part of more than one
/// file), each sorted, `skip` left out of the graph.
fn cycles(dependencies: &[BTreeSet<usize>], skip: &dyn Fn(usize) -> bool) -> Vec<Vec<usize>> {
    let reach = |from: usize| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            for &next in &dependencies[at] {
                if !skip(next) && seen.insert(next) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let reached: Vec<BTreeSet<usize>> = (0..dependencies.len()).map(reach).collect();
    let mut grouped = BTreeSet::new();
    let mut out = Vec::new();
    for a in 0..dependencies.len() {
        if skip(a) || grouped.contains(&a) || !reached[a].contains(&a) {
            continue;
        }
        let group: Vec<usize> = reached[a]
            .iter()
            .copied()
            .filter(|b| reached[*b].contains(&a))
            .collect();
        grouped.extend(group.iter().copied());
        out.push(group);
    }
    out
}

fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&src).ok()?.to_str()?.to_owned();
            if relative.starts_with("bin/") {
                return None;
            }
            Some((relative, fs::read_to_string(path).expect("a source file")))
        })
        .collect()
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
        let top = relative.components().next().expect("a path under src");
        if top.as_os_str() == "lib.rs" || top.as_os_str() == "bin" {
            continue;
        }
        // A folder or file of `src/` that is no layer would not be checked at all.
        let Some(layer) = layer_of(relative) else {
            panic!(
                "src/{} is in no layer: add it to LAYERS here and to the layer table of \
                 docs/architecture.md",
                relative.display()
            );
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

/// The row of a file of `jobs` (`jobs/protocol/item.rs` is in `protocol`), `Ok(None)` for a file
/// outside `jobs` or the facade `jobs/mod.rs`, and `Err` for a file of `jobs` in no row.
fn row_of(relative: &str) -> Result<Option<usize>, String> {
    let Some(rest) = relative.strip_prefix("jobs/") else {
        return Ok(None);
    };
    if rest == "mod.rs" {
        return Ok(None);
    }
    let row = rest.split_once('/').map(|(row, _)| row);
    match row.and_then(|row| JOBS_ROWS.iter().position(|r| *r == row)) {
        Some(rank) => Ok(Some(rank)),
        None => Err(format!(
            "src/{relative} is in no row of jobs: move it into one of src/jobs/{{{}}}/, or add \
             its folder to JOBS_ROWS here and to the rows of docs/architecture.md",
            JOBS_ROWS.join(",")
        )),
    }
}

/// Every file of `jobs` that names a file of a later row, and every file in no row.
fn row_violations(krate: &Crate, dependencies: &[BTreeSet<usize>]) -> Vec<String> {
    let mut found = Vec::new();
    for (index, file) in krate.files.iter().enumerate() {
        let own = match row_of(&file.relative) {
            Ok(Some(own)) => own,
            Ok(None) => continue,
            Err(stray) => {
                found.push(stray);
                continue;
            }
        };
        for &named in &dependencies[index] {
            let target = &krate.files[named].relative;
            if let Ok(Some(row)) = row_of(target) {
                if row > own {
                    found.push(format!(
                        "src/{} ({}) names src/{target} ({})",
                        file.relative, JOBS_ROWS[own], JOBS_ROWS[row]
                    ));
                }
            }
        }
    }
    found
}

/// The file graph of `src/` (the runner left out: it is its own crate).
fn src_crate() -> Crate {
    Crate::new(&sources())
}

#[test]
fn no_file_of_jobs_names_a_higher_row() {
    let krate = src_crate();
    let found = row_violations(&krate, &krate.dependencies());
    // Every row has files, so a renamed folder cannot silently drop out of the check.
    for (rank, row) in JOBS_ROWS.iter().enumerate() {
        assert!(
            krate
                .files
                .iter()
                .any(|f| row_of(&f.relative) == Ok(Some(rank))),
            "no file of the row src/jobs/{row}/ was found"
        );
    }
    assert!(
        found.is_empty(),
        "files of jobs that name a later row (rows, lowest first: {}):\n{}",
        JOBS_ROWS.join(" < "),
        found.join("\n")
    );
}

#[test]
fn the_executor_has_no_luau() {
    let krate = src_crate();
    let dependencies = krate.dependencies();
    // The executor's files and every file they name, however indirectly.
    let mut reached: BTreeSet<usize> = (0..krate.files.len())
        .filter(|i| krate.files[*i].relative.starts_with("executor/"))
        .collect();
    assert!(reached.len() > 5, "the executor's files were not found");
    let mut stack: Vec<usize> = reached.iter().copied().collect();
    while let Some(at) = stack.pop() {
        for &next in &dependencies[at] {
            if reached.insert(next) {
                stack.push(next);
            }
        }
    }
    let sources = sources();
    let luau: Vec<&str> = reached
        .iter()
        .map(|i| &sources[*i])
        .filter(|(_, text)| names_mlua(text))
        .map(|(relative, _)| relative.as_str())
        .collect();
    assert!(
        luau.is_empty(),
        "the executor (src/executor/ and what it names) holds no Luau, yet these files name mlua: {luau:?}"
    );
}

/// Whether the code of `text` (comments and strings skipped) names the `mlua` crate.
fn names_mlua(text: &str) -> bool {
    tokens(&code_of(text))
        .iter()
        .any(|t| is_ident(Some(t), "mlua"))
}

/// The file cycles the architecture page allows: the lines of its block fenced
/// ```` ```text file-cycles ````, one group a line, each a list of paths under `src/` in which
/// `dir/{a,b}.rs` stands for `dir/a.rs dir/b.rs`.
fn listed_cycles(markdown: &str) -> BTreeSet<BTreeSet<String>> {
    let mut lines = markdown.lines();
    assert!(
        lines.any(|l| l.trim() == "```text file-cycles"),
        "docs/architecture.md has no block fenced ```text file-cycles"
    );
    lines
        .take_while(|l| l.trim() != "```")
        .filter(|l| !l.trim().is_empty())
        .map(|line| line.split_whitespace().flat_map(expand).collect())
        .collect()
}

/// `vm/{core,modules}.rs` as `["vm/core.rs", "vm/modules.rs"]`; a word without braces as itself.
fn expand(word: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (word.find('{'), word.find('}')) else {
        return vec![word.to_owned()];
    };
    word[open + 1..close]
        .split(',')
        .map(|part| format!("{}{part}{}", &word[..open], &word[close + 1..]))
        .collect()
}

/// `files` as a line of the `file-cycles` block: sorted, each folder's files in one brace group.
fn cycle_line(files: &BTreeSet<String>) -> String {
    let mut by_folder = BTreeMap::<&str, Vec<&str>>::new();
    for file in files {
        let (folder, name) = file.rsplit_once('/').unwrap_or(("", file));
        by_folder
            .entry(folder)
            .or_default()
            .push(name.strip_suffix(".rs").unwrap_or(name));
    }
    by_folder
        .iter()
        .map(|(folder, names)| match names.as_slice() {
            [one] => format!("{folder}/{one}.rs"),
            many => format!("{folder}/{{{}}}.rs", many.join(",")),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_file_cycles_are_the_listed_ones() {
    let krate = src_crate();
    let lib = krate.modules[&Vec::<String>::new()];
    let found: BTreeSet<BTreeSet<String>> = cycles(&krate.dependencies(), &|i| i == lib)
        .into_iter()
        .map(|group| {
            group
                .into_iter()
                .map(|i| krate.files[i].relative.clone())
                .collect()
        })
        .collect();
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let listed = listed_cycles(&fs::read_to_string(doc).expect("docs/architecture.md"));
    let new: Vec<String> = found.difference(&listed).map(cycle_line).collect();
    let gone: Vec<String> = listed.difference(&found).map(cycle_line).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "the file cycles of src/ differ from the `file-cycles` block of docs/architecture.md \
         (a cycle that grew or shrank shows in both lists)\n\
         cycles not listed (break them, or list them with why they stay):\n{}\n\
         listed cycles that are gone (drop them from the block and its table):\n{}",
        new.join("\n"),
        gone.join("\n")
    );
}

#[test]
fn the_file_graph_reads_imports_as_the_compiler_does() {
    let file = |path: &str, text: &str| (path.to_owned(), text.to_owned());
    let sources = [
        file("lib.rs", "mod jobs;\nmod executor;\npub use jobs::Item;\n"),
        file(
            "jobs/mod.rs",
            "mod item;\nmod reply;\nmod api;\npub(crate) use item::Item;\n\
             pub(crate) use reply::{self as replies, ReplyTo};\n",
        ),
        // A cycle through the re-export: `item` names `reply`, which names `crate::jobs::Item`.
        file(
            "jobs/item.rs",
            "use super::reply::ReplyTo;\npub(crate) struct Item(ReplyTo);\n",
        ),
        file(
            "jobs/reply.rs",
            "pub(crate) enum ReplyTo { Item(Box<crate::jobs::Item>) }\n\
             const C: char = '{';\n\
             #[cfg(test)]\nmod tests {\n    use crate::jobs::api::install;\n}\n",
        ),
        // `api` names `item` through a child-module path, and `executor` only in a comment and a
        // string; its test module names nothing.
        file(
            "jobs/api.rs",
            "mod inner { pub(super) fn f() {} }\n\
             // crate::executor::Thing\nconst S: &str = \"super::executor\";\n\
             pub(crate) fn install() -> Option<super::item::Item> { inner::f(); None }\n",
        ),
        file("executor/mod.rs", "pub(crate) struct Thing;\n"),
    ];
    let krate = Crate::new(&sources);
    let dependencies = krate.dependencies();
    let named = |from: &str| -> Vec<&str> {
        let at = krate.files.iter().position(|f| f.relative == from).unwrap();
        dependencies[at]
            .iter()
            .map(|i| krate.files[*i].relative.as_str())
            .collect()
    };
    assert_eq!(named("jobs/item.rs"), ["jobs/reply.rs"]);
    assert_eq!(named("jobs/reply.rs"), ["jobs/item.rs"]);
    assert_eq!(named("jobs/api.rs"), ["jobs/item.rs"]);
    // A `mod.rs` that only re-exports names nothing.
    assert!(named("jobs/mod.rs").is_empty());
    let lib = krate.modules[&Vec::<String>::new()];
    let groups: Vec<Vec<&str>> = cycles(&dependencies, &|i| i == lib)
        .into_iter()
        .map(|g| {
            g.iter()
                .map(|i| krate.files[*i].relative.as_str())
                .collect()
        })
        .collect();
    assert_eq!(groups, [["jobs/item.rs", "jobs/reply.rs"]]);
    assert!(names_mlua("use mlua::Value;\n"));
    assert!(!names_mlua("// no mlua here\nconst T: &str = \"mlua\";\n"));
    // The allowed list's shorthand, read both ways.
    let block = "```text file-cycles\njobs/{item,reply}.rs\n```\n";
    let listed = listed_cycles(block);
    let group: BTreeSet<String> = ["jobs/item.rs", "jobs/reply.rs"].map(String::from).into();
    assert_eq!(listed, BTreeSet::from([group.clone()]));
    assert_eq!(cycle_line(&group), "jobs/{item,reply}.rs");
    // A leaf of `jobs` that names the protocol row, and a file of `jobs` in no row.
    let rowed = [
        file("lib.rs", "mod jobs;\n"),
        file(
            "jobs/mod.rs",
            "mod leaves;\nmod protocol;\nmod stray;\npub(crate) use protocol::keys::kept;\n",
        ),
        file("jobs/leaves/mod.rs", "pub(super) mod options;\n"),
        file(
            "jobs/leaves/options.rs",
            "pub(crate) fn read() { crate::jobs::kept(); }\n",
        ),
        file("jobs/protocol/mod.rs", "pub(super) mod keys;\n"),
        file(
            "jobs/protocol/keys.rs",
            "use crate::jobs::leaves::options::read;\npub(crate) fn kept() {}\n",
        ),
        file("jobs/stray.rs", ""),
    ];
    let krate = Crate::new(&rowed);
    assert_eq!(
        row_violations(&krate, &krate.dependencies()),
        [
            "src/jobs/leaves/options.rs (leaves) names src/jobs/protocol/keys.rs (protocol)",
            "src/jobs/stray.rs is in no row of jobs: move it into one of \
             src/jobs/{leaves,protocol,luau,worker,host}/, or add its folder to JOBS_ROWS here \
             and to the rows of docs/architecture.md",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// `ScriptDomain` is a facade: its methods live in three files, its logic in its parts.

/// The files that may hold an `impl` of `ScriptDomain` (its own or a trait's).
const FACADE_FILES: [&str; 3] = [
    "domain/mod.rs",
    "domain/facade_run.rs",
    "domain/facade_frame.rs",
];

/// The files of `sources` whose code has an `impl` block for `ScriptDomain`: `impl` followed,
/// before its `{`, by the name.
fn files_implementing_script_domain(sources: &[(String, String)]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (relative, text) in sources {
        let tokens = tokens(&code_of(text));
        for (at, token) in tokens.iter().enumerate() {
            if !is_ident(Some(token), "impl") {
                continue;
            }
            let header = tokens[at + 1..]
                .iter()
                .take_while(|t| **t != Token::Punct('{') && **t != Token::Punct(';'));
            if header.clone().any(|t| is_ident(Some(t), "ScriptDomain")) {
                found.insert(relative.clone());
            }
        }
    }
    found
}

#[test]
fn script_domain_is_implemented_in_the_facade_files_only() {
    let found = files_implementing_script_domain(&sources());
    let allowed: BTreeSet<String> = FACADE_FILES.iter().map(|f| f.to_string()).collect();
    assert!(
        found.contains("domain/mod.rs"),
        "ScriptDomain's own file was not found: {found:?}"
    );
    let outside: Vec<&String> = found.difference(&allowed).collect();
    assert!(
        outside.is_empty(),
        "ScriptDomain's methods live in {FACADE_FILES:?}, its logic in its parts; these files \
         implement it too: {outside:?}"
    );
}

#[test]
fn the_facade_check_sees_an_impl_outside_the_facade_files() {
    let sources = vec![
        (
            "domain/mod.rs".to_owned(),
            "impl ScriptDomain { }".to_owned(),
        ),
        (
            "domain/pump.rs".to_owned(),
            "// impl ScriptDomain in a comment\nimpl Drop for crate::ScriptDomain { }".to_owned(),
        ),
        (
            "domain/lane.rs".to_owned(),
            "impl Lane { fn f(d: &ScriptDomain) {} }".to_owned(),
        ),
    ];
    let found = files_implementing_script_domain(&sources);
    let want: BTreeSet<String> = ["domain/mod.rs", "domain/pump.rs"]
        .iter()
        .map(|f| f.to_string())
        .collect();
    assert_eq!(found, want);
}
