//! What a key of a table holds in the trie: a nested table (structure, changed only by a new
//! version) or a [`ValueCell`] (a value a write to the key replaces in place).
//!
//! A cell keeps one *shape* for its life: its kind (boolean, integer, number, or a boxed
//! string, vector or buffer) and its weight. A write of a value of the same shape replaces the
//! value in the cell; anything else (another kind, a string of another length, nil, a table)
//! replaces the key's leaf in a new version. So a table's entry count and weight never change in
//! place, and the bounds stay a property of versions.
//!
//! Numbers, integers and booleans sit in the cell's word: a read is one load, `add` on an
//! integer is one `fetch_add`, and nothing is allocated. Strings, vectors and buffers sit in a
//! box behind an atomic pointer; a write swaps in a new box and hands the old one to
//! `crossbeam-epoch`, which frees it once no reader that loaded it can still be reading it
//! (every read pins the epoch for the few instructions of its clone). Under `cfg(loom)` the box
//! is a loom `UnsafeCell` behind a loom `AtomicPtr`, published with the same orderings, and
//! kept until the cell is dropped in place of the epoch, so the models check the protocol
//! around cells (`gate.rs`) and the box's publication, not crossbeam's reclamation.

use std::sync::Arc;

use super::key::{Amount, Entry};
use super::node::Node;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// What a key holds in one version.
#[derive(Debug)]
pub(crate) enum Held {
    Table(Arc<Node>),
    Value(ValueCell),
}

impl Held {
    pub(crate) fn new(entry: Entry) -> Held {
        match entry {
            Entry::Table(node) => Held::Table(node),
            value => Held::Value(ValueCell::new(value)),
        }
    }

    /// The value now held (a nested table as the live node).
    #[inline]
    pub(crate) fn load(&self) -> Entry {
        match self {
            Held::Table(node) => Entry::Table(node.clone()),
            Held::Value(cell) => cell.load(),
        }
    }

    pub(crate) fn as_table(&self) -> Option<&Arc<Node>> {
        match self {
            Held::Table(node) => Some(node),
            Held::Value(_) => None,
        }
    }

    /// The bytes this value costs (fixed for a cell's life).
    pub(crate) fn weight(&self) -> usize {
        match self {
            Held::Table(node) => node.bytes,
            Held::Value(cell) => cell.weight,
        }
    }

    /// Entries this value adds to a table's count.
    pub(crate) fn entries(&self) -> usize {
        match self {
            Held::Table(node) => 1 + node.entries,
            Held::Value(_) => 1,
        }
    }
}

/// The kinds of value a cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Boolean,
    Integer,
    Number,
    String,
    Vector,
    Buffer,
}

fn kind_of(entry: &Entry) -> Option<Kind> {
    Some(match entry {
        Entry::Boolean(_) => Kind::Boolean,
        Entry::Integer(_) => Kind::Integer,
        Entry::Number(_) => Kind::Number,
        Entry::String(_) => Kind::String,
        Entry::Vector(_) => Kind::Vector,
        Entry::Buffer(_) => Kind::Buffer,
        Entry::Table(_) => return None,
    })
}

/// The heaviest boxed value (its weight, as the bounds count it) a write replaces in place.
///
/// A replaced box waits for `crossbeam-epoch` to free it, outside the store's byte budget, and
/// a thread's garbage is only handed on for freeing in bags of 64: a script rewriting a 32 MiB
/// string in place could keep gigabytes waiting. Heavier values take the versioned path, whose
/// old version is freed as soon as no reader holds it. So each waiting box is at most 4 KiB; how
/// many wait depends on the epoch moving on (`docs/architecture.md`).
pub(crate) const IN_PLACE_MAX_WEIGHT: usize = 4096;

/// One key's value, replaced in place by writes of its shape.
#[derive(Debug)]
pub(crate) struct ValueCell {
    kind: Kind,
    weight: usize,
    /// Whether writes may replace the value in place (a boxed value at most
    /// `IN_PLACE_MAX_WEIGHT`; any word).
    in_place: bool,
    repr: Repr,
}

#[derive(Debug)]
enum Repr {
    Boolean(AtomicBool),
    /// An integer's or a number's bits.
    Word(AtomicU64),
    Boxed(Boxed),
}

