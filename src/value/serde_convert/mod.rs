//! The `serde` feature: any `Serialize` type into a [`Message`] and any `Deserialize` type out
//! of one, and [`Serde`], which lets a typed service or host function take or answer one.
//!
//! Building a `Message` obeys the bounds every copy obeys, counted as it is built (never built
//! first and weighed after): [`Limits::MAX_MESSAGE_BYTES`] of
//! [`queue_weight`](Message::queue_weight) and [`Limits::MAX_DEPTH`] tables. Reading one
//! allocates no more than the message already holds. Whole numbers follow the rule of
//! [`FromMessage`] (a Rust integer is a Luau number within ±2^53, an integer past it; an integer
//! field accepts either form when exact).
//!
//! | Rust (serde's data model) | `Message` |
//! | --- | --- |
//! | `bool`, `f32`/`f64`, `char`/`str` | `Boolean`, `Number`, `String` |
//! | integers | `Number` within ±2^53, `Integer` past it (`u64` past `i64::MAX` is refused) |
//! | bytes (`serde_bytes`) | `Buffer` (and a `Buffer` or `String` reads as bytes) |
//! | `None`, `()`, unit struct | `Nil` |
//! | `Some(v)`, newtype struct | `v` |
//! | sequence, tuple, tuple struct | `List` (a `Vector` reads as a sequence of three `f32`) |
//! | map, struct | `Map` (keys: strings, integers or numbers; an entry whose value is `nil` is left out, as a Luau table leaves it) |
//! | unit variant / other variants | `String(name)` / `Map { name: value }` |
//!
//! A `None` inside a sequence is a `Nil` item, which a Luau table can't hold: past Luau, the
//! list has a hole and reads back as a map. Give such a field `Option`-free items, or a map.

mod de;
mod ser;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{ConvertError, ConvertErrorKind, FromMessage, IntoMessage, Limits, Message};

impl Message {
    /// Makes `value` a `Message` through its `Serialize` impl, refusing it, before building
    /// more, once it passes [`Limits::MAX_MESSAGE_BYTES`] or nests deeper than
    /// [`Limits::MAX_DEPTH`] tables.
    ///
    /// ```
    /// use serde::Serialize;
    /// use skein::Message;
    ///
    /// #[derive(Serialize)]
    /// struct Spawn { kind: String, at: (f32, f32), hp: u32 }
    ///
    /// let m = Message::from_serde(&Spawn { kind: "crate".into(), at: (1.0, 2.0), hp: 3 })?;
    /// assert_eq!(m.get("hp"), Some(&Message::Number(3.0)));
    /// assert_eq!(m.get("at").and_then(|at| at.index(1)), Some(&Message::Number(2.0)));
    /// # Ok::<(), skein::message::ConvertError>(())
    /// ```
    ///
    /// # Errors
    /// [`ConvertErrorKind::TooLarge`], [`ConvertErrorKind::TooDeep`], a map key that is not a
    /// string or a number, an integer past `i64`, or the value's own `Serialize` error.
    pub fn from_serde<T: Serialize + ?Sized>(value: &T) -> Result<Message, ConvertError> {
        Self::from_serde_within(value, Limits::MAX_MESSAGE_BYTES)
    }

    /// [`from_serde`](Self::from_serde) under a bound of `limit_bytes` (of
    /// [`queue_weight`](Message::queue_weight)) instead of [`Limits::MAX_MESSAGE_BYTES`].
    ///
    /// ```
    /// use skein::message::{ConvertErrorKind, Limits};
    /// use skein::Message;
    ///
    /// let two = 2 * Limits::NODE_WEIGHT + 3; // a list node, a string node and its 3 bytes
    /// assert!(Message::from_serde_within(&["abc"], two).is_ok());
    /// let err = Message::from_serde_within(&["abc"], two - 1).unwrap_err();
    /// assert_eq!(err.kind(), &ConvertErrorKind::TooLarge { limit: two - 1 });
    /// ```
    ///
    /// # Errors
    /// As [`from_serde`](Self::from_serde).
    pub fn from_serde_within<T: Serialize + ?Sized>(
        value: &T,
        limit_bytes: usize,
    ) -> Result<Message, ConvertError> {
        value.serialize(&mut ser::Builder::new(limit_bytes))
    }

    /// Reads this message as a `T` through its `Deserialize` impl; strings are borrowed where
    /// `T` borrows them.
    ///
    /// ```
    /// use serde::Deserialize;
    /// use skein::Message;
    ///
    /// #[derive(Deserialize, Debug, PartialEq)]
    /// struct Hit { target: u32, damage: f64 }
    ///
    /// let m = Message::map([("target", Message::Integer(7)), ("damage", Message::from(2.5))]);
    /// assert_eq!(m.to_serde::<Hit>()?, Hit { target: 7, damage: 2.5 });
    /// let bad = Message::map([("target", "x")]);
    /// assert_eq!(
    ///     bad.to_serde::<Hit>().unwrap_err().to_string(),
    ///     "value.target: invalid type: string \"x\", expected u32"
    /// );
    /// # Ok::<(), skein::message::ConvertError>(())
    /// ```
    ///
    /// # Errors
    /// A [`ConvertError`] naming where the value did not fit `T`.
    pub fn to_serde<'de, T: Deserialize<'de>>(&'de self) -> Result<T, ConvertError> {
        T::deserialize(de::Reader(self))
    }
}

/// A `Serialize`/`Deserialize` type as a typed argument or answer of a service or host
/// function: `|Serde(order): Serde<Order>|` reads the first argument through serde, and
/// `Ok(Serde(report))` answers through it.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use skein::message::Serde;
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// #[derive(Deserialize)]
/// struct Order { item: String, count: u32 }
/// #[derive(Serialize)]
/// struct Receipt { total: f64 }
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("shop"))?;
/// domain.register_query("shop.buy", |Serde(order): Serde<Order>| {
///     let price = if order.item == "apple" { 0.5 } else { 2.0 };
///     Ok(Serde(Receipt { total: price * f64::from(order.count) }))
/// })?;
/// let total = domain.eval("return shop.buy({ item = 'apple', count = 4 }).total")?;
/// assert_eq!(total, Message::Number(2.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Serde<T>(pub T);

impl<T: DeserializeOwned> FromMessage for Serde<T> {
    fn from_message(message: Message) -> Result<Self, ConvertError> {
        message.to_serde().map(Serde)
    }
}

impl<T: Serialize> IntoMessage for Serde<T> {
    fn into_message(self) -> Result<Message, ConvertError> {
        Message::from_serde(&self.0)
    }
}

impl serde::ser::Error for ConvertError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        ConvertError::new(ConvertErrorKind::Custom(msg.to_string()))
    }
}

impl serde::de::Error for ConvertError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        ConvertError::new(ConvertErrorKind::Custom(msg.to_string()))
    }
}
