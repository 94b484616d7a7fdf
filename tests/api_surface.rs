//! The public surface, checked: the crate root holds at most 40 names, listed here ([`ROOT`]),
//! and every public name has one path (the prelude is the only second one).
//!
//! The names are read from the source: the items `src/lib.rs` declares or re-exports at its top
//! level (`pub use`, `pub mod`, `pub struct`, ... and exported macros), and, for each public
//! module, the names it declares or re-exports, whether the module is written inline in
//! `src/lib.rs` or in its own file. Comments, strings and character literals are blanked first,
//! so a brace in a doc example or a format string does not count. A name behind a `cfg` counts
//! whatever the features. `__loom` (hidden, built only under `cfg(loom)` for the loom models) is
//! no part of the surface.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The names at the crate root: what nearly every host names. A name that is not one of those
/// goes in the module of what it is for.
const ROOT: &[&str] = &[
    // types a host builds and drives
    "Pool",
    "ScriptDomain",
    "DomainSpec",
    "ContextSpec",
    "Phase",
    "Plan",
    "NativeMode",
    "DomainMailbox",
    "InterruptHandle",
    "ScriptHandle",
    "ScriptStatus",
    "Promise",
    "PromiseStatus",
    // values
    "Message",
    "MapKey",
    "FromMessage",
    "IntoMessage",
    // failures
    "Error",
    "Result",
    "Report",
    "ReportKind",
    "ServiceError",
    // modules
    "actor",
    "capability",
    "diagnostic",
    "event",
    "frame",
    "interface",
    "job",
    "lifecycle",
    "log",
    "message",
    "profile",
    "refusal",
    "resource",
    "shared",
    "size",
    "stats",
    "prelude",
    "mlua",
];

/// The most names the crate root may hold.
const MAX_ROOT_NAMES: usize = 40;

/// Modules that are not a path of their own to anything: the prelude repeats root and module
/// names on purpose, `mlua` is another crate, `__loom` is hidden test support.
const NOT_A_PATH: &[&str] = &["prelude", "mlua", "__loom"];