impl ValueCell {
    /// A cell holding `entry`, which is not a table.
    pub(crate) fn new(entry: Entry) -> ValueCell {
        let weight = entry.weight();
        let kind = kind_of(&entry).unwrap_or(Kind::Boolean);
        let in_place = weight <= IN_PLACE_MAX_WEIGHT;
        let repr = match entry {
            Entry::Boolean(b) => Repr::Boolean(AtomicBool::new(b)),
            Entry::Integer(i) => Repr::Word(AtomicU64::new(i as u64)),
            Entry::Number(n) => Repr::Word(AtomicU64::new(n.to_bits())),
            Entry::Table(_) => {
                debug_assert!(false, "a table is held as structure, not in a cell");
                Repr::Boolean(AtomicBool::new(false))
            }
            other => Repr::Boxed(Boxed::new(other)),
        };
        ValueCell {
            kind,
            weight,
            in_place,
            repr,
        }
    }

    #[inline]
    fn entry_of_word(&self, bits: u64) -> Entry {
        match self.kind {
            Kind::Integer => Entry::Integer(bits as i64),
            _ => Entry::Number(f64::from_bits(bits)),
        }
    }

    /// The value now in the cell. Never blocks.
    ///
    /// `Acquire`: a many-key read (`Gate::read`) that loads a value written after a writer
    /// counted itself in the gate must then see that count, or it would keep a torn picture.
    #[inline]
    pub(crate) fn load(&self) -> Entry {
        // A word carries no data beside itself, so no loom model sees this `Acquire` weakened
        // (with `Relaxed` here every model passes); the argument is in `gate.rs`'s module
        // docs. A box's load is where a `Relaxed` mutant is caught (`Boxed::load` under loom).
        const LOAD: Ordering = Ordering::Acquire;
        match &self.repr {
            Repr::Boolean(b) => Entry::Boolean(b.load(LOAD)),
            Repr::Word(w) => self.entry_of_word(w.load(LOAD)),
            Repr::Boxed(b) => b.load(),
        }
    }

    /// Whether `entry` can replace this cell's value in place: same kind, same weight.
    #[inline]
    pub(crate) fn fits(&self, entry: &Entry) -> bool {
        self.in_place && kind_of(entry) == Some(self.kind) && entry.weight() == self.weight
    }

    /// Stores `entry` if it [`fits`](ValueCell::fits); answers whether it did.
    pub(crate) fn store(&self, entry: &Entry) -> bool {
        if !self.fits(entry) {
            return false;
        }
        match (&self.repr, entry) {
            (Repr::Boolean(b), Entry::Boolean(v)) => b.store(*v, Ordering::Release),
            (Repr::Word(w), Entry::Integer(i)) => w.store(*i as u64, Ordering::Release),
            (Repr::Word(w), Entry::Number(n)) => w.store(n.to_bits(), Ordering::Release),
            (Repr::Boxed(b), other) => b.swap(other.clone()),
            _ => return false,
        }
        true
    }

    /// Replaces `expected` by `new` if the cell still holds a value equal to `expected` (bit for
    /// bit for numbers) and `new` fits; answers whether it did. Equality, not identity: for a
    /// function that only reads this key, a value that changed and came back is the value it
    /// was given, so committing gives the answer it would give now.
    pub(crate) fn compare_exchange(&self, expected: &Entry, new: &Entry) -> bool {
        if !self.fits(new) {
            return false;
        }
        match (&self.repr, expected, new) {
            (Repr::Boolean(b), Entry::Boolean(was), Entry::Boolean(now)) => b
                .compare_exchange(*was, *now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
            (Repr::Word(w), was, now) => {
                let (Some(was), Some(now)) = (word_of(was, self.kind), word_of(now, self.kind))
                else {
                    return false;
                };
                w.compare_exchange(was, now, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            }
            (Repr::Boxed(b), was, now) => b.compare_exchange(was, now),
            _ => false,
        }
    }

    /// Adds `amount` in place when the sum keeps the cell's kind: answers the sum, or what the
    /// cell holds instead of a number (`a string`); `None` when the sum changes the kind (an
    /// integer plus a number), which is a new leaf's work.
    pub(crate) fn add(&self, amount: Amount) -> Option<Result<Entry, &'static str>> {
        let Repr::Word(w) = &self.repr else {
            return Some(Err(self.article()));
        };
        match (self.kind, amount) {
            (Kind::Integer, Amount::Integer(d)) => {
                // Two's complement: adding the bits wraps exactly as `i64::wrapping_add`.
                let was = w.fetch_add(d as u64, Ordering::AcqRel);
                Some(Ok(Entry::Integer((was as i64).wrapping_add(d))))
            }
            (Kind::Number, amount) => {
                let d = match amount {
                    Amount::Integer(i) => i as f64,
                    Amount::Number(n) => n,
                };
                let mut was = w.load(Ordering::Acquire);
                loop {
                    let sum = f64::from_bits(was) + d;
                    match w.compare_exchange_weak(
                        was,
                        sum.to_bits(),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Some(Ok(Entry::Number(sum))),
                        Err(now) => was = now,
                    }
                }
            }
            _ => None,
        }
    }

    /// What the cell holds, with its article, for an error: `a string`.
    pub(crate) fn article(&self) -> &'static str {
        match self.kind {
            Kind::Boolean => "a boolean",
            Kind::Integer => "an integer",
            Kind::Number => "a number",
            Kind::String => "a string",
            Kind::Vector => "a vector",
            Kind::Buffer => "a buffer",
        }
    }
}

