//! A named table: its root cell, and the commit and `atomic` protocols that publish versions.
//!
//! # Protocol
//! A write loads the current version, finds its table by the handle's path (checking the id of
//! every table on the way, so a write can't land in a table that was replaced or removed),
//! builds the new version by path copying, and publishes it with one compare-and-swap on the
//! root cell. A lost race redoes the work on the newer version. The new root's `rev` is the old
//! one plus one, and every table on the copied path takes that `rev`: so a table's `rev` moves
//! whenever it, or a table inside it, is written, and never moves back.
//!
//! `atomic` reads the key and its table's `rev`, runs the caller's function with nothing held,
//! and commits only while that table's `rev` is unchanged (a race lost to a write elsewhere in
//! the named table is retried without running the function again). After `TURN_AFTER` losses in
//! a row the call takes the table's *turn*: other `atomic` calls on the table wait before each
//! attempt until it commits, so only plain writes can still beat it. After `GIVE_UP` losses it
//! raises.
//!
//! # Memory ordering
//! Publication is the cell's compare-and-swap (arc-swap's, or a loom mutex in the models): a
//! reader that loads a version sees every node of it fully built, because nodes are built
//! before the swap and never changed after. The turn's flag is a hint read with `Acquire`; the
//! waiting itself is on a mutex.

use std::sync::Arc;

use super::cell::{Loaded, VersionCell};
use super::error::{holds_no_number, SharedTableError, SharedTableErrorKind};
use super::gate::{Closed, Gate};
use super::key::{location, Amount, Entry, Key, KeyIn, KeyRef};
use super::node::Node;
use super::value_cell::{Held, ValueCell};
use crate::shared::StoreCore;
use crate::sync::{thread, thread_local, AtomicBool, Mutex, MutexGuard, Ordering};

/// Losses in a row after which an `atomic` call takes the table's turn.
pub(crate) const TURN_AFTER: u32 = 4;
/// Losses after which an `atomic` call gives up.
pub(crate) const GIVE_UP: u32 = 256;

/// The bounds of one named table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableLimits {
    /// Entries the named table holds, counting every table inside it.
    pub(crate) entries: usize,
    /// Bytes the named table weighs, counting every table inside it.
    pub(crate) bytes: usize,
    /// Tables nested in one another, the named table included.
    pub(crate) depth: usize,
}

impl TableLimits {
    pub(crate) const DEFAULT: TableLimits = TableLimits {
        entries: 1 << 20,
        bytes: 64 << 20,
        depth: 64,
    };
}

/// Where a handle's table sits: the keys from the named table down, and the id each table on
/// the way had when the handle was made.
#[derive(Clone, Debug, Default)]
pub(crate) struct TablePath {
    pub(crate) keys: Vec<Key>,
    pub(crate) ids: Vec<u64>,
}

impl TablePath {
    pub(crate) fn child(&self, key: Key, id: u64) -> TablePath {
        let mut path = self.clone();
        path.keys.push(key);
        path.ids.push(id);
        path
    }

    /// Tables from the named table down to this one, both included.
    pub(crate) fn depth(&self) -> usize {
        self.keys.len() + 1
    }
}

/// What a commit stamps on the nodes it builds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    /// The revision the write makes (the count before it, plus one).
    pub(crate) rev: u64,
    /// The named table's count before this write (its revision).
    pub(crate) count: u64,
    /// Depth of the table being edited (the named table is 1).
    pub(crate) depth: usize,
}

/// What an edit decided: a new version of the table with an answer, or only an answer (the
/// table stays as it is and nothing is published).
pub(crate) enum Edit<R> {
    Write(Node, R),
    Keep(R),
}

/// A key's cell as a read found it, with the version it was found in, which keeps the cell
/// alive: a version's trie never changes after it is published (only its cells do), so while
/// the table's current version is that same one, the cell is the key's.
pub(crate) struct Found {
    version: Loaded,
    cell: *const ValueCell,
}

