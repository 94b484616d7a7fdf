//! A persistent hash array mapped trie from `Key` to `Held`: the map inside every table node.
//!
//! Each branch has 32 slots compressed by a bitmap, so it holds only the slots in use. A slot
//! is an entry (its key's full 64-bit hash kept beside it, so nothing is ever rehashed), a child
//! branch, or a short list of entries whose keys share one full hash. Children are `Arc`s: a
//! write copies only the branches on the path to its key ([`Arc::make_mut`] copies a branch
//! another version still shares and edits one it holds alone in place), so a new version shares
//! everything else with the old one.
//!
//! A branch at depth `d` is indexed by the hash's bits from the top down (5 at a time, the last
//! level the 4 lowest bits), so walking the slots in order visits entries in ascending hash
//! order, and keys sharing a whole hash in `Key` order: `(hash, key)` is the trie's total order,
//! and [`Trie::after`] is a seek in it. The order is fixed for a version, and the same for any
//! two versions in one process (the hash seed is chosen once per process).
//!
//! See `README.md` beside this file for why a hash trie and how it keeps the list part first.

use std::sync::Arc;

use super::key::{Key, KeyIn, KeyRef};
use super::value_cell::Held;

/// Bits of hash each level consumes: a branch has `1 << BITS` slots (32; the bitmap is a
/// `u32`). Measured with callgrind, 4 (16 slots) made a write about 4% cheaper on a 1,000-key
/// table and 8% on a 1,000,000-key one, and a get 4% dearer.
const BITS: u32 = 5;
/// Levels that take a whole `BITS` of the hash; a level below them takes what is left.
const FULL_LEVELS: u32 = 64 / BITS;

/// The slot index of `hash` at `level`: the hash read from its top bits down.
#[inline]
fn index(hash: u64, level: u32) -> u32 {
    if level < FULL_LEVELS {
        ((hash >> (64 - BITS * (level + 1))) & ((1 << BITS) - 1)) as u32
    } else {
        (hash & ((1 << (64 - BITS * FULL_LEVELS)) - 1)) as u32
    }
}

/// One key and its value, with the key's hash. Shared between versions by `Arc`, so copying a
/// branch costs one reference count per slot whatever the key and value hold.
#[derive(Debug)]
struct Leaf {
    hash: u64,
    key: Key,
    held: Held,
}

/// Keys that share one full hash: at least two, kept in `Key` order.
#[derive(Clone, Debug)]
struct Collision {
    hash: u64,
    leaves: Vec<Arc<Leaf>>,
}

/// What a branch holds in one of its slots: a key, a nested branch, or keys whose full hashes
/// collide.
#[derive(Clone, Debug)]
enum Child {
    Leaf(Arc<Leaf>),
    Branch(Arc<Branch>),
    Collision(Arc<Collision>),
}

/// 32 slots compressed by `bitmap`: slot `i` is present when bit `i` is set, and sits at the
/// position of the set bits below it.
///
/// Two allocations per branch (this struct, then the `Vec`'s buffer) measured no worse than
/// one: with the slots as an `Arc<[Child]>` sized to the bitmap and the bitmap beside the
/// pointer in the parent's slot, callgrind put a write in a 1,000,000-entry table at ~9,150-9,300
/// instructions (against ~9,000-9,100 as here) and an `atomic` on 1,000 keys 6% dearer; only a
/// write in a 10-entry table got cheaper (~3,560 against ~3,860-4,270). Much of a path copy is
/// the reference count taken on every slot of every copied branch and given back when the old
/// path is freed, which that layout keeps, and it grows a slot from 16 bytes to 24.
#[derive(Clone, Debug)]
struct Branch {
    bitmap: u32,
    slots: Vec<Child>,
}

/// A value a write displaced or removed, as it was stored.
pub(crate) struct Old(Arc<Leaf>);

impl Old {
    pub(crate) fn held(&self) -> &Held {
        &self.0.held
    }
}

fn leaf(hash: u64, key: Key, held: Held) -> Arc<Leaf> {
    Arc::new(Leaf { hash, key, held })
}

impl Leaf {
    fn map_held(&self, f: &mut impl FnMut(&Held) -> Held) -> Arc<Leaf> {
        Arc::new(Leaf {
            hash: self.hash,
            key: self.key.clone(),
            held: f(&self.held),
        })
    }

    fn pair(&self) -> (&Key, &Held) {
        (&self.key, &self.held)
    }
}

