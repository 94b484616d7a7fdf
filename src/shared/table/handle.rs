//! Handles on shared tables as the host holds them: [`SharedTableRef`] (live) and
//! [`FrozenTable`] (one version, kept).

use std::fmt;

use bytes::Bytes;

use super::error::{amount_not_a_number, SharedTableError, SharedTableErrorKind};
use super::key::{location, Amount, Entry, Key, KeyIn, KeyRef};
use super::node::{entry_message, entry_of, Node};
use super::root::{TablePath, TableRoot};
use crate::shared::{SharedStore, StoreCore};
use crate::sync::Arc;
use crate::value::path;
use crate::value::{MapKey, Message};

impl SharedStore {
    /// The shared table named `name`, made on first use: the same table scripts reach as
    /// `jobs.shared.table(name)`.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let progress = domain.shared().table("progress")?;
    /// progress.set("done", Message::Integer(3))?;
    /// let again = domain.shared().table("progress")?;
    /// assert_eq!(again.get("done")?, Some(Message::Integer(3)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A name of 0 or more than 256 bytes; a 4,097th name in the domain; a store that ended.
    pub fn table(&self, name: impl AsRef<[u8]>) -> Result<SharedTableRef, SharedTableError> {
        let root = self.core.tables.open(&self.core, name.as_ref())?;
        Ok(SharedTableRef {
            store: self.core.clone(),
            root,
            path: std::sync::Arc::new(TablePath::default()),
        })
    }
}

/// A live handle on a shared table, or on a table nested in one. `Send + Sync`, cheap to
/// clone. Every read sees the latest version; every write is atomic on its table.
///
/// A nested handle ([`table_at`](SharedTableRef::table_at)) names the table where it sat: if
/// that table is later replaced or removed, every use of the handle is refused.
///
/// ```
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let players = domain.shared().table("players")?;
/// players.set("alice", Message::map([("hp", 10)]))?;
/// let alice = players.table_at("alice")?;
/// alice.atomic("hp", |hp| hp?.as_i64().map(|n| Message::from(n - 3)))?;
/// assert_eq!(alice.get("hp")?.and_then(|hp| hp.as_i64()), Some(7));
/// assert_eq!(domain.eval("return jobs.shared.table('players').alice.hp + 1")?, Message::from(8));
/// players.set("alice", Message::Nil)?;
/// assert_eq!(alice.get("hp").unwrap_err().to_string(), "shared table 'players'.alice was removed");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct SharedTableRef {
    pub(crate) store: Arc<StoreCore>,
    pub(crate) root: Arc<TableRoot>,
    pub(crate) path: std::sync::Arc<TablePath>,
}

pub(crate) fn bad_key(at: &str, what: &str) -> SharedTableError {
    SharedTableError::new(
        SharedTableErrorKind::BadKey,
        format!("shared table {at}: {what} can't be a key of a shared table"),
    )
}

fn key_of(at: impl FnOnce() -> String, key: MapKey) -> Result<Key, SharedTableError> {
    Key::from_owned_map_key(key).ok_or_else(|| bad_key(&at(), "a NaN"))
}

/// `value` as a stored value, refusing what is not data and naming its path under `at`.
pub(crate) fn value_of(
    at: impl FnOnce() -> String,
    value: &Message,
) -> Result<Option<Entry>, SharedTableError> {
    entry_of(value, 0).map_err(|e| {
        SharedTableError::new(
            SharedTableErrorKind::NotData,
            format!(
                "{}: {} can't be stored in a shared table",
                path::render(&at(), &e.segments),
                e.what
            ),
        )
    })
}

impl SharedTableRef {
    /// Where this table is: `'players'.alice.inventory`.
    pub fn location(&self) -> String {
        self.root.location(&self.path.keys)
    }

    fn key_location(&self, key: &Key) -> String {
        let mut keys = self.path.keys.clone();
        keys.push(key.clone());
        self.root.location(&keys)
    }

    /// Runs `f` on this table in the current version.
    pub(crate) fn with_target<R>(&self, f: impl FnOnce(&Node) -> R) -> Result<R, SharedTableError> {
        self.store.tables.check_ended(|| self.location())?;
        let version = self.root.peek();
        let target = self.root.target(&version, &self.path)?;
        Ok(f(target))
    }

