//! Reading a [`Message`] without matching it by hand: accessors that answer `Some` when the
//! value holds what is asked for, accepting both number forms where the answer is exact, and
//! the two constructors that build a list or a map from an iterator.
//!
//! Nothing here copies: accessors borrow, and the constructors move what they are given.

use super::{MapKey, Message, MAX_EXACT_INTEGER};

/// `2^63` as an f64: the first whole number past `i64::MAX`.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

impl Message {
    /// The whole number this value holds, from either form: a [`Message::Integer`], or a
    /// [`Message::Number`] with no fraction inside the range of `i64`. `None` for anything
    /// else, `2.5` and `2^63` included.
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::Number(2.0).as_i64(), Some(2));
    /// assert_eq!(Message::Integer(2).as_i64(), Some(2));
    /// assert_eq!(Message::Number(2.5).as_i64(), None);
    /// assert_eq!(Message::from("2").as_i64(), None);
    /// ```
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Message::Integer(i) => Some(i),
            Message::Number(n) => whole_i64(n),
            _ => None,
        }
    }

    /// The number this value holds as an f64, from either form: a [`Message::Number`], or a
    /// [`Message::Integer`] that an f64 holds exactly (within ±2^53). `None` for anything else.
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::Number(0.5).as_f64(), Some(0.5));
    /// assert_eq!(Message::Integer(7).as_f64(), Some(7.0));
    /// assert_eq!(Message::Integer((1 << 53) + 1).as_f64(), None); // not exact as an f64
    /// ```
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Message::Number(n) => Some(n),
            Message::Integer(i) if (-MAX_EXACT_INTEGER..=MAX_EXACT_INTEGER).contains(&i) => {
                Some(i as f64)
            }
            _ => None,
        }
    }

    /// The boolean this value holds, or `None` (`nil` is not `false` here).
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::Boolean(true).as_bool(), Some(true));
    /// assert_eq!(Message::Nil.as_bool(), None);
    /// ```
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Message::Boolean(b) => Some(b),
            _ => None,
        }
    }

    /// The text of a [`Message::String`] that is valid UTF-8; `None` for other bytes and for
    /// anything that is not a string. [`as_bytes`](Self::as_bytes) reads any string.
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::from("hi").as_str(), Some("hi"));
    /// assert_eq!(Message::from(&b"\xff"[..]).as_str(), None);
    /// ```
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Message::String(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The bytes of a [`Message::String`] or a [`Message::Buffer`].
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::from(&b"\xff"[..]).as_bytes(), Some(&b"\xff"[..]));
    /// assert_eq!(Message::buffer(vec![1, 2]).as_bytes(), Some(&[1, 2][..]));
    /// ```
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Message::String(bytes) | Message::Buffer(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// The components of a [`Message::Vector`].
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::from([1.0, 2.0, 3.0]).as_vector(), Some([1.0, 2.0, 3.0]));
    /// ```
    pub fn as_vector(&self) -> Option<[f32; 3]> {
        match *self {
            Message::Vector(v) => Some(v),
            _ => None,
        }
    }

    /// The items of a [`Message::List`]; the empty table (`Map(vec![])`, how `{}` arrives) is
    /// the empty list.
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::list([1, 2]).as_list().map(<[_]>::len), Some(2));
    /// assert_eq!(Message::Map(vec![]).as_list(), Some(&[][..]));
    /// ```
    pub fn as_list(&self) -> Option<&[Message]> {
        match self {
            Message::List(items) => Some(items),
            Message::Map(entries) if entries.is_empty() => Some(&[]),
            _ => None,
        }
    }

    /// Whether this is `nil`.
    pub fn is_nil(&self) -> bool {
        matches!(self, Message::Nil)
    }

    /// The value under `key` in a table: a map's entry, or a list's item when the key is a
    /// whole number `1..=n`, as Luau's `t[key]` finds it. A number key and an integer key of
    /// the same value find the same entry when the table has no entry under the exact key.
    /// `None` when the key is absent or this is not a table.
    ///
    /// ```
    /// use skein::Message;
    ///
    /// let entity = Message::map([("name", Message::from("crate")), ("hp", Message::from(3))]);
    /// assert_eq!(entity.get("hp").and_then(Message::as_i64), Some(3));
    /// assert!(entity.get("speed").is_none());
    /// let list = Message::list(["a", "b"]);
    /// assert_eq!(list.get(2).and_then(Message::as_str), Some("b")); // 1-based, as in Luau
    /// ```
    pub fn get(&self, key: impl Into<MapKey>) -> Option<&Message> {
        let key = key.into();
        match self {
            Message::Map(entries) => entries
                .iter()
                .find(|(k, _)| *k == key)
                .or_else(|| {
                    let whole = key_whole(&key)?;
                    entries.iter().find(|(k, _)| key_whole(k) == Some(whole))
                })
                .map(|(_, v)| v),
            Message::List(items) => {
                let position = usize::try_from(key_whole(&key)?).ok()?;
                items.get(position.checked_sub(1)?)
            }
            _ => None,
        }
    }

    /// The item at 0-based `position` of a list (Luau's `t[position + 1]`), reading a map with
    /// holes (`{ 'a', nil, 'c' }`) by its number keys the same way.
    ///
    /// ```
    /// use skein::Message;
    /// let list = Message::list([10, 20]);
    /// assert_eq!(list.index(1).and_then(Message::as_i64), Some(20));
    /// assert!(list.index(2).is_none());
    /// ```
    pub fn index(&self, position: usize) -> Option<&Message> {
        match self {
            Message::List(items) => items.get(position),
            Message::Map(_) => self.get(i64::try_from(position).ok()?.checked_add(1)?),
            _ => None,
        }
    }

    /// Luau's name for this value's type, as `typeof` gives it: `nil`, `boolean`, `integer`,
    /// `number`, `string`, `vector`, `buffer`, `table` or `userdata`.
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::from(2).type_name(), "number");
    /// assert_eq!(Message::list([1]).type_name(), "table");
    /// ```
    pub fn type_name(&self) -> &'static str {
        match self {
            Message::Nil => "nil",
            Message::Boolean(_) => "boolean",
            Message::Integer(_) => "integer",
            Message::Number(_) => "number",
            Message::String(_) => "string",
            Message::Vector(_) => "vector",
            Message::Buffer(_) => "buffer",
            Message::List(_) | Message::Map(_) => "table",
            Message::Resource(_) => "userdata",
        }
    }

    /// A list of `items`, each converted by its `Into<Message>`.
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(
    ///     Message::list([1.5, 2.5]),
    ///     Message::List(vec![Message::Number(1.5), Message::Number(2.5)])
    /// );
    /// ```
    pub fn list<T: Into<Message>>(items: impl IntoIterator<Item = T>) -> Message {
        Message::List(items.into_iter().map(Into::into).collect())
    }

    /// A map of `entries`, keys by their `Into<MapKey>` and values by their `Into<Message>`.
    ///
    /// ```
    /// use skein::Message;
    /// let pos = Message::map([("x", 1.0), ("y", 2.0)]);
    /// assert_eq!(pos.get("y"), Some(&Message::Number(2.0)));
    /// ```
    pub fn map<K: Into<MapKey>, V: Into<Message>>(
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Message {
        Message::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// `n` as an i64 when it is whole and in range.
pub(super) fn whole_i64(n: f64) -> Option<i64> {
    (n.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&n)).then_some(n as i64)
}

/// The whole number a number or integer key names.
fn key_whole(key: &MapKey) -> Option<i64> {
    match *key {
        MapKey::Integer(i) => Some(i),
        MapKey::Number(n) => whole_i64(n),
        MapKey::String(_) => None,
    }
}
