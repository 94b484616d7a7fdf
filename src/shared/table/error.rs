//! Why a shared-table operation was refused. Every refusal changes nothing.

use std::fmt;

/// A shared-table operation that was refused, with the text a user greps for.
///
/// The text names the table (`'players'.alice.inventory`) and the reason; [`kind`] tells the
/// reasons apart in code. A refused write changed nothing.
///
/// ```
/// use skein::shared::SharedTableErrorKind;
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// let err = domain.shared().table("").unwrap_err();
/// assert_eq!(err.kind(), SharedTableErrorKind::BadName);
/// assert_eq!(err.to_string(), "jobs.shared.table: a name must be 1 to 256 bytes, got 0 bytes");
/// # Ok::<(), skein::Error>(())
/// ```
///
/// [`kind`]: SharedTableError::kind
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedTableError {
    kind: SharedTableErrorKind,
    message: String,
}

/// What kind of refusal a [`SharedTableError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedTableErrorKind {
    /// The domain generation that owned the store ended.
    Ended,
    /// The handle's table was replaced or removed from the table it sat in.
    Detached,
    /// A bound (entries, bytes, nesting, names, the store's bytes) would be passed.
    Limit,
    /// A value that is not data (a function, a coroutine, a userdata, a table with a metatable,
    /// a table inside itself).
    NotData,
    /// A key that can't be a key (nil, NaN, a boolean, a table…).
    BadKey,
    /// A table name that is not 1 to 256 bytes.
    BadName,
    /// An `atomic` call lost 256 attempts in a row to plain writes.
    GaveUp,
    /// A write to a frozen table.
    Frozen,
    /// `table_at` of a key that holds no table.
    NotATable,
    /// An `atomic` function yielded or raised.
    Function,
    /// `add` on a key that holds something other than a number, or an amount that is not one.
    NotANumber,
}

impl SharedTableError {
    pub(crate) fn new(kind: SharedTableErrorKind, message: impl Into<String>) -> Self {
        SharedTableError {
            kind,
            message: message.into(),
        }
    }

    /// What kind of refusal this is.
    pub fn kind(&self) -> SharedTableErrorKind {
        self.kind
    }
}

/// `add` found `what` (`a string`, `a table`…) under the key at `at`.
pub(crate) fn holds_no_number(at: &str, what: &str) -> SharedTableError {
    SharedTableError::new(
        SharedTableErrorKind::NotANumber,
        format!("jobs.shared.add: {at} holds {what}, not a number"),
    )
}

/// `add` was given `what` as the amount to add to the key at `at`.
pub(crate) fn amount_not_a_number(at: &str, what: &str) -> SharedTableError {
    SharedTableError::new(
        SharedTableErrorKind::NotANumber,
        format!("jobs.shared.add: the amount to add to {at} is {what}, not a number"),
    )
}

impl fmt::Display for SharedTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SharedTableError {}

impl From<SharedTableError> for mlua::Error {
    fn from(e: SharedTableError) -> Self {
        mlua::Error::runtime(e.message)
    }
}