/// `text` with its comments, string literals and character literals blanked to spaces (line
/// breaks kept), so that only code is left to scan for items and braces.
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str("  ");
            i += 2;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !(i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // a raw string: r"...", r#"..."#, ...
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &chars[i..j.min(chars.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                for &ch in &chars[i..(i + step).min(chars.len())] {
                    out.push(blank(ch));
                }
                i += step;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // an escaped character literal: '\n', '\'', '\u{7f}'
            let end = (i + 2..chars.len())
                .find(|&j| chars[j] == '\'')
                .unwrap_or(chars.len());
            for _ in i..=end.min(chars.len() - 1) {
                out.push(' ');
            }
            i = end + 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The index just past the brace that closes the one opening at `open`.
fn block_end(code: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (i, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("an unclosed brace");
}

/// The names a use tree (`a::{b::C, D as E}`, `f::G`) brings in: each leaf's last segment, or
/// its alias.
fn use_names(tree: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut leaf = String::new();
    let mut push = |leaf: &mut String| {
        let item = leaf.trim();
        if !item.is_empty() {
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item.rsplit("::").next().unwrap_or(item).trim(),
            };
            if name != "self" && !name.is_empty() {
                names.push(name.to_owned());
            }
        }
        leaf.clear();
    };
    for c in tree.chars() {
        match c {
            // a `{` closes the path before it; what follows are the leaves
            '{' => leaf.clear(),
            ',' | '}' => push(&mut leaf),
            c if c.is_whitespace() => leaf.push(' '),
            c => leaf.push(c),
        }
    }
    push(&mut leaf);
    names
}

/// One public item at the top level of a module: its name, and for an inline `pub mod`, the
/// code of its body.
struct Item {
    name: String,
    inline_body: Option<String>,
    is_mod: bool,
}

/// The public items declared at the top level of `code` (already blanked by [`code_of`]).
fn public_items(code: &str) -> Vec<Item> {
    let bytes = code.as_bytes();
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let word_at = |at: usize, word: &str| {
        code[at..].starts_with(word)
            && !(at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_'))
            && code[at + word.len()..]
                .chars()
                .next()
                .is_some_and(|c| !(c.is_alphanumeric() || c == '_'))
    };
    let ident_after = |at: usize| -> (String, usize) {
        let rest = &code[at..];
        let start = at + (rest.len() - rest.trim_start().len());
        let name: String = code[start..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (name.clone(), start + name.len())
    };
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            _ if depth == 0 && word_at(i, "macro_rules") => {
                // counted only when exported
                let before = &code[..i];
                let attrs_start = before.rfind([';', '}']).map_or(0, |p| p + 1);
                if before[attrs_start..].contains("macro_export") {
                    let (name, _) = ident_after(i + "macro_rules!".len());
                    items.push(Item {
                        name,
                        inline_body: None,
                        is_mod: false,
                    });
                }
            }
            _ if depth == 0 && word_at(i, "pub") && !code[i + 3..].starts_with('(') => {
                let (kind, after_kind) = ident_after(i + 3);
                match kind.as_str() {
                    "use" => {
                        let end = after_kind + code[after_kind..].find(';').expect("a `;`");
                        for name in use_names(&code[after_kind..end]) {
                            items.push(Item {
                                name,
                                inline_body: None,
                                is_mod: false,
                            });
                        }
                        i = end;
                    }
                    "mod" => {
                        let (name, after_name) = ident_after(after_kind);
                        let rest = code[after_name..].trim_start();
                        let inline_body = rest.starts_with('{').then(|| {
                            let open = code.len() - rest.len();
                            let end = block_end(bytes, open);
                            i = end - 1;
                            code[open + 1..end - 1].to_owned()
                        });
                        items.push(Item {
                            name,
                            inline_body,
                            is_mod: true,
                        });
                    }
                    "struct" | "enum" | "union" | "trait" | "type" | "fn" | "const" | "static" => {
                        let (name, _) = ident_after(after_kind);
                        items.push(Item {
                            name,
                            inline_body: None,
                            is_mod: false,
                        });
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        i += 1;
    }
    items
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The root's public items, `__loom` left out.
fn root_items() -> Vec<Item> {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs");
    public_items(&code_of(&lib))
        .into_iter()
        .filter(|item| item.name != "__loom")
        .collect()
}

#[test]
fn the_crate_root_holds_only_the_listed_names() {
    let mut found: Vec<String> = root_items().into_iter().map(|item| item.name).collect();
    found.sort();
    let mut listed: Vec<String> = ROOT.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert!(
        listed.len() <= MAX_ROOT_NAMES,
        "the crate root lists {} names, past its {MAX_ROOT_NAMES}",
        listed.len()
    );
    let added: Vec<&String> = found.iter().filter(|n| !listed.contains(n)).collect();
    let gone: Vec<&String> = listed.iter().filter(|n| !found.contains(n)).collect();
    assert!(
        added.is_empty() && gone.is_empty(),
        "the crate root changed: new {added:?}, gone {gone:?}. A name not nearly every host \
         uses goes in the module of what it is for; the root holds at most {MAX_ROOT_NAMES} \
         (tests/api_surface.rs, ROOT)"
    );
}

#[test]
fn every_public_name_has_one_path() {
    let mut paths = BTreeMap::<String, Vec<String>>::new();
    for item in root_items() {
        if NOT_A_PATH.contains(&item.name.as_str()) {
            continue;
        }
        paths
            .entry(item.name.clone())
            .or_default()
            .push(format!("skein::{}", item.name));
        if !item.is_mod {
            continue;
        }
        let body = match item.inline_body {
            Some(body) => body,
            None => {
                let dir = src().join(&item.name);
                let file = if dir.is_dir() {
                    dir.join("mod.rs")
                } else {
                    src().join(format!("{}.rs", item.name))
                };
                code_of(&fs::read_to_string(&file).expect("a module's file"))
            }
        };
        for inner in public_items(&body) {
            paths
                .entry(inner.name.clone())
                .or_default()
                .push(format!("skein::{}::{}", item.name, inner.name));
        }
    }
    assert!(
        paths.contains_key("ChromeTrace") && paths.contains_key("SharedStore"),
        "the modules' names were not read: {paths:?}"
    );
    let twice: Vec<&Vec<String>> = paths.values().filter(|p| p.len() > 1).collect();
    assert!(twice.is_empty(), "names with more than one path: {twice:?}");
    // The types the guides name by their short name, at the path `docs/embedding.md` gives.
    for (name, path) in [
        ("Bytes", "skein::message::Bytes"),
        ("Args", "skein::message::Args"),
    ] {
        assert_eq!(paths.get(name), Some(&vec![path.to_owned()]), "{name}");
    }
}

/// `skein::message::Bytes` is the `bytes` crate's type, not a look-alike: a host passes its
/// own `bytes::Bytes` where Skein's is asked for.
#[test]
fn the_message_modules_bytes_is_the_bytes_crates() {
    let theirs = bytes::Bytes::from_static(b"\x00\xff");
    let ours: skein::message::Bytes = theirs.clone();
    assert_eq!(skein::Message::from(ours), skein::Message::String(theirs));
}

#[test]
fn the_reader_sees_through_comments_strings_and_cfgs() {
    let code = code_of(
        r##"
        //! pub use nothing::{Here};
        pub use a::{b::C, D as E};
        #[cfg(feature = "x")]
        pub use f::G;
        pub(crate) use h::Hidden;
        const S: &str = "pub struct NotOne { }";
        const R: &str = r#"{"#;
        const B: char = '{';
        pub mod inline {
            /// pub struct InDoc;
            pub use crate::x::{Y, Z};
        }
        pub mod file;
        #[macro_export]
        macro_rules! shout { () => {} }
        macro_rules! quiet { () => {} }
        pub fn f() { pub struct Inside; }
        "##,
    );
    let items = public_items(&code);
    let names: Vec<&str> = items.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["C", "E", "G", "inline", "file", "shout", "f"]);
    let inline = items[3].inline_body.as_deref().expect("an inline body");
    let inner: Vec<String> = public_items(inline).into_iter().map(|i| i.name).collect();
    assert_eq!(inner, ["Y", "Z"]);
}
