//! What a shared table holds: its keys (`Key`) and its values (`Entry`), and what each weighs.
//!
//! Keys have one total order (numbers by value, then integers, then strings by bytes), used
//! where a table must come out the same in every process (a snapshot, keys sharing one hash in
//! the trie); the trie itself finds keys by their seeded hash (`Key::hash64`).

use std::cmp::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::node::Node;
use crate::value::path::{self, Segment};
use crate::value::{Limits, MapKey, Message};

/// A key of a shared table. Luau keeps integer keys apart from number keys, and so does this;
/// `t[1]` in ordinary Luau code is the number key 1.
#[derive(Clone, Debug)]
pub(crate) enum Key {
    /// A number key: never NaN, and `-0` is stored as `0` (Luau treats them as one key).
    Number(f64),
    /// A Luau integer key.
    Integer(i64),
    /// A string key: any bytes.
    String(Bytes),
}

impl Key {
    /// A number key, or `None` for NaN (which can't be a key).
    pub(crate) fn number(n: f64) -> Option<Key> {
        if n.is_nan() {
            None
        } else if n == 0.0 {
            Some(Key::Number(0.0))
        } else {
            Some(Key::Number(n))
        }
    }

    /// The list position `i` (a number key, as Luau's array part uses).
    pub(crate) fn position(i: usize) -> Key {
        Key::Number(i as f64)
    }

    /// This key as a list position `1..=2^53`, if it is one.
    pub(crate) fn as_position(&self) -> Option<usize> {
        match self {
            Key::Number(n) if *n >= 1.0 && n.fract() == 0.0 && *n <= (1u64 << 53) as f64 => {
                Some(*n as usize)
            }
            _ => None,
        }
    }

    /// The bytes this key costs in a table.
    pub(crate) fn weight(&self) -> usize {
        match self {
            Key::String(s) => Limits::NODE_WEIGHT.saturating_add(s.len()),
            Key::Number(_) | Key::Integer(_) => Limits::NODE_WEIGHT,
        }
    }

    pub(crate) fn from_map_key(key: &MapKey) -> Option<Key> {
        match key {
            MapKey::Integer(i) => Some(Key::Integer(*i)),
            MapKey::Number(n) => Key::number(*n),
            MapKey::String(s) => Some(Key::String(s.clone())),
        }
    }

    /// As [`from_map_key`](Key::from_map_key), taking the key's bytes instead of sharing them:
    /// a lookup by a key the caller gives away costs no reference count.
    pub(crate) fn from_owned_map_key(key: MapKey) -> Option<Key> {
        match key {
            MapKey::Integer(i) => Some(Key::Integer(i)),
            MapKey::Number(n) => Key::number(n),
            MapKey::String(s) => Some(Key::String(s)),
        }
    }

    pub(crate) fn to_map_key(&self) -> MapKey {
        match self {
            Key::Number(n) => MapKey::Number(*n),
            Key::Integer(i) => MapKey::Integer(*i),
            Key::String(s) => MapKey::String(s.clone()),
        }
    }

    /// The path segment Luau code would write to reach this key.
    pub(crate) fn segment(&self) -> Segment {
        match self {
            Key::Number(n) => Segment::Number(*n),
            Key::Integer(i) => Segment::Index(*i),
            Key::String(s) => Segment::Name(s.to_vec()),
        }
    }

    /// The key's 64-bit hash; see [`KeyRef::hash64`].
    #[inline]
    pub(crate) fn hash64(&self) -> u64 {
        self.as_ref().hash64()
    }

    /// This key borrowed: what a lookup takes.
    #[inline]
    pub(crate) fn as_ref(&self) -> KeyRef<'_> {
        match self {
            Key::Number(n) => KeyRef::Number(*n),
            Key::Integer(i) => KeyRef::Integer(*i),
            Key::String(s) => KeyRef::String(s),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Key::Number(_) => 0,
            Key::Integer(_) => 1,
            Key::String(_) => 2,
        }
    }
}