impl Child {
    /// The first entry under this slot in trie order.
    fn first(&self) -> (&Key, &Held) {
        match self {
            Child::Leaf(l) => l.pair(),
            Child::Collision(c) => c.leaves[0].pair(),
            Child::Branch(b) => b.slots[0].first(),
        }
    }
}

impl Branch {
    /// A branch at `level` holding two slots whose hashes differ.
    fn pair(level: u32, a: (u64, Child), b: (u64, Child)) -> Branch {
        let (ia, ib) = (index(a.0, level), index(b.0, level));
        if ia == ib {
            let child = Branch::pair(level + 1, a, b);
            return Branch {
                bitmap: 1 << ia,
                slots: vec![Child::Branch(Arc::new(child))],
            };
        }
        let (lo, hi) = if ia < ib { (a.1, b.1) } else { (b.1, a.1) };
        Branch {
            bitmap: (1 << ia) | (1 << ib),
            slots: vec![lo, hi],
        }
    }

    #[inline]
    fn position(&self, bit: u32) -> usize {
        (self.bitmap & (bit - 1)).count_ones() as usize
    }

    #[inline]
    fn get(&self, hash: u64, key: KeyRef<'_>) -> Option<(&Key, &Held)> {
        let mut branch = self;
        let mut level = 0;
        loop {
            let bit = 1u32 << index(hash, level);
            if branch.bitmap & bit == 0 {
                return None;
            }
            match &branch.slots[branch.position(bit)] {
                Child::Leaf(l) => {
                    return (l.hash == hash && key.is(&l.key)).then_some(l.pair());
                }
                Child::Branch(child) => {
                    branch = child;
                    level += 1;
                }
                Child::Collision(c) => {
                    if c.hash != hash {
                        return None;
                    }
                    let i = c.leaves.binary_search_by(|l| key.cmp_key(&l.key)).ok()?;
                    return Some(c.leaves[i].pair());
                }
            }
        }
    }

    /// Sets `key` (whose hash is `hash`) in this branch at `level`; answers what it held. A
    /// borrowed key is cloned only when it is new: over a present key the stored one is kept.
    fn insert(&mut self, level: u32, hash: u64, key: KeyIn<'_>, entry: Held) -> Option<Old> {
        let bit = 1u32 << index(hash, level);
        let position = self.position(bit);
        if self.bitmap & bit == 0 {
            self.bitmap |= bit;
            self.slots
                .insert(position, Child::Leaf(leaf(hash, key.into_owned(), entry)));
            return None;
        }
        let slot = &mut self.slots[position];
        match slot {
            Child::Leaf(l) if l.hash == hash && key.as_ref().is(&l.key) => {
                let kept = l.key.clone();
                let old = std::mem::replace(l, leaf(hash, kept, entry));
                return Some(Old(old));
            }
            Child::Leaf(l) if l.hash == hash => {
                let new = leaf(hash, key.into_owned(), entry);
                let leaves = if l.key < new.key {
                    vec![l.clone(), new]
                } else {
                    vec![new, l.clone()]
                };
                *slot = Child::Collision(Arc::new(Collision { hash, leaves }));
            }
            Child::Branch(child) => {
                return Arc::make_mut(child).insert(level + 1, hash, key, entry);
            }
            Child::Collision(c) if c.hash == hash => {
                let c = Arc::make_mut(c);
                return match c.leaves.binary_search_by(|l| key.as_ref().cmp_key(&l.key)) {
                    Ok(i) => {
                        let kept = c.leaves[i].key.clone();
                        Some(Old(std::mem::replace(
                            &mut c.leaves[i],
                            leaf(hash, kept, entry),
                        )))
                    }
                    Err(i) => {
                        c.leaves.insert(i, leaf(hash, key.into_owned(), entry));
                        None
                    }
                };
            }
            Child::Leaf(_) | Child::Collision(_) => {
                // A different hash under the same index: both go one level down.
                let old_hash = match slot {
                    Child::Leaf(l) => l.hash,
                    Child::Collision(c) => c.hash,
                    Child::Branch(_) => hash,
                };
                let old = slot.clone();
                let new = Child::Leaf(leaf(hash, key.into_owned(), entry));
                *slot = Child::Branch(Arc::new(Branch::pair(
                    level + 1,
                    (old_hash, old),
                    (hash, new),
                )));
            }
        }
        None
    }

