//! One version of one table: an immutable `Node` over a persistent hash trie (`trie.rs`).
//!
//! A node is never changed once it is published. A write makes a new node for the table it
//! changes and for each table above it (path copying); every other table of the new version is
//! shared with the old one, and inside each copied node the persistent map copies only the path
//! to the changed key. So a reader holding an old version keeps a whole, consistent picture for
//! as long as it likes, and pays nothing to keep it.

use std::sync::Arc;

use super::key::{Entry, Key, KeyIn, KeyRef};
use super::trie::Trie;
use super::value_cell::Held;
use crate::sync::{AtomicU64, Ordering};
use crate::value::path::Segment;
#[cfg(test)]
use crate::value::MapKey;
use crate::value::{Limits, Message};

/// Node ids come from one process-wide counter, so an id is never reused: a table that was
/// replaced by another is told apart from it even when both sit under the same key. (Plain std
/// atomics: the counter only hands out unique numbers and takes no part in publication.)
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(crate) fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One table at one version: its keys, and what each holds (a nested table, or a cell whose
/// value writes of its shape replace in place; see `value_cell.rs`).
#[derive(Debug)]
pub(crate) struct Node {
    /// Which table this is: kept across versions, new for every table written in.
    pub(crate) id: u64,
    /// The named table's revision at which this table (or a table inside it) last changed: set
    /// by the version that changes it, and raised in place by a write to a cell in it or below
    /// it (a nested table's `jobs.shared.revision`; the named table's own is its gate's count).
    pub(crate) rev: AtomicU64,
    pub(crate) map: Trie,
    /// `#t`: the list positions `1..=border` are all present and `border + 1` is not.
    pub(crate) border: usize,
    /// Entries held here and in every table inside.
    pub(crate) entries: usize,
    /// Weight of this table and every table inside: one node, plus each key and value.
    pub(crate) bytes: usize,
    /// Tables on the longest chain from here down, this one included. Exact when the table is
    /// built; afterwards an upper bound (a removal does not lower it), which only makes the
    /// nesting check strict.
    pub(crate) height: usize,
}

/// A value of a table being copied in that can't be stored, and where (innermost first).
#[derive(Debug)]
pub(crate) struct NotData {
    pub(crate) what: &'static str,
    pub(crate) segments: Vec<Segment>,
}

impl Clone for Node {
    fn clone(&self) -> Node {
        Node {
            id: self.id,
            rev: AtomicU64::new(self.revision()),
            map: self.map.clone(),
            border: self.border,
            entries: self.entries,
            bytes: self.bytes,
            height: self.height,
        }
    }
}

impl Node {
    pub(crate) fn empty(rev: u64) -> Node {
        Node {
            id: fresh_id(),
            rev: AtomicU64::new(rev),
            map: Trie::new(),
            border: 0,
            entries: 0,
            bytes: Limits::NODE_WEIGHT,
            height: 1,
        }
    }

    /// This table's revision (see [`Node::rev`]).
    #[inline]
    pub(crate) fn revision(&self) -> u64 {
        self.rev.load(Ordering::Acquire)
    }

    /// The value at `key` now (a nested table as its live node).
    pub(crate) fn get(&self, key: &Key) -> Option<Entry> {
        Some(self.map.get(key)?.load())
    }

    /// What `key` holds.
    pub(crate) fn held(&self, key: &Key) -> Option<&Held> {
        self.map.get(key)
    }

    /// The nested table at `key`, if it holds one.
    #[inline]
    pub(crate) fn table(&self, key: &Key) -> Option<&Arc<Node>> {
        self.map.get(key)?.as_table()
    }

    /// As [`get`](Node::get) by a borrowed key.
    #[inline]
    pub(crate) fn get_ref(&self, key: KeyRef<'_>) -> Option<Entry> {
        Some(self.map.get_ref(key)?.1.load())
    }

    /// As [`held`](Node::held) by a borrowed key.
    #[inline]
    pub(crate) fn held_ref(&self, key: KeyRef<'_>) -> Option<&Held> {
        Some(self.map.get_ref(key)?.1)
    }

    /// This table with its values as they are now, each in a cell of its own that nothing
    /// writes: the picture a loop walks and a frozen table keeps. Nested tables are copied too
    /// when `deep`, else shared (a loop hands them out as live handles). Keys, shape, id and
    /// counts are kept. The caller reads under the gate (`Gate::read`), so the picture is one
    /// moment of the table.
    pub(crate) fn materialized(&self, deep: bool) -> Node {
        let map = self.map.map_held(&mut |held| match held {
            Held::Table(node) if deep => Held::Table(Arc::new(node.materialized(true))),
            Held::Table(node) => Held::Table(node.clone()),
            Held::Value(cell) => Held::new(cell.load()),
        });
        Node {
            map,
            ..self.clone()
        }
    }

    /// The entry after `key` in this version's walk order (the first entry when `key` is
    /// `None`): the list part `1..=border` first and in order, then every other key in trie
    /// order. A key that is not present still finds a successor: the next list position when it
    /// is one inside the list part, else the next key in trie order.
    pub(crate) fn next_after(&self, key: Option<&Key>) -> Option<(&Key, &Held)> {
        let from = match key {
            None if self.border > 0 => return self.list_entry(1),
            None => self.map.first(),
            Some(key) => match key.as_position() {
                Some(p) if p < self.border => return self.list_entry(p + 1),
                Some(p) if p == self.border => self.map.first(),
                _ => self.map.after(key),
            },
        };
        self.skip_list_part(from)
    }

    /// The entry at list position `p` (present: `p` is inside the list part).
    fn list_entry(&self, p: usize) -> Option<(&Key, &Held)> {
        self.map.get_key_value(&Key::position(p))
    }

    /// `from` or the first entry after it in trie order that is not in the list part (which
    /// the walk has already given).
    fn skip_list_part<'a>(
        &'a self,
        mut from: Option<(&'a Key, &'a Held)>,
    ) -> Option<(&'a Key, &'a Held)> {
        while let Some((k, _)) = from {
            match k.as_position() {
                Some(p) if p <= self.border => from = self.map.after(k),
                _ => return from,
            }
        }
        None
    }

    /// This table with `key` set to `value` (removed when `None`), at version `rev`.
    pub(crate) fn with(&self, key: Key, value: Option<Entry>, rev: u64) -> Node {
        self.with_key(KeyIn::Owned(key), value, rev)
    }

    /// As [`with`](Node::with) for a borrowed key: it is cloned only if the table does not
    /// hold it yet (a write over a present key keeps the stored key, costing no copy).
    pub(crate) fn with_ref(&self, key: &Key, value: Option<Entry>, rev: u64) -> Node {
        self.with_key(KeyIn::Shared(key), value, rev)
    }

    /// As [`with`](Node::with) for a key in any form (see [`KeyIn`]).
    pub(crate) fn with_key(&self, key: KeyIn<'_>, value: Option<Entry>, rev: u64) -> Node {
        let mut next = self.clone();
        // Never back: a write in place may have moved this table's revision past `rev`.
        next.rev = AtomicU64::new(rev.max(self.revision() + 1));
        let key_weight = key.as_ref().weight();
        let position = key.as_ref().as_position();
        let (old, present) = match value {
            Some(value) => {
                next.entries += value.entries();
                next.bytes = next.bytes.saturating_add(key_weight + value.weight());
                if let Entry::Table(child) = &value {
                    next.height = next.height.max(child.height + 1);
                }
                (next.map.insert(key, Held::new(value)), true)
            }
            None => (next.map.remove(key.as_ref()), false),
        };
        if let Some(old) = &old {
            let old = old.held();
            next.entries -= old.entries();
            next.bytes -= key_weight + old.weight();
        }
        if let Some(position) = position {
            if present {
                if position == next.border + 1 {
                    next.border = position;
                    while next.map.contains_key(&Key::position(next.border + 1)) {
                        next.border += 1;
                    }
                }
            } else if position <= next.border {
                next.border = position - 1;
            }
        }
        next
    }

    /// This table with every entry removed, at version `rev`.
    pub(crate) fn cleared(&self, rev: u64) -> Node {
        Node {
            id: self.id,
            ..Node::empty(rev.max(self.revision() + 1))
        }
    }

    /// A copy of this table to be written in somewhere: same contents, a new identity. Its
    /// cells are its own only if this table's were: a table written in comes from a message or
    /// is a handle's `materialized(true)` picture, never a live table of the store.
    pub(crate) fn copied(&self, rev: u64) -> Node {
        Node {
            id: fresh_id(),
            rev: AtomicU64::new(rev),
            ..self.clone()
        }
    }

    /// The list part `1..=border` in order, as it is now.
    pub(crate) fn list(&self) -> impl Iterator<Item = Entry> + '_ {
        (1..=self.border).filter_map(|i| self.get(&Key::position(i)))
    }

    /// A plain deep copy. A table whose keys are exactly `1..n` becomes a list, as a Luau table
    /// does when it crosses a boundary.
    pub(crate) fn to_message(&self) -> Message {
        if self.border > 0 && self.border == self.map.len() {
            return Message::List(self.list().map(|e| entry_message(&e)).collect());
        }
        // In key order, as the copy always was: a snapshot's order does not depend on the
        // process's hash seed.
        let mut entries: Vec<(&Key, &Held)> = self.map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Message::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_map_key(), entry_message(&v.load())))
                .collect(),
        )
    }

    /// Builds a new table from a list or map message. `Nil` values are absent entries.
    pub(crate) fn from_message(message: &Message, rev: u64) -> Result<Node, NotData> {
        let mut node = Node::empty(rev);
        let mut height = 1;
        let mut put = |node: &mut Node, key: Key, value: &Message| -> Result<(), NotData> {
            let Some(entry) = entry_of(value, rev).map_err(|mut e| {
                e.segments.push(key.segment());
                e
            })?
            else {
                return Ok(());
            };
            if let Entry::Table(child) = &entry {
                height = height.max(child.height + 1);
            }
            node.entries += entry.entries();
            node.bytes = node.bytes.saturating_add(key.weight() + entry.weight());
            node.map.insert(KeyIn::Owned(key), Held::new(entry));
            Ok(())
        };
        match message {
            Message::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    put(&mut node, Key::position(i + 1), item)?;
                }
            }
            Message::Map(entries) => {
                for (key, value) in entries {
                    let Some(key) = Key::from_map_key(key) else {
                        return Err(NotData {
                            what: "a NaN key",
                            segments: Vec::new(),
                        });
                    };
                    put(&mut node, key, value)?;
                }
            }
            _ => unreachable_table(),
        }
        while node.map.contains_key(&Key::position(node.border + 1)) {
            node.border += 1;
        }
        node.height = height;
        Ok(node)
    }
}