/// A key as a lookup takes it: a string key borrows its bytes (from a caller's `Bytes`, or
/// straight from the Luau stack), so finding a key copies and allocates nothing. Hashes and
/// compares exactly as the [`Key`] it stands for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyRef<'a> {
    /// As [`Key::Number`]: never NaN, never `-0`.
    Number(f64),
    Integer(i64),
    String(&'a [u8]),
}

impl<'a> KeyRef<'a> {
    /// `key` borrowed, or `None` for a NaN (which can't be a key).
    #[inline]
    pub(crate) fn from_map_key(key: &'a MapKey) -> Option<KeyRef<'a>> {
        match key {
            MapKey::Integer(i) => Some(KeyRef::Integer(*i)),
            MapKey::Number(n) => KeyRef::number(*n),
            MapKey::String(s) => Some(KeyRef::String(s)),
        }
    }

    /// As [`Key::number`].
    #[inline]
    pub(crate) fn number(n: f64) -> Option<KeyRef<'a>> {
        if n.is_nan() {
            None
        } else if n == 0.0 {
            Some(KeyRef::Number(0.0))
        } else {
            Some(KeyRef::Number(n))
        }
    }

    /// The key's 64-bit hash: foldhash with a seed chosen once per process, so a script that
    /// chooses its keys can't aim them at one slot of the trie. Integers and numbers cost one
    /// folded multiply, short strings a couple.
    #[inline]
    pub(crate) fn hash64(self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = hash_state().build_hasher();
        match self {
            KeyRef::Number(n) => {
                h.write_u64(n.to_bits());
                h.write_u8(0);
            }
            KeyRef::Integer(i) => {
                h.write_u64(i as u64);
                h.write_u8(1);
            }
            KeyRef::String(s) => {
                h.write(s);
                h.write_u8(2);
            }
        }
        h.finish()
    }

    /// As [`Key::as_position`].
    #[inline]
    pub(crate) fn as_position(self) -> Option<usize> {
        match self {
            KeyRef::Number(n) if n >= 1.0 && n.fract() == 0.0 && n <= (1u64 << 53) as f64 => {
                Some(n as usize)
            }
            _ => None,
        }
    }

    /// As [`Key::weight`].
    #[inline]
    pub(crate) fn weight(self) -> usize {
        match self {
            KeyRef::String(s) => Limits::NODE_WEIGHT.saturating_add(s.len()),
            KeyRef::Number(_) | KeyRef::Integer(_) => Limits::NODE_WEIGHT,
        }
    }

    /// Whether `key` is this key.
    #[inline]
    pub(crate) fn is(self, key: &Key) -> bool {
        match (self, key) {
            // No NaN and no -0 reach a key, so `==` is `total_cmp`'s equality.
            (KeyRef::Number(a), Key::Number(b)) => a == *b,
            (KeyRef::Integer(a), Key::Integer(b)) => a == *b,
            (KeyRef::String(a), Key::String(b)) => a == &b[..],
            _ => false,
        }
    }

    /// `key` compared with this key, in [`Key`]'s order.
    #[inline]
    pub(crate) fn cmp_key(self, key: &Key) -> Ordering {
        match (key, self) {
            (Key::Number(a), KeyRef::Number(b)) => a.total_cmp(&b),
            (Key::Integer(a), KeyRef::Integer(b)) => a.cmp(&b),
            (Key::String(a), KeyRef::String(b)) => a[..].cmp(b),
            _ => key.rank().cmp(&self.rank()),
        }
    }

    fn rank(self) -> u8 {
        match self {
            KeyRef::Number(_) => 0,
            KeyRef::Integer(_) => 1,
            KeyRef::String(_) => 2,
        }
    }

    /// The owned key (a string key's bytes copied).
    pub(crate) fn to_key(self) -> Key {
        match self {
            KeyRef::Number(n) => Key::Number(n),
            KeyRef::Integer(i) => Key::Integer(i),
            KeyRef::String(s) => Key::String(Bytes::copy_from_slice(s)),
        }
    }
}