impl Found {
    /// The cell, if `version` is the one it was found in.
    fn in_version(&self, version: &Loaded) -> Option<&ValueCell> {
        let (seen, now): (&Node, &Node) = (&self.version, version);
        // The mutant takes the cell whatever the version (loom-tests/README.md).
        #[cfg(loom_mutant = "table_found_any_version")]
        let now = seen;
        // SAFETY: `self.version` holds the version the cell is in, and a published version's
        // trie never changes, so the pointer stays valid while `self` lives.
        std::ptr::eq(seen, now).then(|| unsafe { &*self.cell })
    }
}

pub(crate) struct TableRoot {
    pub(crate) name: Arc<str>,
    pub(crate) limits: TableLimits,
    cell: VersionCell,
    gate: Gate,
    turn: Turn,
}

impl TableRoot {
    pub(crate) fn new(name: Arc<str>, limits: TableLimits) -> TableRoot {
        TableRoot {
            name,
            limits,
            cell: VersionCell::new(Arc::new(Node::empty(0))),
            gate: Gate::new(),
            turn: Turn::new(),
        }
    }

    /// The current version of the whole named table. Never blocks.
    pub(crate) fn load(&self) -> Arc<Node> {
        note_shared_read();
        #[cfg(not(loom))]
        return arc_swap::Guard::into_inner(self.cell.load());
        #[cfg(loom)]
        return self.cell.load();
    }

    /// The current version for one short read: no reference count is taken in normal builds.
    pub(crate) fn peek(&self) -> super::cell::Loaded {
        note_shared_read();
        self.cell.load()
    }

    /// Drops the table's contents (the store ended): handles refuse before they look.
    pub(crate) fn forget(&self) {
        self.cell.store(Arc::new(Node::empty(0)));
    }

    pub(crate) fn location(&self, keys: &[Key]) -> String {
        location(&self.name, keys)
    }