    /// Removes `key` from this branch at `level`; answers what it held.
    fn remove(&mut self, level: u32, hash: u64, key: KeyRef<'_>) -> Option<Old> {
        let bit = 1u32 << index(hash, level);
        if self.bitmap & bit == 0 {
            return None;
        }
        let position = self.position(bit);
        match &mut self.slots[position] {
            Child::Leaf(l) => {
                if l.hash != hash || !key.is(&l.key) {
                    return None;
                }
                self.bitmap &= !bit;
                match self.slots.remove(position) {
                    Child::Leaf(l) => Some(Old(l)),
                    _ => None,
                }
            }
            Child::Branch(child) => {
                let child = Arc::make_mut(child);
                let old = child.remove(level + 1, hash, key)?;
                // A branch left with one entry (or one collision list) folds into its parent,
                // so the trie stays as shallow as its hashes allow.
                if child.slots.len() == 1 && !matches!(child.slots[0], Child::Branch(_)) {
                    if let Some(only) = child.slots.pop() {
                        self.slots[position] = only;
                    }
                }
                Some(old)
            }
            Child::Collision(c) => {
                if c.hash != hash {
                    return None;
                }
                let i = c.leaves.binary_search_by(|l| key.cmp_key(&l.key)).ok()?;
                let c = Arc::make_mut(c);
                let old = c.leaves.remove(i);
                if c.leaves.len() == 1 {
                    let only = c.leaves.pop()?;
                    self.slots[position] = Child::Leaf(only);
                }
                Some(Old(old))
            }
        }
    }

    fn map_held(&self, f: &mut impl FnMut(&Held) -> Held) -> Branch {
        let mut slots = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            slots.push(match slot {
                Child::Leaf(l) => Child::Leaf(l.map_held(f)),
                Child::Branch(b) => Child::Branch(Arc::new(b.map_held(f))),
                Child::Collision(c) => Child::Collision(Arc::new(Collision {
                    hash: c.hash,
                    leaves: c.leaves.iter().map(|l| l.map_held(f)).collect(),
                })),
            });
        }
        Branch {
            bitmap: self.bitmap,
            slots,
        }
    }

    /// The first entry after `(hash, key)` in trie order, under this branch at `level`.
    fn after(&self, level: u32, hash: u64, key: &Key) -> Option<(&Key, &Held)> {
        let i = index(hash, level);
        let bit = 1u32 << i;
        if self.bitmap & bit != 0 {
            let found = match &self.slots[self.position(bit)] {
                Child::Leaf(l) => ((l.hash, &l.key) > (hash, key)).then_some(l.pair()),
                Child::Branch(child) => child.after(level + 1, hash, key),
                Child::Collision(c) => {
                    if c.hash > hash {
                        Some(c.leaves[0].pair())
                    } else if c.hash == hash {
                        let from = c.leaves.partition_point(|l| l.key <= *key);
                        c.leaves.get(from).map(|l| l.pair())
                    } else {
                        None
                    }
                }
            };
            if found.is_some() {
                return found;
            }
        }
        // The first slot above `i`.
        let above = if i == 31 {
            0
        } else {
            self.bitmap & !((bit << 1) - 1)
        };
        if above == 0 {
            return None;
        }
        let next = 1u32 << above.trailing_zeros();
        Some(self.slots[self.position(next)].first())
    }
}

/// A persistent map from `Key` to `Held`, ordered by `(hash, key)`. Cloning is one reference
/// count; every write copies only the path to its key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trie {
    root: Option<Arc<Branch>>,
    len: usize,
}