/// A key a write takes: given away, shared (a reference count if the table lacks it), or
/// borrowed bytes (copied if the table lacks it). A write over a present key keeps the key the
/// table holds, so a borrowed one then costs nothing.
#[derive(Clone, Debug)]
pub(crate) enum KeyIn<'a> {
    Owned(Key),
    Shared(&'a Key),
    Bytes(KeyRef<'a>),
}

impl KeyIn<'_> {
    #[inline]
    pub(crate) fn as_ref(&self) -> KeyRef<'_> {
        match self {
            KeyIn::Owned(k) => k.as_ref(),
            KeyIn::Shared(k) => k.as_ref(),
            KeyIn::Bytes(k) => *k,
        }
    }

    /// The key to store, when the table does not hold it yet.
    pub(crate) fn into_owned(self) -> Key {
        match self {
            KeyIn::Owned(k) => k,
            KeyIn::Shared(k) => k.clone(),
            KeyIn::Bytes(k) => k.to_key(),
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            // No NaN and no -0 reach a Key, so total_cmp is the numeric order.
            (Key::Number(a), Key::Number(b)) => a.total_cmp(b),
            (Key::Integer(a), Key::Integer(b)) => a.cmp(b),
            (Key::String(a), Key::String(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// The process's hash seed: drawn on first use, then fixed for the process's life.
#[inline]
fn hash_state() -> &'static foldhash::fast::SeedableRandomState {
    static STATE: std::sync::OnceLock<foldhash::fast::SeedableRandomState> =
        std::sync::OnceLock::new();
    STATE.get_or_init(foldhash::fast::SeedableRandomState::random)
}

/// Renders where a table sits: `'players'.alice[3]`, from the table's name and its keys from
/// the root down.
pub(crate) fn location(name: &str, keys: &[Key]) -> String {
    let segments: Vec<Segment> = keys.iter().rev().map(Key::segment).collect();
    path::render(&format!("'{name}'"), &segments)
}

/// A value a shared table holds: data only, each read back as the type it was written with.
#[derive(Clone, Debug)]
pub(crate) enum Entry {
    Boolean(bool),
    Integer(i64),
    Number(f64),
    String(Bytes),
    Vector([f32; 3]),
    Buffer(Bytes),
    /// A nested table: itself versioned with the table it sits in.
    Table(Arc<Node>),
}

/// A number to add to a key (`jobs.shared.add`). Luau keeps integers apart from numbers, and so
/// does the sum: an integer plus an integer stays an integer (wrapping on overflow, as Luau's
/// integer arithmetic does); anything plus a number is a number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Amount {
    Integer(i64),
    Number(f64),
}

impl Amount {
    /// `message` as an amount, or what it is instead (`a string`).
    pub(crate) fn of(message: &Message) -> Result<Amount, &'static str> {
        match message {
            Message::Integer(i) => Ok(Amount::Integer(*i)),
            Message::Number(n) => Ok(Amount::Number(*n)),
            other => Err(message_article(other)),
        }
    }

    /// `current + self`, a missing key counting as zero; or what `current` is instead of a
    /// number (`a string`).
    pub(crate) fn added_to(self, current: Option<&Entry>) -> Result<Entry, &'static str> {
        Ok(match (current, self) {
            (None, Amount::Integer(i)) => Entry::Integer(i),
            (None, Amount::Number(n)) => Entry::Number(n),
            (Some(Entry::Integer(a)), Amount::Integer(b)) => Entry::Integer(a.wrapping_add(b)),
            (Some(Entry::Integer(a)), Amount::Number(b)) => Entry::Number(*a as f64 + b),
            (Some(Entry::Number(a)), Amount::Integer(b)) => Entry::Number(a + b as f64),
            (Some(Entry::Number(a)), Amount::Number(b)) => Entry::Number(a + b),
            (Some(other), _) => return Err(other.article()),
        })
    }
}

/// What a message is, with its article, as an error names it: `a string`, `nil`.
fn message_article(message: &Message) -> &'static str {
    match message {
        Message::Nil => "nil",
        Message::Boolean(_) => "a boolean",
        Message::Integer(_) => "an integer",
        Message::Number(_) => "a number",
        Message::String(_) => "a string",
        Message::Vector(_) => "a vector",
        Message::Buffer(_) => "a buffer",
        Message::List(_) | Message::Map(_) => "a table",
        Message::Resource(_) => "a resource handle",
    }
}