    /// The handle's table in `version`, or why it is gone.
    pub(crate) fn target<'a>(
        &self,
        version: &'a Node,
        path: &TablePath,
    ) -> Result<&'a Node, SharedTableError> {
        let mut node = version;
        for (i, (key, id)) in path.keys.iter().zip(&path.ids).enumerate() {
            node = match node.held(key) {
                Some(Held::Table(child)) if child.id == *id => child,
                found => return Err(self.detached(path, i, found.is_some())),
            };
        }
        Ok(node)
    }

    /// The tables above the handle's in `version` (the named one first; none for the named
    /// table itself, which costs no allocation) and the handle's table.
    fn chain<'a>(
        &self,
        version: &'a Node,
        path: &TablePath,
    ) -> Result<(Vec<&'a Node>, &'a Node), SharedTableError> {
        if path.keys.is_empty() {
            return Ok((Vec::new(), version));
        }
        let mut above = Vec::with_capacity(path.keys.len());
        let mut node = version;
        for (i, (key, id)) in path.keys.iter().zip(&path.ids).enumerate() {
            above.push(node);
            node = match node.held(key) {
                Some(Held::Table(child)) if child.id == *id => child,
                found => return Err(self.detached(path, i, found.is_some())),
            };
        }
        Ok((above, node))
    }

    #[cold]
    fn detached(&self, path: &TablePath, at: usize, replaced: bool) -> SharedTableError {
        let what = if replaced { "replaced" } else { "removed" };
        let whole = self.location(&path.keys);
        let message = if at + 1 == path.keys.len() {
            format!("shared table {whole} was {what}")
        } else {
            let gone = self.location(&path.keys[..=at]);
            format!("shared table {whole} is detached: {gone} was {what}")
        };
        SharedTableError::new(SharedTableErrorKind::Detached, message)
    }

    /// Builds the new version of the named table around `leaf`, the new handle's table.
    fn rebuild(chain: &[&Node], keys: &[Key], leaf: Node, rev: u64) -> Node {
        let mut node = leaf;
        for (parent, key) in chain.iter().zip(keys).rev() {
            node = parent.with_ref(key, Some(Entry::Table(Arc::new(node))), rev);
        }
        node
    }

    fn check_bounds(&self, next: &Node, path: &TablePath) -> Result<(), SharedTableError> {
        let limits = self.limits;
        let refuse = |count: usize, unit: &str, max: usize| {
            SharedTableError::new(
                SharedTableErrorKind::Limit,
                format!(
                    "shared table {}: the write would make '{}' hold {count} {unit}, past the bound of {max}",
                    self.location(&path.keys),
                    self.name
                ),
            )
        };
        if next.entries > limits.entries {
            return Err(refuse(next.entries, "entries", limits.entries));
        }
        if next.bytes > limits.bytes {
            return Err(refuse(next.bytes, "bytes", limits.bytes));
        }
        Ok(())
    }

    /// Publishes `next` over `seen`, taking or giving back the store's bytes by the difference.
    /// A write that leaves the weight as it was touches the store's budget not at all.
    fn publish(
        &self,
        store: &StoreCore,
        seen: &Arc<Node>,
        next: Node,
        path: &TablePath,
    ) -> Result<bool, SharedTableError> {
        let grow = next.bytes.saturating_sub(seen.bytes);
        let shrink = seen.bytes.saturating_sub(next.bytes);
        if grow > 0 {
            store
                .reserve_bytes_for(grow, || {
                    format!("shared table {}", self.location(&path.keys))
                })
                .map_err(|m| SharedTableError::new(SharedTableErrorKind::Limit, m))?;
        }
        let published = self.cell.publish(seen, Arc::new(next));
        let give_back = if published { shrink } else { grow };
        if give_back > 0 {
            store.release_bytes(give_back);
        }
        Ok(published)
    }

    /// Runs `edit` on the handle's table in the current version and publishes the result, with
    /// the gate closed (so no write in place races it). `edit` may run more than once; what it
    /// returns from the run that was published is the answer.
    pub(crate) fn commit<R>(
        &self,
        store: &StoreCore,
        path: &TablePath,
        edit: impl FnMut(&Node, Stamp) -> Result<Edit<R>, SharedTableError>,
    ) -> Result<R, SharedTableError> {
        store.tables.check_ended(|| self.location(&path.keys))?;
        let closed = self.gate.close();
        self.commit_closed(closed, store, path, edit)
    }

    /// [`commit`](TableRoot::commit) with the gate already closed by the caller.
    fn commit_closed<R>(
        &self,
        mut closed: Closed<'_>,
        store: &StoreCore,
        path: &TablePath,
        mut edit: impl FnMut(&Node, Stamp) -> Result<Edit<R>, SharedTableError>,
    ) -> Result<R, SharedTableError> {
        loop {
            store.tables.check_ended(|| self.location(&path.keys))?;
            // A guard, not a counted reference: no shared count is touched to look.
            let seen = self.peek();
            let seen = loaded_arc(&seen);
            let (above, target) = self.chain(seen, path)?;
            let stamp = Stamp {
                rev: closed.count() + 1,
                count: closed.count(),
                depth: path.depth(),
            };
            let (leaf, out) = match edit(target, stamp)? {
                Edit::Write(leaf, out) => (leaf, out),
                Edit::Keep(out) => return Ok(out),
            };
            let next = Self::rebuild(&above, &path.keys, leaf, stamp.rev);
            self.check_bounds(&next, path)?;
            // Closers are one at a time, so this only loses to the store ending (`forget`).
            if self.publish(store, seen, next, path)? {
                closed.wrote();
                return Ok(out);
            }
        }
    }

    /// Runs `op` on the cell under `key` in the handle's table, as a write in place (see
    /// `gate.rs`); answers `None`, having done nothing, when the key holds no cell (it is
    /// absent, or holds a table). `op` answers its result and whether it changed the cell.
    /// With `found`, the cell a read just found: taken as it is when the version is still the
    /// one it was found in, with no second walk.
    fn in_place<R>(
        &self,
        store: &StoreCore,
        path: &TablePath,
        key: KeyRef<'_>,
        found: Option<&Found>,
        op: impl FnOnce(&ValueCell) -> (R, bool),
    ) -> Result<Option<R>, SharedTableError> {
        store.tables.check_ended(|| self.location(&path.keys))?;
        self.gate.write(|| {
            let version = self.peek();
            let cell = match found.and_then(|f| f.in_version(&version)) {
                Some(cell) => cell,
                None => {
                    let target = match self.target(&version, path) {
                        Ok(target) => target,
                        Err(e) => return (Err(e), false),
                    };
                    let Some(Held::Value(cell)) = target.held_ref(key) else {
                        return (Ok(None), false);
                    };
                    cell
                }
            };
            let (out, changed) = op(cell);
            if changed && !path.keys.is_empty() {
                // The count this write makes, or a later one: raised on every nested table
                // down to the cell, so their revisions move (the named table's is the count).
                self.raise_revisions(&version, path, self.gate.count() + 1);
            }
            (Ok(Some(out)), changed)
        })
    }

    /// Moves the revision of every nested table on `path` in `version` on: to `rev`, or one
    /// past where it was if that is further. So each write moves it (an `atomic` on a nested
    /// table checks it), and it keeps step with the named table's count.
    fn raise_revisions(&self, version: &Node, path: &TablePath, rev: u64) {
        let mut node = version;
        for key in &path.keys {
            let Some(child) = node.table(key) else {
                return;
            };
            let mut was = child.rev.load(Ordering::Acquire);
            while let Err(now) = child.rev.compare_exchange_weak(
                was,
                rev.max(was + 1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                was = now;
            }
            node = child;
        }
    }

    /// `target` with `key` set to `value` (removed when `None`), refusing to nest too deep.
    pub(crate) fn set_in(
        &self,
        target: &Node,
        key: &KeyIn<'_>,
        value: Option<&Entry>,
        stamp: Stamp,
        path: &TablePath,
    ) -> Result<Node, SharedTableError> {
        let value = match value {
            Some(Entry::Table(child)) => {
                let deepest = stamp.depth + child.height;
                if deepest > self.limits.depth {
                    let mut keys = path.keys.clone();
                    keys.push(key.as_ref().to_key());
                    return Err(SharedTableError::new(
                        SharedTableErrorKind::Limit,
                        format!(
                            "shared table {}: tables would nest {deepest} deep, past the bound of {}",
                            self.location(&keys),
                            self.limits.depth
                        ),
                    ));
                }
                // Written in here, the table is a table of its own: a new identity, this
                // version's rev.
                Some(Entry::Table(Arc::new(child.copied(stamp.rev))))
            }
            other => other.cloned(),
        };
        Ok(target.with_key(key.clone(), value, stamp.rev))
    }

    /// Sets one key: the plain write. A value of the shape the key's cell holds is written in
    /// place; anything else makes a new version.
    pub(crate) fn set(
        &self,
        store: &StoreCore,
        path: &TablePath,
        key: &KeyIn<'_>,
        value: Option<&Entry>,
    ) -> Result<(), SharedTableError> {
        if let Some(entry) = value.filter(|e| !matches!(e, Entry::Table(_))) {
            let stored = self.in_place(store, path, key.as_ref(), None, |cell| {
                let stored = cell.store(entry);
                (stored, stored)
            })?;
            if stored == Some(true) {
                return Ok(());
            }
        }
        self.commit(store, path, |target, stamp| {
            Ok(Edit::Write(
                self.set_in(target, key, value, stamp, path)?,
                (),
            ))
        })
    }

    /// Adds `amount` to the number under `key` (a missing key counts as zero); answers the sum
    /// now stored. In place when the key's cell holds a number, or an integer and the amount is
    /// one: one atomic add (an integer) or compare-and-swap loop (a number).
    pub(crate) fn add(
        &self,
        store: &StoreCore,
        path: &TablePath,
        key: &KeyIn<'_>,
        amount: Amount,
    ) -> Result<Entry, SharedTableError> {
        let refuse = |what: &str| {
            let mut keys = path.keys.clone();
            keys.push(key.as_ref().to_key());
            holds_no_number(&self.location(&keys), what)
        };
        let done = self.in_place(store, path, key.as_ref(), None, |cell| {
            match cell.add(amount) {
                Some(Ok(sum)) => (Some(Ok(sum)), true),
                Some(Err(what)) => (Some(Err(what)), false),
                None => (None, false),
            }
        })?;
        match done {
            Some(Some(Ok(sum))) => return Ok(sum),
            Some(Some(Err(what))) => return Err(refuse(what)),
            _ => {}
        }
        self.commit(store, path, |target, stamp| {
            let sum = amount
                .added_to(target.get_ref(key.as_ref()).as_ref())
                .map_err(refuse)?;
            let leaf = self.set_in(target, key, Some(&sum), stamp, path)?;
            Ok(Edit::Write(leaf, sum))
        })
    }

    /// What `key` holds in the handle's table, read at one moment, and the table's revision
    /// then: a cell's value (`true`), or a nested table as a picture of its own (`false`), or
    /// nothing.
    fn read_key(
        &self,
        path: &TablePath,
        key: KeyRef<'_>,
    ) -> Result<(Option<Entry>, bool, u64), SharedTableError> {
        let ((current, in_cell), rev) = self.read(path, |target| match target.held_ref(key) {
            None => (None, false),
            Some(Held::Value(cell)) => (Some(cell.load()), true),
            Some(Held::Table(node)) => {
                (Some(Entry::Table(Arc::new(node.materialized(true)))), false)
            }
        })?;
        Ok((current, in_cell, rev))
    }

    /// The value of the cell under `key`, with no revision: one load, for an `atomic` whose
    /// commit will be the cell's own compare-and-swap, and the cell as found. `None` when the
    /// key holds no cell.
    fn peek_cell(
        &self,
        path: &TablePath,
        key: KeyRef<'_>,
    ) -> Result<Option<(Entry, Found)>, SharedTableError> {
        let version = self.peek();
        let target = self.target(&version, path)?;
        let Some(Held::Value(cell)) = target.held_ref(key) else {
            return Ok(None);
        };
        let value = cell.load();
        let cell: *const ValueCell = cell;
        Ok(Some((value, Found { version, cell })))
    }

    /// Read-modify-write of one key; see the module docs. `f` gets the current value and
    /// answers the new one. Answers the value now stored. A borrowed key is copied only if the
    /// commit adds it to the table.
    pub(crate) fn atomic(
        &self,
        store: &StoreCore,
        path: &TablePath,
        key: &KeyIn<'_>,
        f: &mut dyn FnMut(Option<Entry>) -> Result<Option<Entry>, SharedTableError>,
    ) -> Result<Option<Entry>, SharedTableError> {
        let mut losses = 0u32;
        let mut turn: Option<TurnGuard<'_>> = None;
        // Whether the next attempt needs the table's revision: the checked commit does. The
        // first attempt on a cell reads only the cell and hopes for the compare-and-swap.
        let mut checked = false;
        loop {
            if turn.is_none() {
                self.turn.wait_unless_mine();
            }
            store.tables.check_ended(|| self.location(&path.keys))?;
            let peeked = if checked {
                None
            } else {
                self.peek_cell(path, key.as_ref())?
            };
            let (current, in_cell, rev, found) = match peeked {
                Some((value, found)) => (Some(value), true, None, Some(found)),
                None => {
                    let (current, in_cell, rev) = self.read_key(path, key.as_ref())?;
                    (current, in_cell, Some(rev), None)
                }
            };
            let reads = shared_reads();
            let value = f(current.clone())?;
            // `f` read nothing but its argument: the key's own compare-and-swap is the whole
            // check (`ValueCell::compare_exchange`).
            let only_its_key = shared_reads() == reads;
            let fast = match (&current, &value) {
                (Some(was), Some(now)) if in_cell && only_its_key => Some((was, now)),
                _ => None,
            };
            if let Some((was, now)) = fast {
                let swapped = self.in_place(store, path, key.as_ref(), found.as_ref(), |cell| {
                    if !cell.fits(now) {
                        return (None, false);
                    }
                    let swapped = cell.compare_exchange(was, now);
                    (Some(swapped), swapped)
                })?;
                match (swapped.flatten(), rev) {
                    (Some(true), _) => return Ok(value),
                    (Some(false), _) => {}
                    // Another shape, or the key's leaf replaced: a checked commit.
                    (None, Some(rev)) => {
                        if let Some(stored) = self.commit_checked(store, path, key, &value, rev)? {
                            return Ok(stored);
                        }
                    }
                    // ... which needs the revision the value was read at: read again. The
                    // answer was not stored, so this counts as a loss, as any rerun does.
                    (None, None) => checked = true,
                }
            } else if let Some(rev) = rev {
                if let Some(stored) = self.commit_checked(store, path, key, &value, rev)? {
                    return Ok(stored);
                }
            } else {
                // `f` read (or wrote) more than its argument, or answered nil or a table: from
                // now on each attempt reads the revision too, for a checked commit. This one
                // stored nothing: a loss, as any rerun is.
                checked = true;
            }
            losses += 1;
            if losses >= GIVE_UP {
                let mut keys = path.keys.clone();
                keys.push(key.clone().into_owned());
                return Err(SharedTableError::new(
                    SharedTableErrorKind::GaveUp,
                    format!(
                        "jobs.shared.atomic: gave up on {} after {GIVE_UP} attempts: plain writes kept changing the table",
                        self.location(&keys)
                    ),
                ));
            }
            if losses >= TURN_AFTER && turn.is_none() && !holds_a_turn() {
                turn = Some(self.turn.take());
            }
        }
    }

    /// Commits `value` under `key` with the gate closed, if the handle's table is still at
    /// revision `rev` (nothing was written in it, or in a table inside it, since `f` read it);
    /// answers the value stored, or `None` (nothing written) when the table moved on.
    fn commit_checked(
        &self,
        store: &StoreCore,
        path: &TablePath,
        key: &KeyIn<'_>,
        value: &Option<Entry>,
        rev: u64,
    ) -> Result<Option<Option<Entry>>, SharedTableError> {
        let mut closed = self.gate.close();
        let version = self.peek();
        let target = self.target(&version, path)?;
        let now = if path.keys.is_empty() {
            closed.count()
        } else {
            target.revision()
        };
        // The mutant commits without this re-check (loom-tests/README.md).
        #[cfg(not(loom_mutant = "table_atomic_no_recheck"))]
        if now != rev {
            return Ok(None);
        }
        let _ = (now, rev);
        // A value of the cell's shape goes in place, as a plain write would.
        if let Some(new) = value.as_ref().filter(|e| !matches!(e, Entry::Table(_))) {
            if let Some(Held::Value(cell)) = target.held_ref(key.as_ref()).filter(|h| fits(h, new))
            {
                // Counted before the store: a read of a nested table that loads this cell's
                // old value and then the revision raised below must see `started` move, or it
                // would keep that pair and a later checked `atomic` would commit over this write.
                closed.wrote();
                let stored = cell.store(new);
                debug_assert!(stored, "the value fits the cell");
                self.raise_revisions(&version, path, closed.count() + 1);
                return Ok(Some(value.clone()));
            }
        }
        drop(version);
        let stored = self.commit_closed(closed, store, path, |target, stamp| {
            let leaf = self.set_in(target, key, value.as_ref(), stamp, path)?;
            // What is stored, as stored: a table written in has its new identity.
            let stored = match value {
                Some(Entry::Table(_)) => leaf.get_ref(key.as_ref()),
                other => other.clone(),
            };
            Ok(Edit::Write(leaf, stored))
        })?;
        Ok(Some(stored))
    }

    /// This table's revision: the gate's count for the named table, the node's own for a
    /// nested one.
    pub(crate) fn revision(&self, target: &Node, path: &TablePath) -> u64 {
        if path.keys.is_empty() {
            self.gate.count()
        } else {
            target.revision()
        }
    }

    /// Runs `read` on the handle's table so that it sees one moment of the whole table;
    /// answers what it answered and the revision at that moment (the named table's count, or
    /// the nested table's own).
    pub(crate) fn read<R>(
        &self,
        path: &TablePath,
        mut read: impl FnMut(&Node) -> R,
    ) -> Result<(R, u64), SharedTableError> {
        let (out, count) = self.gate.read(|| {
            let version = self.peek();
            let target = self.target(&version, path)?;
            Ok((read(target), target.revision()))
        });
        let (out, nested) = out?;
        Ok((out, if path.keys.is_empty() { count } else { nested }))
    }

    /// Whether an `atomic` call holds the table's turn now (for tests and models).
    #[cfg(any(test, loom))]
    pub(crate) fn turn_taken(&self) -> bool {
        self.turn.taken.load(Ordering::Acquire)
    }
}

