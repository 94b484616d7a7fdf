//! Naming where a refused value sits (`message.items[3].callback`).
//!
//! The walk never builds a path while it succeeds: a refusal collects one segment per table it
//! unwinds through, innermost first, and the path is written once at the root. The hot path pays
//! nothing for error reporting.

use std::fmt::Write as _;

/// One step from a table into one of its entries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Segment {
    /// A string key.
    Name(Vec<u8>),
    /// An integer key, or a list position (1-based).
    Index(i64),
    /// A number key.
    Number(f64),
    /// A key that can't be a key, described (`true`, `<table key>`).
    Described(String),
}

impl Segment {
    /// The step into the entry under `key`.
    pub(crate) fn key(key: &super::MapKey) -> Segment {
        match key {
            super::MapKey::Integer(i) => Segment::Index(*i),
            super::MapKey::Number(n) => Segment::Number(*n),
            super::MapKey::String(s) => Segment::Name(s.to_vec()),
        }
    }

    /// The step into the list item at 0-based `position` (named 1-based, as Luau counts).
    pub(crate) fn position(position: usize) -> Segment {
        Segment::Index(i64::try_from(position).map_or(i64::MAX, |i| i.saturating_add(1)))
    }
}

/// Luau's reserved words: `t.end` is not how Luau code reaches key "end".
const RESERVED: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in", "local",
    "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
];

fn is_identifier(name: &[u8]) -> bool {
    let Some((&first, rest)) = name.split_first() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == b'_')
        && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && !RESERVED.iter().any(|r| r.as_bytes() == name)
}

/// Writes `bytes` as the inside of a Luau double-quoted string.
fn write_quoted(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
    out.push('"');
}

/// Formats a number key as Luau would print it: whole numbers without a fraction.
pub(crate) fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// Builds the full path from the root and the segments, given innermost first.
pub(crate) fn render(root: &str, innermost_first: &[Segment]) -> String {
    let mut out = String::from(root);
    for segment in innermost_first.iter().rev() {
        match segment {
            Segment::Name(name) if is_identifier(name) => {
                out.push('.');
                // is_identifier checked that it is ASCII.
                out.push_str(std::str::from_utf8(name).unwrap_or_default());
            }
            Segment::Name(name) => {
                out.push('[');
                write_quoted(&mut out, name);
                out.push(']');
            }
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Segment::Number(n) => {
                let _ = write!(out, "[{}]", number_text(*n));
            }
            Segment::Described(text) => {
                let _ = write!(out, "[{text}]");
            }
        }
    }
    out
}

impl super::Message {
    /// Checks a copy against a tighter bound than the reader's own: tables nested at most
    /// `max_depth` deep (a top-level table is 1), and no [`ResourceHandle`](super::ResourceHandle)
    /// unless `handles`. The refusal names the path from `root`, as the reader's do. For a
    /// crossing whose bound is not [`Limits::MAX_DEPTH`](super::Limits::MAX_DEPTH) (a call
    /// between resources: 16), after the reader has copied the value.
    ///
    /// `root` is called only for a refusal, so a check that passes allocates nothing.
    pub(crate) fn check_within(
        &self,
        root: impl FnOnce() -> String,
        max_depth: usize,
        handles: bool,
    ) -> Result<(), super::TransferError> {
        fn walk(
            m: &super::Message,
            depth: usize,
            max_depth: usize,
            handles: bool,
        ) -> Result<(), (super::TransferErrorKind, Vec<Segment>)> {
            use super::{Message, TransferErrorKind};
            let deeper = |depth: usize| {
                if depth + 1 > max_depth {
                    Err((TransferErrorKind::TooDeep { max_depth }, Vec::new()))
                } else {
                    Ok(depth + 1)
                }
            };
            match m {
                Message::Resource(_) if !handles => Err((TransferErrorKind::UserData, Vec::new())),
                Message::List(items) => {
                    let depth = deeper(depth)?;
                    for (i, item) in items.iter().enumerate() {
                        walk(item, depth, max_depth, handles).map_err(|(kind, mut path)| {
                            path.push(Segment::position(i));
                            (kind, path)
                        })?;
                    }
                    Ok(())
                }
                Message::Map(entries) => {
                    let depth = deeper(depth)?;
                    for (key, value) in entries {
                        walk(value, depth, max_depth, handles).map_err(|(kind, mut path)| {
                            path.push(Segment::key(key));
                            (kind, path)
                        })?;
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        }
        walk(self, 0, max_depth, handles).map_err(|(reason, path)| super::TransferError {
            path: render(&root(), &path),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_use_dots_and_the_rest_brackets() {
        let segments = [
            Segment::Name(b"callback".to_vec()),
            Segment::Index(3),
            Segment::Name(b"items".to_vec()),
        ];
        assert_eq!(render("message", &segments), "message.items[3].callback");
        let odd = [
            Segment::Number(1.5),
            Segment::Name(b"end".to_vec()),
            Segment::Name(b"a \"b\"\n\xff".to_vec()),
        ];
        assert_eq!(
            render("args", &odd),
            "args[\"a \\\"b\\\"\\n\\xFF\"][\"end\"][1.5]"
        );
        assert_eq!(render("m", &[Segment::Number(-2.0)]), "m[-2]");
        assert_eq!(render("m", &[Segment::Described("true".into())]), "m[true]");
        assert_eq!(render("m", &[Segment::Name(Vec::new())]), "m[\"\"]");
    }
}
