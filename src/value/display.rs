//! `Message` as a person reads it: close to the Luau literal that would build it, for log lines
//! and error texts. Not a serialisation: strings are shown with Rust's escapes, and a buffer only
//! by its length.

use std::fmt;

use super::{MapKey, Message};

/// A Luau identifier that is not a reserved word can be written `name = v` in a table literal.
fn is_plain_name(bytes: &[u8]) -> bool {
    const RESERVED: &[&str] = &[
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
        "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    ];
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let mut chars = text.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&text)
}

fn quoted(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    write!(f, "{:?}", String::from_utf8_lossy(bytes))
}

impl fmt::Display for MapKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapKey::Integer(i) => write!(f, "{i}"),
            MapKey::Number(n) => write!(f, "{n}"),
            MapKey::String(s) => quoted(f, s),
        }
    }
}

impl fmt::Display for Message {
    /// ```
    /// use skein::{MapKey, Message};
    /// let m = Message::Map(vec![
    ///     (MapKey::String("left".into()), Message::Integer(3)),
    ///     (MapKey::String("two words".into()), Message::List(vec![Message::Boolean(true), Message::Nil])),
    /// ]);
    /// assert_eq!(m.to_string(), r#"{left = 3, ["two words"] = {true, nil}}"#);
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Nil => f.write_str("nil"),
            Message::Boolean(b) => write!(f, "{b}"),
            Message::Integer(i) => write!(f, "{i}"),
            Message::Number(n) => write!(f, "{n}"),
            Message::String(s) => quoted(f, s),
            Message::Vector([x, y, z]) => write!(f, "vector({x}, {y}, {z})"),
            Message::Buffer(b) => write!(f, "buffer({} bytes)", b.len()),
            Message::List(items) => {
                f.write_str("{")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("}")
            }
            Message::Map(entries) => {
                f.write_str("{")?;
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match key {
                        MapKey::String(s) if is_plain_name(s) => {
                            write!(f, "{} = {value}", String::from_utf8_lossy(s))?
                        }
                        key => write!(f, "[{key}] = {value}")?,
                    }
                }
                f.write_str("}")
            }
            Message::Resource(r) => {
                write!(f, "resource({}#{})", String::from_utf8_lossy(&r.kind), r.id)
            }
        }
    }
}

/// The indefinite article of `word` as it is said: `an integer`, `a userdata`, `a unit`.
pub(crate) fn article(word: &str) -> &'static str {
    // A `u` said as "you" (userdata, unique, usage) takes `a`.
    let you = word.starts_with("us") || word.starts_with("uni");
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) && !you {
        "an"
    } else {
        "a"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_and_keys_read_as_luau() {
        assert_eq!(Message::Nil.to_string(), "nil");
        assert_eq!(Message::Number(2.5).to_string(), "2.5");
        assert_eq!(Message::String("a\"b".into()).to_string(), r#""a\"b""#);
        assert_eq!(
            Message::Vector([1.0, 2.0, 3.5]).to_string(),
            "vector(1, 2, 3.5)"
        );
        assert_eq!(
            Message::Buffer(vec![0u8; 4].into()).to_string(),
            "buffer(4 bytes)"
        );
        let m = Message::Map(vec![
            (MapKey::Integer(7), Message::Boolean(false)),
            (MapKey::Number(0.5), Message::Integer(1)),
            (MapKey::String("end".into()), Message::Integer(2)),
        ]);
        assert_eq!(m.to_string(), r#"{[7] = false, [0.5] = 1, ["end"] = 2}"#);
    }
}