/// Whether `held` is a cell that `entry` can replace in place.
fn fits(held: &Held, entry: &Entry) -> bool {
    matches!(held, Held::Value(cell) if cell.fits(entry))
}

/// The loaded version as the counted reference the cell compares against (a guard derefs to
/// it; under loom the loaded version is one).
fn loaded_arc(loaded: &super::cell::Loaded) -> &Arc<Node> {
    loaded
}

thread_local! {
    /// How many tables' turns this thread holds. A thread that holds one never waits for
    /// another's nor takes a second: waiting is then only ever done by threads that hold
    /// nothing, so two `atomic` calls nested across two tables in opposite orders can't wait
    /// on each other forever. Such a nested call goes on optimistically (and may give up).
    #[allow(clippy::missing_const_for_thread_local)] // loom's thread_local! takes no const block
    static TURNS_HELD: std::cell::Cell<u32> = std::cell::Cell::new(0);
}

thread_local! {
    /// Reads of any shared table this thread made: `atomic` compares it around its function,
    /// to know whether the function read more than its argument.
    #[allow(clippy::missing_const_for_thread_local)] // loom's thread_local! takes no const block
    static SHARED_READS: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

#[inline]
fn note_shared_read() {
    SHARED_READS.with(|n| n.set(n.get().wrapping_add(1)));
}

fn shared_reads() -> u64 {
    SHARED_READS.with(|n| n.get())
}

fn holds_a_turn() -> bool {
    TURNS_HELD.with(|n| n.get() > 0)
}

/// The table's turn: held by an `atomic` call that lost `TURN_AFTER` times in a row.
struct Turn {
    /// Set while a call holds the turn: a hint that lets calls skip the mutexes when free.
    taken: AtomicBool,
    /// The thread holding the turn, so an `atomic` inside the holder's function goes ahead
    /// instead of waiting on itself.
    holder: Mutex<Option<thread::ThreadId>>,
    /// Held by the holder for its whole turn; a waiting call locks it and lets it go.
    gate: Mutex<()>,
}

struct TurnGuard<'a> {
    turn: &'a Turn,
    _gate: MutexGuard<'a, ()>,
}