/// A number's or an integer's bits, if `entry` is of `kind`.
fn word_of(entry: &Entry, kind: Kind) -> Option<u64> {
    match (entry, kind) {
        (Entry::Integer(i), Kind::Integer) => Some(*i as u64),
        (Entry::Number(n), Kind::Number) => Some(n.to_bits()),
        _ => None,
    }
}

/// A boxed value: a string, a vector or a buffer.
#[cfg(not(loom))]
struct Boxed(crossbeam_epoch::Atomic<Entry>);

#[cfg(not(loom))]
impl Boxed {
    fn new(entry: Entry) -> Boxed {
        Boxed(crossbeam_epoch::Atomic::new(entry))
    }

    fn load(&self) -> Entry {
        let guard = crossbeam_epoch::pin();
        let current = self.0.load(Ordering::Acquire, &guard);
        // SAFETY: the pointer is never null (set at `new`, only ever swapped for another box),
        // and the box it points to is freed only by `defer_destroy` after every guard pinned
        // before the swap is gone; `guard` is one of them.
        unsafe { current.deref() }.clone()
    }

    fn swap(&self, entry: Entry) {
        let guard = crossbeam_epoch::pin();
        let old = self
            .0
            .swap(crossbeam_epoch::Owned::new(entry), Ordering::AcqRel, &guard);
        // SAFETY: `old` is unlinked from the cell by this swap, so no reader can load it again;
        // readers that loaded it before are pinned, and the epoch waits for them.
        unsafe { guard.defer_destroy(old) };
    }

    fn compare_exchange(&self, expected: &Entry, new: &Entry) -> bool {
        let guard = crossbeam_epoch::pin();
        let current = self.0.load(Ordering::Acquire, &guard);
        // SAFETY: as in `load`.
        if !same(unsafe { current.deref() }, expected) {
            return false;
        }
        let next = crossbeam_epoch::Owned::new(new.clone());
        match self
            .0
            .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire, &guard)
        {
            Ok(old) => {
                // SAFETY: as in `swap`.
                unsafe { guard.defer_destroy(old) };
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(not(loom))]
impl Drop for Boxed {
    fn drop(&mut self) {
        // SAFETY: the cell is being dropped, so its leaf is unreachable from every version a
        // reader could hold (a reader holds the version, which holds the leaf): no one else
        // can load this pointer now.
        unsafe {
            let current = self
                .0
                .load(Ordering::Relaxed, crossbeam_epoch::unprotected());
            drop(current.into_owned());
        }
    }
}

#[cfg(not(loom))]
impl std::fmt::Debug for Boxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Boxed").field(&self.load()).finish()
    }
}

/// Under loom: each value in a box of its own, published through an atomic pointer as the real
/// code publishes crossbeam-epoch's (stored `AcqRel`, loaded `Acquire`), and read through a loom
/// `UnsafeCell`, so a model sees a read that is not ordered after the box was filled. Every box
/// lives until the cell is dropped: the model's stand-in for the epoch, which frees a box only
/// once no reader can hold it.
#[cfg(loom)]
struct Boxed {
    current: loom::sync::atomic::AtomicPtr<loom::cell::UnsafeCell<Entry>>,
    made: crate::sync::Mutex<Vec<*mut loom::cell::UnsafeCell<Entry>>>,
}

// SAFETY: the boxes behind the pointers are only read through `UnsafeCell::with` after an
// `Acquire` load of the pointer that published them, never written after they are made, and
// freed only in `Drop`, when no other reference to the cell exists.
#[cfg(loom)]
unsafe impl Send for Boxed {}
// SAFETY: as for `Send`.
#[cfg(loom)]
unsafe impl Sync for Boxed {}

