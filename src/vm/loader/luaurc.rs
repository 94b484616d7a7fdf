//! `.luaurc` files: the alias maps require-by-string reads, parsed once per file version.
//!
//! Luau reads `.luaurc` as JSON that may also hold comments and trailing commas; we accept the
//! same by blanking comments and dropping trailing commas before handing the text to
//! `serde_json`. Only `aliases` matters to the loader: other keys (`languageMode`, `lint`, …)
//! belong to the analysis tools and are ignored. Alias names follow Luau's rules: non-empty,
//! made of `[A-Za-z0-9.\-_]`, not `.` or `..`, compared without regard to ASCII case.
//!
//! This module owns the parse and its process-wide cache (keyed by path, checked against the
//! file's length and mtime on every lookup); it never walks directories, which `resolve` does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use super::error::RequireError;
use crate::vm::source::read_within;

/// The file name require-by-string looks for in each folder above the requiring module.
pub(crate) const LUAURC: &str = ".luaurc";

/// The longest `.luaurc` read: 1 MiB, far past any real alias map. A longer one is refused
/// before a byte of it is read (`invalid .luaurc at PATH: it is longer than the limit of
/// 1048576 bytes`), so a huge or sparse file costs the host nothing.
pub(crate) const MAX_LUAURC_BYTES: usize = 1 << 20;

/// One parsed `.luaurc`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LuauRc {
    /// Lower-cased alias name to its value as written (a path, or `@other/...`).
    aliases: HashMap<String, String>,
}