    /// This table as it is now, in cells of its own (see `Node::materialized`), for a loop to
    /// walk: nested tables stay live.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Result<std::sync::Arc<Node>, SharedTableError> {
        Ok(self.current_at(false)?.0)
    }

    /// This table as it is now, in cells of its own (nested tables too when `deep`), and its
    /// revision at that moment.
    pub(crate) fn current_at(
        &self,
        deep: bool,
    ) -> Result<(std::sync::Arc<Node>, u64), SharedTableError> {
        self.store.tables.check_ended(|| self.location())?;
        self.root.read(&self.path, |node| {
            std::sync::Arc::new(node.materialized(deep))
        })
    }

    /// Counts `node`, a picture of this table that a loop or a frozen table keeps, against the
    /// store's byte budget until the last part of it is let go: a picture is a copy, and a
    /// script could otherwise keep any number of them outside every bound. `deep` when nested
    /// tables were copied too; a loop's picture shares them with the table and weighs only its
    /// own entries. Refused, with nothing kept, when the budget is full.
    pub(crate) fn charge(
        &self,
        node: &Node,
        deep: bool,
        what: &str,
    ) -> Result<std::sync::Arc<Charge>, SharedTableError> {
        let bytes = if deep {
            node.bytes
        } else {
            let nested: usize = node
                .map
                .iter()
                .filter_map(|(_, held)| held.as_table())
                .map(|t| t.bytes)
                .sum();
            node.bytes.saturating_sub(nested)
        };
        self.store
            .reserve_bytes_for(bytes, || format!("{what} shared table {}", self.location()))
            .map_err(|m| SharedTableError::new(SharedTableErrorKind::Limit, m))?;
        Ok(std::sync::Arc::new(Charge {
            store: self.store.clone(),
            bytes,
        }))
    }

    /// A handle on the table at `key` of this one, as it is in `node` (this table's version).
    pub(crate) fn child(&self, key: Key, id: u64) -> SharedTableRef {
        SharedTableRef {
            store: self.store.clone(),
            root: self.root.clone(),
            path: std::sync::Arc::new(self.path.child(key, id)),
        }
    }

    pub(crate) fn set_entry(
        &self,
        key: &Key,
        value: Option<&Entry>,
    ) -> Result<(), SharedTableError> {
        self.root
            .set(&self.store, &self.path, &KeyIn::Shared(key), value)
    }

    pub(crate) fn atomic_entry(
        &self,
        key: &KeyIn<'_>,
        f: &mut dyn FnMut(Option<Entry>) -> Result<Option<Entry>, SharedTableError>,
    ) -> Result<Option<Entry>, SharedTableError> {
        self.root.atomic(&self.store, &self.path, key, f)
    }

    /// The value at `key`: `None` when absent; a nested table as a plain deep copy (use
    /// [`table_at`](SharedTableRef::table_at) for a live handle on it).
    ///
    /// # Errors
    /// The table was replaced or removed, or the store ended; a NaN key.
    pub fn get(&self, key: impl Into<MapKey>) -> Result<Option<Message>, SharedTableError> {
        // Looked up by the borrowed key: no key is built, copied or counted.
        let key = key.into();
        let Some(key) = KeyRef::from_map_key(&key) else {
            return Err(bad_key(&self.location(), "a NaN"));
        };
        match self.with_target(|node| node.get_ref(key))? {
            // A nested table is copied at one moment of the table.
            Some(Entry::Table(_)) => Ok(self
                .root
                .read(&self.path, |node| {
                    node.get_ref(key).map(|e| entry_message(&e))
                })?
                .0),
            other => Ok(other.map(|e| entry_message(&e))),
        }
    }

    /// Sets `key` to a copy of `value` (a [`Message`], or anything with a `From` impl into
    /// one: `t.set("hp", 10)`); [`Message::Nil`] removes the key. The write is atomic on this
    /// table, and a refused write changes nothing.
    ///
    /// # Errors
    /// A value that is not data (a [`Message::Resource`]); a bound passed (entries, bytes,
    /// nesting, the domain's bytes); the table was replaced or removed; the store ended.
    pub fn set(
        &self,
        key: impl Into<MapKey>,
        value: impl Into<Message>,
    ) -> Result<(), SharedTableError> {
        let key = key_of(|| self.location(), key.into())?;
        let value = value_of(|| self.key_location(&key), &value.into())?;
        self.set_entry(&key, value.as_ref())
    }

    /// Read-modify-write of one key: `f` gets the current value (a table as a plain copy) and
    /// answers the new one (`None` removes the key). The answer is stored only if nothing `f`
    /// could see changed meanwhile: the key, when `f` reads no shared table (then the commit is
    /// one compare-and-swap on the key's cell), or this table and the tables inside it, when `f`
    /// reads any. Otherwise `f` runs again on the newer value, so `f` may run more than once.
    /// Answers the value now stored.
    ///
    /// A call that lost four times in a row takes its turn at the table: other `atomic` calls
    /// on it wait until it commits.
    ///
    /// # Errors
    /// As [`set`](SharedTableRef::set), and [`SharedTableErrorKind::GaveUp`] after 256 attempts
    /// lost to plain writes.
    pub fn atomic<F>(
        &self,
        key: impl Into<MapKey>,
        mut f: F,
    ) -> Result<Option<Message>, SharedTableError>
    where
        F: FnMut(Option<Message>) -> Option<Message>,
    {
        let key = key_of(|| self.location(), key.into())?;
        let stored = self.atomic_entry(&KeyIn::Shared(&key), &mut |current| {
            let next = f(current.as_ref().map(entry_message)).unwrap_or(Message::Nil);
            value_of(|| self.key_location(&key), &next)
        })?;
        Ok(stored.as_ref().map(entry_message))
    }

    /// Adds `amount` (an integer or a number) to the number under `key` and answers the sum now
    /// stored: the counter of a shared table, with no function to run. A missing key counts as
    /// zero. An integer plus an integer stays an integer (wrapping on overflow); anything plus a
    /// number is a number. Two `add`s on one key never lose either.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// let stats = domain.shared().table("stats")?;
    /// assert_eq!(stats.add("hits", Message::Integer(2))?, Message::Integer(2));
    /// assert_eq!(stats.add("hits", 0.5)?, Message::Number(2.5));
    /// stats.set("name", "arena")?;
    /// assert_eq!(
    ///     stats.add("name", 1).unwrap_err().to_string(),
    ///     "jobs.shared.add: 'stats'.name holds a string, not a number"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`SharedTableErrorKind::NotANumber`] when `amount` is not a number or `key` holds
    /// something else; a bound passed by a new key; as [`set`](SharedTableRef::set).
    pub fn add(
        &self,
        key: impl Into<MapKey>,
        amount: impl Into<Message>,
    ) -> Result<Message, SharedTableError> {
        let key = key_of(|| self.location(), key.into())?;
        let amount = Amount::of(&amount.into())
            .map_err(|what| amount_not_a_number(&self.key_location(&key), what))?;
        Ok(entry_message(
            &self.add_entry(&KeyIn::Shared(&key), amount)?,
        ))
    }

    pub(crate) fn add_entry(
        &self,
        key: &KeyIn<'_>,
        amount: Amount,
    ) -> Result<Entry, SharedTableError> {
        self.root.add(&self.store, &self.path, key, amount)
    }

    /// A plain deep copy of this table, read at one moment of it (no write lands halfway).
    pub fn snapshot(&self) -> Result<Message, SharedTableError> {
        self.store.tables.check_ended(|| self.location())?;
        Ok(self.root.read(&self.path, Node::to_message)?.0)
    }

    /// A number that every write to this table, or to a table inside it, advances. One read.
    pub fn revision(&self) -> Result<u64, SharedTableError> {
        self.with_target(|node| self.root.revision(node, &self.path))
    }

    /// `#t`: the length of the list part (`1..n` all present).
    pub fn len(&self) -> Result<usize, SharedTableError> {
        self.with_target(|node| node.border)
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> Result<bool, SharedTableError> {
        self.with_target(|node| node.map.is_empty())
    }

    /// A live handle on the table at `key`.
    ///
    /// # Errors
    /// [`SharedTableErrorKind::NotATable`] when `key` holds no table; as [`get`](Self::get).
    pub fn table_at(&self, key: impl Into<MapKey>) -> Result<SharedTableRef, SharedTableError> {
        let key = key_of(|| self.location(), key.into())?;
        let id = self.with_target(|node| node.table(&key).map(|t| t.id))?;
        match id {
            Some(id) => Ok(self.child(key, id)),
            None => Err(SharedTableError::new(
                SharedTableErrorKind::NotATable,
                format!("shared table {}: no table there", self.key_location(&key)),
            )),
        }
    }

    /// An immutable snapshot of this table that reads with no synchronisation at all.
    ///
    /// The copy is made now, of every value in the table and in the tables inside it: it costs
    /// what [`snapshot`](SharedTableRef::snapshot) costs.
    ///
    /// While the frozen table (or a table taken from it with [`FrozenTable::table_at`]) is
    /// kept, its copy counts against the domain's 256 MiB of shared tables.
    pub fn freeze(&self) -> Result<FrozenTable, SharedTableError> {
        let (node, rev) = self.current_at(true)?;
        let charge = self.charge(&node, true, "a frozen copy of")?;
        Ok(FrozenTable {
            location: self.location().into(),
            node,
            rev,
            charge,
        })
    }

    /// Whether two handles are on the same table at the same place.
    pub fn same_table(&self, other: &SharedTableRef) -> bool {
        Arc::ptr_eq(&self.root, &other.root) && self.path.ids == other.path.ids
    }
}