#[cfg(loom)]
impl std::fmt::Debug for Boxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Boxed")
    }
}

#[cfg(loom)]
impl Boxed {
    fn new(entry: Entry) -> Boxed {
        let first = Box::into_raw(Box::new(loom::cell::UnsafeCell::new(entry)));
        Boxed {
            current: loom::sync::atomic::AtomicPtr::new(first),
            made: crate::sync::Mutex::new(vec![first]),
        }
    }

    fn boxed(&self, entry: Entry) -> *mut loom::cell::UnsafeCell<Entry> {
        let made = Box::into_raw(Box::new(loom::cell::UnsafeCell::new(entry)));
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(made);
        made
    }

    fn read(current: *mut loom::cell::UnsafeCell<Entry>) -> Entry {
        // SAFETY: `current` came from `made`, which frees nothing before `Drop`.
        unsafe { (*current).with(|entry| (*entry).clone()) }
    }

    fn load(&self) -> Entry {
        // The mutant loads the published pointer with `Relaxed` (loom-tests/README.md).
        #[cfg(not(loom_mutant = "cell_load_relaxed"))]
        const LOAD: Ordering = Ordering::Acquire;
        #[cfg(loom_mutant = "cell_load_relaxed")]
        const LOAD: Ordering = Ordering::Relaxed;
        Self::read(self.current.load(LOAD))
    }

    fn swap(&self, entry: Entry) {
        let next = self.boxed(entry);
        self.current.swap(next, Ordering::AcqRel);
    }

    fn compare_exchange(&self, expected: &Entry, new: &Entry) -> bool {
        let current = self.current.load(Ordering::Acquire);
        if !same(&Self::read(current), expected) {
            return false;
        }
        let next = self.boxed(new.clone());
        self.current
            .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(loom)]
impl Drop for Boxed {
    fn drop(&mut self) {
        for made in self
            .made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            // SAFETY: each pointer came from `Box::into_raw` in this cell, is freed once here,
            // and the cell being dropped means no reader holds it.
            drop(unsafe { Box::from_raw(made) });
        }
    }
}

/// Whether two boxed values are equal (bit for bit for vectors).
fn same(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (Entry::String(a), Entry::String(b)) | (Entry::Buffer(a), Entry::Buffer(b)) => a == b,
        (Entry::Vector(a), Entry::Vector(b)) => {
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::table::node::entry_message;
    use crate::value::{Limits, Message};

    fn m(entry: Entry) -> Message {
        entry_message(&entry)
    }

    fn added(cell: &ValueCell, amount: Amount) -> Option<Result<Message, &'static str>> {
        cell.add(amount).map(|r| r.map(m))
    }

    fn string(len: usize) -> Entry {
        Entry::String(bytes::Bytes::from(vec![b'a'; len]))
    }

    #[test]
    fn a_value_of_the_cells_shape_goes_in_place_and_nothing_else_does() {
        let cell = ValueCell::new(Entry::Integer(1));
        assert!(cell.store(&Entry::Integer(2)));
        assert!(!cell.store(&Entry::Number(2.0)), "another kind");
        assert_eq!(
            added(&cell, Amount::Integer(i64::MAX)),
            Some(Ok(Message::Integer(i64::MIN + 1)))
        );
        assert_eq!(
            added(&cell, Amount::Number(0.5)),
            None,
            "an integer plus a number"
        );
        let cell = ValueCell::new(string(3));
        assert!(!cell.store(&string(4)), "another weight");
        assert!(cell.compare_exchange(&string(3), &Entry::String("bcd".into())));
        assert!(
            !cell.compare_exchange(&string(3), &string(3)),
            "the value moved on"
        );
        assert_eq!(m(cell.load()), Message::String("bcd".into()));
        assert_eq!(added(&cell, Amount::Integer(1)), Some(Err("a string")));
    }

    #[test]
    fn boxed_values_up_to_4_kib_go_in_place_and_heavier_ones_do_not() {
        let at = IN_PLACE_MAX_WEIGHT - Limits::NODE_WEIGHT;
        let cell = ValueCell::new(string(at));
        assert!(cell.store(&string(at)), "at the bound");
        let cell = ValueCell::new(string(at + 1));
        assert!(!cell.store(&string(at + 1)), "one past it");
        assert_eq!(m(cell.load()), m(string(at + 1)), "nothing changed");
    }
}