impl LuauRc {
    /// The value of `alias` (any case), as written in the file.
    pub(crate) fn alias(&self, alias: &str) -> Option<&str> {
        self.aliases
            .get(&alias.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// Parses the text of the `.luaurc` at `path` (the path only names the file in errors).
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Self, RequireError> {
        let bad = |message: String| RequireError::BadConfig {
            path: path.to_owned(),
            message,
        };
        let json: serde_json::Value =
            serde_json::from_str(&strip_comments_and_trailing_commas(text))
                .map_err(|e| bad(e.to_string()))?;
        let serde_json::Value::Object(top) = json else {
            return Err(bad("the top level must be an object".to_owned()));
        };
        let mut rc = Self::default();
        let Some(aliases) = top.get("aliases") else {
            return Ok(rc);
        };
        let serde_json::Value::Object(aliases) = aliases else {
            return Err(bad("\"aliases\" must be an object of strings".to_owned()));
        };
        for (name, value) in aliases {
            if !is_valid_alias(name) {
                return Err(bad(format!(
                    "invalid alias name \"{name}\" (use letters, digits, '-', '_' and '.')"
                )));
            }
            let serde_json::Value::String(value) = value else {
                return Err(bad(format!("alias \"{name}\" must be a string")));
            };
            // Luau keeps the first spelling when a file repeats an alias in another case.
            rc.aliases
                .entry(name.to_ascii_lowercase())
                .or_insert_with(|| value.clone());
        }
        Ok(rc)
    }
}

/// Luau's alias-name rule: a non-empty run of `[A-Za-z0-9.\-_]` that is not `.` or `..`.
fn is_valid_alias(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Turns Luau's lenient JSON into strict JSON: blanks `//`, `--` and `/* */` comments outside
/// strings, then drops each comma that only whitespace separates from a closing `}` or `]`.
fn strip_comments_and_trailing_commas(text: &str) -> String {
    drop_trailing_commas(&strip_comments(text.as_bytes()))
}

/// Copies the JSON string whose opening quote is at `bytes[start]`, through its closing quote
/// (escapes included), and answers the index after it: both passes below leave strings as they
/// are, since a `//` or a `,}` inside one is text.
fn copy_string(bytes: &[u8], start: usize, out: &mut Vec<u8>) -> usize {
    out.push(bytes[start]);
    let mut i = start + 1;
    while i < bytes.len() {
        let b = bytes[i];
        out.push(b);
        i += 1;
        if b == b'\\' && i < bytes.len() {
            out.push(bytes[i]);
            i += 1;
        } else if b == b'"' {
            break;
        }
    }
    i
}

fn strip_comments(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1).copied()) {
            (b'"', _) => i = copy_string(bytes, i, &mut out),
            (b'/', Some(b'/')) | (b'-', Some(b'-')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    // Keep line breaks so serde_json's line numbers still match the file.
                    if bytes[i] == b'\n' {
                        out.push(b'\n');
                    }
                    i += 1;
                }
                i += 2;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn drop_trailing_commas(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => i = copy_string(bytes, i, &mut out),
            b',' => {
                let next = bytes[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
                if !matches!(next, Some(b'}' | b']')) {
                    out.push(b',');
                }
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    // Only whole ASCII bytes were removed, so the text is still UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// The process-wide cache of parsed `.luaurc` files.
struct RcCache {
    entries: Mutex<HashMap<PathBuf, CachedRc>>,
}

struct CachedRc {
    len: u64,
    mtime: Option<SystemTime>,
    rc: Arc<LuauRc>,
}

fn cache() -> &'static RcCache {
    static CACHE: OnceLock<RcCache> = OnceLock::new();
    CACHE.get_or_init(|| RcCache {
        entries: Mutex::new(HashMap::new()),
    })
}

/// The parsed `.luaurc` in `dir`, or `None` when the folder has none. Parses again only when the
/// file's length or mtime changed since the last parse.
pub(crate) fn load(dir: &Path) -> Result<Option<Arc<LuauRc>>, RequireError> {
    let path = dir.join(LUAURC);
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(None);
    };
    if !meta.is_file() {
        return Ok(None);
    }
    let (len, mtime) = (meta.len(), meta.modified().ok());
    let entries = &cache().entries;
    if let Some(hit) = lock(entries).get(&path) {
        if hit.len == len && hit.mtime == mtime && mtime.is_some() {
            return Ok(Some(hit.rc.clone()));
        }
    }
    let bad = |message: String| RequireError::BadConfig {
        path: path.clone(),
        message,
    };
    let bytes = read_within(&path, MAX_LUAURC_BYTES).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8 text".to_owned()))?;
    let rc = Arc::new(LuauRc::parse(&text, &path)?);
    lock(entries).insert(
        path,
        CachedRc {
            len,
            mtime,
            rc: rc.clone(),
        },
    );
    Ok(Some(rc))
}

/// Locks a cache map; a panic elsewhere while it was held leaves plain data behind, so the
/// poison is ignored.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LuauRc, RequireError> {
        LuauRc::parse(text, Path::new("/p/.luaurc"))
    }

    #[test]
    fn aliases_are_case_insensitive_and_other_keys_ignored() {
        let rc = parse(r#"{"languageMode": "strict", "aliases": {"Lib": "./lib"}}"#).unwrap();
        assert_eq!(rc.alias("lib"), Some("./lib"));
        assert_eq!(rc.alias("LIB"), Some("./lib"));
        assert_eq!(rc.alias("other"), None);
    }

    #[test]
    fn comments_and_trailing_commas_are_accepted() {
        let text = "{\n  // line comment\n  \"aliases\": { /* block */ \"a\": \"./x//y\", -- lua style\n },\n}";
        let rc = parse(text).unwrap();
        assert_eq!(rc.alias("a"), Some("./x//y"));
    }

    #[test]
    fn bad_json_names_the_file() {
        let err = parse("{ \"aliases\": ").unwrap_err().to_string();
        assert!(err.starts_with("invalid .luaurc at /p/.luaurc: "), "{err}");
    }

    #[test]
    fn bad_alias_name_and_value_are_errors() {
        let err = parse(r#"{"aliases": {"a/b": "./x"}}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid .luaurc at /p/.luaurc: invalid alias name \"a/b\" (use letters, digits, '-', '_' and '.')"
        );
        let err = parse(r#"{"aliases": {"a": 3}}"#).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid .luaurc at /p/.luaurc: alias \"a\" must be a string"
        );
        let err = parse(r#"[]"#).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid .luaurc at /p/.luaurc: the top level must be an object"
        );
    }
}