impl Trie {
    pub(crate) fn new() -> Trie {
        Trie::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub(crate) fn get(&self, key: &Key) -> Option<&Held> {
        Some(self.get_key_value(key)?.1)
    }

    /// The stored key and its value.
    #[inline]
    pub(crate) fn get_key_value(&self, key: &Key) -> Option<(&Key, &Held)> {
        self.get_ref(key.as_ref())
    }

    /// The stored key and its value, found by a borrowed key: no copy, no allocation.
    #[inline]
    pub(crate) fn get_ref(&self, key: KeyRef<'_>) -> Option<(&Key, &Held)> {
        self.root.as_ref()?.get(key.hash64(), key)
    }

    pub(crate) fn contains_key(&self, key: &Key) -> bool {
        self.get(key).is_some()
    }

    /// The same keys in the same shape, each value what `f` makes of it: one pass, no key
    /// rehashed or reordered. (A version's values as they are now, copied into leaves of their
    /// own: `Node::materialized`.)
    pub(crate) fn map_held(&self, f: &mut impl FnMut(&Held) -> Held) -> Trie {
        Trie {
            root: self.root.as_ref().map(|b| Arc::new(b.map_held(f))),
            len: self.len,
        }
    }

    /// Sets `key` to `entry`; answers what it held. Branches another version shares are
    /// copied, the rest edited in place.
    pub(crate) fn insert(&mut self, key: KeyIn<'_>, entry: Held) -> Option<Old> {
        let hash = key.as_ref().hash64();
        let root = self.root.get_or_insert_with(|| {
            Arc::new(Branch {
                bitmap: 0,
                slots: Vec::new(),
            })
        });
        let old = Arc::make_mut(root).insert(0, hash, key, entry);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes `key`; answers what it held. Removing an absent key copies nothing.
    pub(crate) fn remove(&mut self, key: KeyRef<'_>) -> Option<Old> {
        let hash = key.hash64();
        let root = self.root.as_mut()?;
        root.get(hash, key)?;
        let old = Arc::make_mut(root).remove(0, hash, key)?;
        self.len -= 1;
        if self.len == 0 {
            self.root = None;
        }
        Some(old)
    }

    /// The first entry in trie order.
    pub(crate) fn first(&self) -> Option<(&Key, &Held)> {
        Some(self.root.as_ref()?.slots.first()?.first())
    }

    /// The first entry after `key` in trie order; `key` need not be present.
    pub(crate) fn after(&self, key: &Key) -> Option<(&Key, &Held)> {
        self.root.as_ref()?.after(0, key.hash64(), key)
    }

    /// Every entry, in trie order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        let mut stack = Vec::new();
        if let Some(root) = &self.root {
            stack.push(root.slots.iter());
        }
        Iter {
            stack,
            collision: [].iter(),
        }
    }
}

/// The entries of a [`Trie`] in trie order.
pub(crate) struct Iter<'a> {
    stack: Vec<std::slice::Iter<'a, Child>>,
    collision: std::slice::Iter<'a, Arc<Leaf>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Key, &'a Held);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(l) = self.collision.next() {
                return Some(l.pair());
            }
            let top = self.stack.last_mut()?;
            match top.next() {
                None => {
                    self.stack.pop();
                }
                Some(Child::Leaf(l)) => return Some(l.pair()),
                Some(Child::Branch(b)) => self.stack.push(b.slots.iter()),
                Some(Child::Collision(c)) => self.collision = c.leaves.iter(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::key::Entry;
    use super::*;
    use std::collections::BTreeMap;

    fn s(text: &str) -> Key {
        Key::String(bytes::Bytes::copy_from_slice(text.as_bytes()))
    }

    fn int(held: Option<&Held>) -> Option<i64> {
        match held.map(Held::load) {
            Some(Entry::Integer(i)) => Some(i),
            _ => None,
        }
    }

    fn old(old: Option<Old>) -> Option<i64> {
        match old.as_ref().map(|o| o.held().load()) {
            Some(Entry::Integer(i)) => Some(i),
            _ => None,
        }
    }

    /// Walks with `after` from the start and answers the keys seen.
    fn walk(trie: &Trie) -> Vec<Key> {
        let mut seen = Vec::new();
        let mut at = trie.first();
        while let Some((k, _)) = at {
            seen.push(k.clone());
            at = trie.after(k);
        }
        seen
    }

    #[test]
    fn inserts_replaces_and_removes_like_a_map() {
        let mut trie = Trie::new();
        let mut model = BTreeMap::new();
        for i in 0..5_000i64 {
            let key = if i % 3 == 0 {
                s(&format!("k{i}"))
            } else {
                Key::Integer(i * 7919 % 4_001)
            };
            assert_eq!(
                old(trie.insert(KeyIn::Owned(key.clone()), Held::new(Entry::Integer(i)))),
                model.insert(key, i)
            );
        }
        assert_eq!(trie.len(), model.len());
        for (k, v) in &model {
            assert_eq!(int(trie.get(k)), Some(*v));
        }
        assert_eq!(trie.get(&s("absent")).map(|_| ()), None);
        let keys: Vec<Key> = model.keys().cloned().collect();
        for k in keys.iter().step_by(2) {
            assert_eq!(old(trie.remove(k.as_ref())), model.remove(k));
            assert!(
                trie.remove(k.as_ref()).is_none(),
                "a second removal finds nothing"
            );
        }
        assert_eq!(trie.len(), model.len());
        for k in &keys {
            assert_eq!(int(trie.get(k)), model.get(k).copied());
        }
        let mut seen: Vec<Key> = trie.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            seen,
            walk(&trie),
            "iteration and `after` agree on the order"
        );
        seen.sort();
        assert_eq!(seen, model.keys().cloned().collect::<Vec<_>>());
        for k in &keys {
            trie.remove(k.as_ref());
        }
        assert!(trie.is_empty() && trie.root.is_none() && trie.first().is_none());
    }

    #[test]
    fn an_old_version_is_untouched_by_writes_to_a_copy() {
        let mut old = Trie::new();
        for i in 0..200 {
            old.insert(KeyIn::Owned(Key::Integer(i)), Held::new(Entry::Integer(i)));
        }
        let mut new = old.clone();
        new.insert(KeyIn::Owned(Key::Integer(5)), Held::new(Entry::Integer(-5)));
        new.remove(KeyRef::Integer(6));
        new.insert(KeyIn::Owned(s("x")), Held::new(Entry::Boolean(true)));
        assert_eq!(int(old.get(&Key::Integer(5))), Some(5));
        assert_eq!(int(old.get(&Key::Integer(6))), Some(6));
        assert!(old.get(&s("x")).is_none());
        assert_eq!((old.len(), new.len()), (200, 200));
        assert_eq!(int(new.get(&Key::Integer(5))), Some(-5));
        assert!(new.get(&Key::Integer(6)).is_none());
    }

    #[test]
    fn the_order_is_by_hash_and_absent_keys_find_their_successor() {
        let mut trie = Trie::new();
        for i in 0..300 {
            trie.insert(KeyIn::Owned(Key::Integer(i)), Held::new(Entry::Integer(i)));
        }
        let order = walk(&trie);
        assert_eq!(order.len(), 300, "every entry once");
        let hashes: Vec<u64> = order.iter().map(Key::hash64).collect();
        assert!(hashes.windows(2).all(|w| w[0] < w[1]), "ascending hash");
        for probe in [s("gone"), Key::Integer(1_000), Key::Number(0.5)] {
            let h = probe.hash64();
            let expected = order.iter().find(|k| k.hash64() > h);
            assert_eq!(trie.after(&probe).map(|(k, _)| k), expected);
        }
    }

    /// Leaves that share a whole hash, built by hand (a seeded hash can't be made to collide).
    #[test]
    fn keys_sharing_a_hash_sit_in_one_list_in_key_order() {
        let mut branch = Branch {
            bitmap: 0,
            slots: Vec::new(),
        };
        let h = 0xABCD_0000_0000_1234;
        for (i, k) in [s("b"), s("a"), s("c")].into_iter().enumerate() {
            assert!(branch
                .insert(0, h, KeyIn::Owned(k), Held::new(Entry::Integer(i as i64)))
                .is_none());
        }
        assert!(branch
            .insert(0, h ^ 1, KeyIn::Owned(s("z")), Held::new(Entry::Integer(9)))
            .is_none());
        assert_eq!(
            int(branch.get(h, KeyRef::String(b"a")).map(|e| e.1)),
            Some(1)
        );
        assert_eq!(
            int(branch.get(h, KeyRef::String(b"c")).map(|e| e.1)),
            Some(2)
        );
        assert!(branch.get(h, KeyRef::String(b"d")).is_none());
        assert_eq!(
            old(branch.insert(0, h, KeyIn::Owned(s("a")), Held::new(Entry::Integer(7)))),
            Some(1)
        );
        let order: Vec<Key> = {
            let mut out = vec![branch.slots[0].first().0.clone()];
            while let Some((k, _)) = {
                let last = &out[out.len() - 1];
                branch.after(0, last.hash64_or(h), last)
            } {
                out.push(k.clone());
            }
            out
        };
        assert_eq!(
            order,
            vec![s("a"), s("b"), s("c"), s("z")],
            "one hash's keys in key order, then the greater hash h ^ 1"
        );
        assert_eq!(old(branch.remove(0, h, KeyRef::String(b"b"))), Some(0));
        assert_eq!(old(branch.remove(0, h, KeyRef::String(b"c"))), Some(2));
        assert!(branch.remove(0, h, KeyRef::String(b"c")).is_none());
        assert!(
            branch
                .slots
                .iter()
                .all(|s| !matches!(s, Child::Collision(_))),
            "one key left is a plain leaf again"
        );
        assert_eq!(
            int(branch.get(h, KeyRef::String(b"a")).map(|e| e.1)),
            Some(7)
        );
        assert_eq!(
            int(branch.get(h ^ 1, KeyRef::String(b"z")).map(|e| e.1)),
            Some(9)
        );
    }

    impl Key {
        /// The hash the hand-built collision test gave: `z` has `h ^ 1`, the rest `h`.
        fn hash64_or(&self, h: u64) -> u64 {
            if *self == s("z") {
                h ^ 1
            } else {
                h
            }
        }
    }
}