impl Entry {
    /// What this value is, with its article, as an error names it: `a string`.
    pub(crate) fn article(&self) -> &'static str {
        match self {
            Entry::Boolean(_) => "a boolean",
            Entry::Integer(_) => "an integer",
            Entry::Number(_) => "a number",
            Entry::String(_) => "a string",
            Entry::Vector(_) => "a vector",
            Entry::Buffer(_) => "a buffer",
            Entry::Table(_) => "a table",
        }
    }

    /// The bytes this value costs: a node, its string or buffer bytes, or a nested table's whole
    /// weight.
    pub(crate) fn weight(&self) -> usize {
        match self {
            Entry::String(b) | Entry::Buffer(b) => Limits::NODE_WEIGHT.saturating_add(b.len()),
            Entry::Table(node) => node.bytes,
            Entry::Boolean(_) | Entry::Integer(_) | Entry::Number(_) | Entry::Vector(_) => {
                Limits::NODE_WEIGHT
            }
        }
    }

    /// Entries this value adds to a table's count: itself, plus a nested table's own.
    pub(crate) fn entries(&self) -> usize {
        match self {
            Entry::Table(node) => 1 + node.entries,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_numbers_then_integers_then_strings() {
        let mut keys = vec![
            Key::String("b".into()),
            Key::Integer(-5),
            Key::number(2.0).unwrap(),
            Key::String("a".into()),
            Key::number(-1.5).unwrap(),
            Key::Integer(3),
        ];
        keys.sort();
        assert_eq!(
            keys,
            vec![
                Key::Number(-1.5),
                Key::Number(2.0),
                Key::Integer(-5),
                Key::Integer(3),
                Key::String("a".into()),
                Key::String("b".into()),
            ]
        );
        assert_eq!(Key::number(-0.0), Some(Key::Number(0.0)));
        assert_eq!(Key::number(f64::NAN), None);
        assert_ne!(Key::Integer(1), Key::Number(1.0));
    }

    #[test]
    fn a_borrowed_key_hashes_and_compares_as_its_key() {
        let keys = [
            Key::Number(-1.5),
            Key::Number(2.0),
            Key::Integer(2),
            Key::Integer(-7),
            Key::String("".into()),
            Key::String("a".into()),
            Key::String("ab".into()),
        ];
        for a in &keys {
            let r = a.as_ref();
            assert_eq!(r.hash64(), a.hash64());
            assert_eq!(r.weight(), a.weight());
            assert_eq!(r.as_position(), a.as_position());
            assert_eq!(r.to_key(), *a);
            for b in &keys {
                assert_eq!(r.is(b), a == b, "{a:?} is {b:?}");
                assert_eq!(r.cmp_key(b), b.cmp(a), "{b:?} against {a:?}");
            }
        }
        let held = MapKey::String("ab".into());
        let borrowed = KeyRef::from_map_key(&held).unwrap();
        assert!(matches!(borrowed, KeyRef::String(b) if b == b"ab"));
        assert!(KeyRef::from_map_key(&MapKey::Number(f64::NAN)).is_none());
        assert!(matches!(KeyRef::number(-0.0), Some(KeyRef::Number(n)) if n.to_bits() == 0));
        assert_eq!(
            KeyIn::Bytes(KeyRef::String(b"x")).into_owned(),
            Key::String("x".into())
        );
    }

    #[test]
    fn positions_are_whole_positive_numbers() {
        assert_eq!(Key::Number(3.0).as_position(), Some(3));
        assert_eq!(Key::Number(0.0).as_position(), None);
        assert_eq!(Key::Number(1.5).as_position(), None);
        assert_eq!(Key::Integer(1).as_position(), None);
        assert_eq!(Key::position(7), Key::Number(7.0));
    }

    #[test]
    fn locations_read_like_luau() {
        let keys = [
            Key::String("alice".into()),
            Key::Number(3.0),
            Key::String("end".into()),
        ];
        assert_eq!(location("players", &keys), "'players'.alice[3][\"end\"]");
        assert_eq!(location("p", &[]), "'p'");
    }
}