impl fmt::Debug for SharedTableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SharedTableRef")
            .field(&self.location())
            .finish()
    }
}

/// One version of a shared table, kept: reads need no synchronisation, and every write is
/// refused naming it frozen. `Send + Sync`, cheap to clone.
///
/// ```
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let config = domain.shared().table("config")?;
/// config.set("speed", Message::Number(1.5))?;
/// let frozen = config.freeze()?;
/// config.set("speed", Message::Number(3.0))?;
/// assert_eq!(frozen.get("speed"), Some(Message::Number(1.5)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct FrozenTable {
    pub(crate) location: std::sync::Arc<str>,
    /// Cells of its own, which nothing writes (`Node::materialized`).
    pub(crate) node: std::sync::Arc<Node>,
    pub(crate) rev: u64,
    /// The copy's weight against its store's budget, shared by every table taken from it.
    pub(crate) charge: std::sync::Arc<Charge>,
}

/// A kept picture's weight against its store's byte budget, given back when dropped.
pub(crate) struct Charge {
    store: Arc<StoreCore>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.store.release_bytes(self.bytes);
    }
}

impl FrozenTable {
    /// Where the table was when it was frozen.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The value at `key`, a nested table as a plain copy. A NaN key finds nothing.
    pub fn get(&self, key: impl Into<MapKey>) -> Option<Message> {
        let key = key.into();
        self.node
            .get_ref(KeyRef::from_map_key(&key)?)
            .map(|e| entry_message(&e))
    }