impl Turn {
    fn new() -> Turn {
        Turn {
            taken: AtomicBool::new(false),
            holder: Mutex::new(None),
            gate: Mutex::new(()),
        }
    }

    fn is_mine(&self, me: thread::ThreadId) -> bool {
        *self.holder.lock().unwrap_or_else(|e| e.into_inner()) == Some(me)
    }

    /// Waits while another thread holds the turn, unless this thread holds a turn itself.
    /// While the turn is free this is one load: no mutex, no thread id.
    fn wait_unless_mine(&self) {
        if !self.taken.load(Ordering::Acquire)
            || holds_a_turn()
            || self.is_mine(thread::current().id())
        {
            return;
        }
        drop(self.gate.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn take(&self) -> TurnGuard<'_> {
        let gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        *self.holder.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current().id());
        self.taken.store(true, Ordering::Release);
        TURNS_HELD.with(|n| n.set(n.get() + 1));
        TurnGuard {
            turn: self,
            _gate: gate,
        }
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        // Cleared before the gate opens (the gate field drops after this body).
        self.turn.taken.store(false, Ordering::Release);
        *self.turn.holder.lock().unwrap_or_else(|e| e.into_inner()) = None;
        TURNS_HELD.with(|n| n.set(n.get() - 1));
    }
}