#[cold]
fn unreachable_table() {
    debug_assert!(false, "Node::from_message takes a list or a map");
}

/// A message as a value to store: `None` for nil (no entry), a refusal for what is not data.
pub(crate) fn entry_of(message: &Message, rev: u64) -> Result<Option<Entry>, NotData> {
    Ok(Some(match message {
        Message::Nil => return Ok(None),
        Message::Boolean(b) => Entry::Boolean(*b),
        Message::Integer(i) => Entry::Integer(*i),
        Message::Number(n) => Entry::Number(*n),
        Message::String(s) => Entry::String(s.clone()),
        Message::Vector(v) => Entry::Vector(*v),
        Message::Buffer(b) => Entry::Buffer(b.clone()),
        Message::List(_) | Message::Map(_) => {
            Entry::Table(Arc::new(Node::from_message(message, rev)?))
        }
        Message::Resource(_) => {
            return Err(NotData {
                what: "a resource handle",
                segments: Vec::new(),
            })
        }
    }))
}

/// A stored value as a plain message; a nested table becomes a deep copy.
pub(crate) fn entry_message(entry: &Entry) -> Message {
    match entry {
        Entry::Boolean(b) => Message::Boolean(*b),
        Entry::Integer(i) => Message::Integer(*i),
        Entry::Number(n) => Message::Number(*n),
        Entry::String(s) => Message::String(s.clone()),
        Entry::Vector(v) => Message::Vector(*v),
        Entry::Buffer(b) => Message::Buffer(b.clone()),
        Entry::Table(node) => node.to_message(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{path, ResourceHandle};

    fn s(text: &str) -> Key {
        Key::String(bytes::Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn the_border_follows_the_list_part() {
        let mut node = Node::empty(0);
        for i in [1, 2, 4] {
            node = node.with(Key::position(i), Some(Entry::Integer(i as i64)), 1);
        }
        assert_eq!(node.border, 2);
        node = node.with(Key::position(3), Some(Entry::Boolean(true)), 2);
        assert_eq!(node.border, 4, "filling the hole joins the rest");
        node = node.with(Key::position(2), None, 3);
        assert_eq!(node.border, 1);
        node = node.with(s("x"), Some(Entry::Boolean(true)), 4);
        assert_eq!(node.border, 1);
        assert_eq!(node.map.len(), 4);
    }

    #[test]
    fn counts_and_weights_follow_every_write() {
        let inner = Node::from_message(
            &Message::List(vec![Message::Integer(1), Message::String("abc".into())]),
            0,
        )
        .unwrap();
        assert_eq!(inner.entries, 2);
        assert_eq!(inner.bytes, 16 + (16 + 16) + (16 + 16 + 3));
        let node = Node::empty(0).with(s("k"), Some(Entry::Table(Arc::new(inner.clone()))), 1);
        assert_eq!(node.entries, 3);
        assert_eq!(node.bytes, 16 + (16 + 1) + inner.bytes);
        assert_eq!(node.height, 2);
        let node = node.with(s("k"), Some(Entry::Boolean(false)), 2);
        assert_eq!((node.entries, node.bytes), (1, 16 + 17 + 16));
        let node = node.with(s("k"), None, 3);
        assert_eq!((node.entries, node.bytes), (0, 16));
    }

    #[test]
    fn a_message_round_trips_and_resources_are_refused() {
        let message = Message::Map(vec![
            (MapKey::String("a".into()), Message::Vector([1.0, 2.0, 3.0])),
            (
                MapKey::String("b".into()),
                Message::List(vec![Message::Number(0.5), Message::Buffer("xy".into())]),
            ),
            (MapKey::Integer(7), Message::Boolean(true)),
        ]);
        let node = Node::from_message(&message, 0).unwrap();
        assert_eq!(node.to_message(), message);
        assert_eq!(node.height, 2);
        let bad = Message::Map(vec![(
            MapKey::String("r".into()),
            Message::List(vec![Message::Resource(ResourceHandle::new("q", 1))]),
        )]);
        let err = Node::from_message(&bad, 0).unwrap_err();
        assert_eq!(err.what, "a resource handle");
        assert_eq!(
            path::render("t", &err.segments),
            "t.r[1]",
            "the path names the value"
        );
    }

    /// (Adjusted for the trie: keys outside the list part come in the trie's hash order, which
    /// depends on the process's seed, not in `Key` order.)
    #[test]
    fn next_walks_the_list_part_then_trie_order_from_any_key() {
        let mut node = Node::empty(0);
        for k in [
            s("b"),
            Key::position(2),
            s("a"),
            Key::position(1),
            Key::position(4),
        ] {
            node = node.with(k, Some(Entry::Boolean(true)), 1);
        }
        let mut seen = Vec::new();
        let mut at = None;
        while let Some((k, _)) = node.next_after(at.as_ref()) {
            seen.push(k.clone());
            at = Some(k.clone());
        }
        assert_eq!(
            seen[..2],
            [Key::position(1), Key::position(2)],
            "the list part first"
        );
        let mut rest = seen[2..].to_vec();
        let hashes: Vec<u64> = rest.iter().map(Key::hash64).collect();
        assert!(hashes.windows(2).all(|w| w[0] < w[1]), "then by hash");
        rest.sort();
        assert_eq!(rest, vec![Key::position(4), s("a"), s("b")], "each once");
        let gone = s("aa");
        let expected = seen[2..].iter().find(|k| k.hash64() > gone.hash64());
        assert_eq!(
            node.next_after(Some(&gone)).map(|(k, _)| k),
            expected,
            "a key no longer present still finds its successor"
        );
        assert_eq!(
            node.next_after(Some(&Key::position(1)))
                .map(|(k, _)| k.clone()),
            Some(Key::position(2))
        );
    }

    /// A table mostly list with a few other keys: the walk skips the list part in trie order
    /// and still sees each entry once, at any border.
    #[test]
    fn a_walk_sees_every_entry_once_around_the_list_part() {
        let mut node = Node::empty(0);
        for i in 1..=200 {
            node = node.with(Key::position(i), Some(Entry::Integer(i as i64)), 1);
        }
        for k in [
            s("x"),
            Key::Integer(3),
            Key::position(250),
            Key::Number(0.5),
        ] {
            node = node.with(k, Some(Entry::Boolean(true)), 2);
        }
        node = node.with(Key::position(100), None, 3);
        assert_eq!(node.border, 99);
        let mut seen = Vec::new();
        let mut at = None;
        while let Some((k, _)) = node.next_after(at.as_ref()) {
            seen.push(k.clone());
            at = Some(k.clone());
        }
        let list: Vec<Key> = (1..=99).map(Key::position).collect();
        assert_eq!(seen[..99], list[..]);
        assert_eq!(seen.len(), node.map.len());
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), node.map.len(), "no entry twice");
    }
}