    /// A plain deep copy.
    pub fn snapshot(&self) -> Message {
        self.node.to_message()
    }

    /// The revision the table had when it was frozen.
    pub fn revision(&self) -> u64 {
        self.rev
    }

    /// `#t`.
    pub fn len(&self) -> usize {
        self.node.border
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.node.map.is_empty()
    }

    /// The frozen table at `key`, if `key` holds a table.
    pub fn table_at(&self, key: impl Into<MapKey>) -> Option<FrozenTable> {
        let key = Key::from_owned_map_key(key.into())?;
        let node = self.node.table(&key)?.clone();
        let mut at = String::from(&*self.location);
        at.push_str(&location("", std::slice::from_ref(&key))[2..]);
        Some(FrozenTable {
            location: at.into(),
            rev: node.revision(),
            node,
            charge: self.charge.clone(),
        })
    }

    /// The refusal every write to a frozen table gets.
    pub(crate) fn refuse_write(&self) -> SharedTableError {
        SharedTableError::new(
            SharedTableErrorKind::Frozen,
            format!(
                "shared table {} is frozen: it can't be written",
                self.location
            ),
        )
    }
}

impl fmt::Debug for FrozenTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FrozenTable").field(&self.location).finish()
    }
}

impl From<&str> for MapKey {
    fn from(s: &str) -> MapKey {
        MapKey::String(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for MapKey {
    fn from(s: String) -> MapKey {
        MapKey::String(Bytes::from(s))
    }
}

/// A number key: `t[1]` in ordinary Luau code is the *number* 1, so list positions are these.
impl From<f64> for MapKey {
    fn from(n: f64) -> MapKey {
        MapKey::Number(n)
    }
}
