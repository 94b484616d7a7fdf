//! Rust values into and out of [`Message`]: the `From`/`TryFrom` impls, and the
//! [`FromMessage`]/[`IntoMessage`] pair that typed host functions and services take their
//! arguments and give their answers through.
//!
//! # Whole numbers
//!
//! Luau has two number types: `number` (an f64, what `2` and `2.5` are in a script) and
//! `integer` (an i64 made with `integer.create`, which a script can't mix with numbers in
//! arithmetic). Every crossing keeps them apart: a Luau number is a [`Message::Number`] and a
//! Luau integer a [`Message::Integer`], at the top level as nested, so a `Message` that goes
//! into Luau and back is the one that went in. A Rust whole number becomes a `Number` when an
//! f64 holds it exactly (within ±2^53), which is what a script can compute with, and an
//! `Integer` past that, which loses nothing; reading one back accepts either form when the
//! value is exact in the Rust type. So a Rust value that goes into Luau and back is the one
//! that went in.
//!
//! This module never touches Luau: it converts between `Message` and Rust only.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

use bytes::Bytes;

use super::access::whole_i64;
use super::path::{self, Segment};
use super::{ConvertError, MapKey, Message, ResourceHandle, MAX_EXACT_INTEGER};

/// A Rust value read out of a [`Message`]: what typed services and host functions take.
///
/// Implemented for `Message` itself, `()`, `bool`, the integer and float types, `String`,
/// `Bytes`, `[f32; 3]` (a Luau vector), [`ResourceHandle`], `Option<T>`, `Vec<T>`,
/// `HashMap`/`BTreeMap`, tuples of up to eight of these, which read a list position by
/// position, and [`Args`](crate::message::Args), a call's arguments whole. Numbers are read by the rule for whole numbers ([`Message`]'s docs): an `i64` accepts
/// `Number(2.0)` and `Integer(2)` alike, and refuses `2.5`.
///
/// ```
/// use skein::{FromMessage, Message};
///
/// let (id, pos) = <(i64, [f32; 3])>::from_message(Message::list([
///     Message::from(7),
///     Message::from([1.0, 2.0, 0.0]),
/// ]))?;
/// assert_eq!((id, pos), (7, [1.0, 2.0, 0.0]));
/// # Ok::<(), skein::message::ConvertError>(())
/// ```
///
/// # Errors
/// A [`ConvertError`] naming where the value sits and what was expected.
pub trait FromMessage: Sized {
    /// Reads `message` as `Self`.
    ///
    /// # Errors
    /// A [`ConvertError`] whose path starts at `value`.
    fn from_message(message: Message) -> Result<Self, ConvertError>;

    /// Reads a call's arguments as `Self`: a tuple takes them position by position,
    /// [`Args`](crate::message::Args) takes them all, and any other type, [`Message`] among
    /// them, takes the first one (`nil` when there is none). Arguments past what `Self` reads
    /// are ignored, as Luau ignores them.
    ///
    /// # Errors
    /// A [`ConvertError`] whose path starts at `args`: `args[2]` is the second argument.
    fn from_args(args: Vec<Message>) -> Result<Self, ConvertError> {
        let first = args.into_iter().next().unwrap_or(Message::Nil);
        Self::from_message(first).map_err(|e| e.at(Segment::Index(1)).in_args())
    }
}

/// A Rust value made into a [`Message`]: what typed queries answer.
///
/// Implemented for every type with a `From` impl into `Message`, for the integer types that
/// convert with `TryFrom` (`u64`, `usize`, `i128`…: refused past the range of `i64`), and for
/// `()` (`nil`) and tuples (a list).
///
/// ```
/// use skein::{IntoMessage, Message};
///
/// let m = (3usize, "three").into_message()?;
/// assert_eq!(m, Message::list([Message::from(3), Message::from("three")]));
/// # Ok::<(), skein::message::ConvertError>(())
/// ```
pub trait IntoMessage {
    /// Makes `self` a [`Message`].
    ///
    /// # Errors
    /// A [`ConvertError`] when the value can't be one: an integer past the range of `i64`, or a
    /// `Serialize` value past the bounds every copy obeys.
    fn into_message(self) -> Result<Message, ConvertError>;
}

impl Message {
    /// A [`Message::Buffer`] of `bytes` (a `&[u8]` or `Bytes` becomes a Luau *string* through
    /// `From`, as mlua makes one).
    ///
    /// ```
    /// use skein::Message;
    /// assert_eq!(Message::buffer(vec![1, 2]), Message::Buffer(vec![1, 2].into()));
    /// ```
    pub fn buffer(bytes: impl Into<Bytes>) -> Message {
        Message::Buffer(bytes.into())
    }

    /// What a mismatch error says was there: `nil`, `a string`, `the number 2.5`…
    pub(crate) fn describe(&self) -> String {
        match self {
            Message::Integer(i) => format!("the integer {i}"),
            Message::Number(n) => format!("the number {}", path::number_text(*n)),
            Message::Nil => "nil".to_owned(),
            Message::Boolean(_) => "a boolean".to_owned(),
            Message::String(_) => "a string".to_owned(),
            Message::Vector(_) => "a vector".to_owned(),
            Message::Buffer(_) => "a buffer".to_owned(),
            Message::List(_) | Message::Map(_) => "a table".to_owned(),
            Message::Resource(_) => "a resource handle".to_owned(),
        }
    }

    /// A whole Rust number by the rule: a `Number` when an f64 holds it exactly, an `Integer`
    /// past that.
    fn whole(i: i64) -> Message {
        if (-MAX_EXACT_INTEGER..=MAX_EXACT_INTEGER).contains(&i) {
            Message::Number(i as f64)
        } else {
            Message::Integer(i)
        }
    }
}

/// A whole Rust number as a key, by the same rule: `t[1]` in Luau is the *number* 1.
impl From<i64> for MapKey {
    fn from(i: i64) -> MapKey {
        match Message::whole(i) {
            Message::Number(n) => MapKey::Number(n),
            _ => MapKey::Integer(i),
        }
    }
}

/// A key as the value it is: a string, integer or number.
impl From<MapKey> for Message {
    fn from(key: MapKey) -> Message {
        match key {
            MapKey::Integer(i) => Message::Integer(i),
            MapKey::Number(n) => Message::Number(n),
            MapKey::String(s) => Message::String(s),
        }
    }
}

/// Implements `IntoMessage` through the type's `From` impl.
macro_rules! into_message_by_from {
    ($($t:ty),*) => {$(
        impl IntoMessage for $t {
            fn into_message(self) -> Result<Message, ConvertError> {
                Ok(Message::from(self))
            }
        }
    )*};
}

impl From<bool> for Message {
    fn from(b: bool) -> Message {
        Message::Boolean(b)
    }
}

/// Integers that an f64 always holds exactly: a Luau number.
macro_rules! small_integers {
    ($($t:ty),*) => {$(
        impl From<$t> for Message {
            fn from(i: $t) -> Message {
                Message::Number(f64::from(i))
            }
        }
    )*};
}
small_integers!(i8, i16, i32, u8, u16, u32);

/// A Luau number within ±2^53, where an f64 holds every whole number; a Luau integer past it.
impl From<i64> for Message {
    fn from(i: i64) -> Message {
        Message::whole(i)
    }
}

/// Integers that may pass the range of `i64`: refused there, by the rule of `i64` within it.
macro_rules! wide_integers {
    ($($t:ty),*) => {$(
        impl TryFrom<$t> for Message {
            type Error = ConvertError;
            fn try_from(i: $t) -> Result<Message, ConvertError> {
                match i64::try_from(i) {
                    Ok(i) => Ok(Message::whole(i)),
                    Err(_) => Err(ConvertError::new(super::ConvertErrorKind::Mismatch {
                        expected: "an integer within the range of i64".into(),
                        found: i.to_string(),
                    })),
                }
            }
        }
        impl IntoMessage for $t {
            fn into_message(self) -> Result<Message, ConvertError> {
                Message::try_from(self)
            }
        }
    )*};
}
wide_integers!(u64, usize, isize, i128, u128);

impl From<f64> for Message {
    fn from(n: f64) -> Message {
        Message::Number(n)
    }
}

impl From<f32> for Message {
    fn from(n: f32) -> Message {
        Message::Number(f64::from(n))
    }
}

impl From<&str> for Message {
    fn from(s: &str) -> Message {
        Message::String(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for Message {
    fn from(s: String) -> Message {
        Message::String(Bytes::from(s))
    }
}

/// A Luau string of these bytes (use [`Message::buffer`] for a buffer).
impl From<&[u8]> for Message {
    fn from(b: &[u8]) -> Message {
        Message::String(Bytes::copy_from_slice(b))
    }
}

/// A Luau string of these bytes, shared without a copy (use [`Message::buffer`] for a buffer).
impl From<Bytes> for Message {
    fn from(b: Bytes) -> Message {
        Message::String(b)
    }
}

/// A Luau vector.
impl From<[f32; 3]> for Message {
    fn from(v: [f32; 3]) -> Message {
        Message::Vector(v)
    }
}

impl From<ResourceHandle> for Message {
    fn from(h: ResourceHandle) -> Message {
        Message::Resource(h)
    }
}

/// `nil` for `None`.
impl<T: Into<Message>> From<Option<T>> for Message {
    fn from(o: Option<T>) -> Message {
        o.map_or(Message::Nil, Into::into)
    }
}

/// A list (`Vec<u8>` too: a list of numbers; [`Message::buffer`] makes a buffer).
impl<T: Into<Message>> From<Vec<T>> for Message {
    fn from(items: Vec<T>) -> Message {
        Message::list(items)
    }
}

impl<K: Into<MapKey>, V: Into<Message>, S> From<HashMap<K, V, S>> for Message {
    fn from(map: HashMap<K, V, S>) -> Message {
        Message::map(map)
    }
}

impl<K: Into<MapKey>, V: Into<Message>> From<BTreeMap<K, V>> for Message {
    fn from(map: BTreeMap<K, V>) -> Message {
        Message::map(map)
    }
}

into_message_by_from!(
    bool,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    f32,
    f64,
    &str,
    String,
    &[u8],
    Bytes,
    [f32; 3],
    ResourceHandle
);

impl IntoMessage for Message {
    fn into_message(self) -> Result<Message, ConvertError> {
        Ok(self)
    }
}

/// `nil`.
impl IntoMessage for () {
    fn into_message(self) -> Result<Message, ConvertError> {
        Ok(Message::Nil)
    }
}

impl<T: IntoMessage> IntoMessage for Option<T> {
    fn into_message(self) -> Result<Message, ConvertError> {
        self.map_or(Ok(Message::Nil), IntoMessage::into_message)
    }
}

impl<T: IntoMessage> IntoMessage for Vec<T> {
    fn into_message(self) -> Result<Message, ConvertError> {
        let items = self
            .into_iter()
            .enumerate()
            .map(|(i, v)| v.into_message().map_err(|e| e.at(Segment::position(i))))
            .collect::<Result<_, _>>()?;
        Ok(Message::List(items))
    }
}

impl<K: Into<MapKey>, V: IntoMessage, S> IntoMessage for HashMap<K, V, S> {
    fn into_message(self) -> Result<Message, ConvertError> {
        map_into_message(self)
    }
}

impl<K: Into<MapKey>, V: IntoMessage> IntoMessage for BTreeMap<K, V> {
    fn into_message(self) -> Result<Message, ConvertError> {
        map_into_message(self)
    }
}

fn map_into_message<K: Into<MapKey>, V: IntoMessage>(
    entries: impl IntoIterator<Item = (K, V)>,
) -> Result<Message, ConvertError> {
    let entries = entries
        .into_iter()
        .map(|(k, v)| {
            let key = k.into();
            match v.into_message() {
                Ok(value) => Ok((key, value)),
                Err(e) => Err(e.at(Segment::key(&key))),
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Message::Map(entries))
}

/// The value as it is; as an argument type, the first argument (`nil` when there is none).
impl FromMessage for Message {
    fn from_message(message: Message) -> Result<Self, ConvertError> {
        Ok(message)
    }
}

/// Anything, ignored: a function or service that takes no arguments takes `()`.
impl FromMessage for () {
    fn from_message(_: Message) -> Result<Self, ConvertError> {
        Ok(())
    }

    fn from_args(_: Vec<Message>) -> Result<Self, ConvertError> {
        Ok(())
    }
}

impl FromMessage for bool {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        m.as_bool()
            .ok_or_else(|| ConvertError::mismatch("a boolean", &m))
    }
}

/// The whole number `m` holds, from either form, wide enough for every integer type.
fn whole_i128(m: &Message) -> Option<i128> {
    /// `2^64` as an f64: past every `u64`.
    const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
    match *m {
        Message::Integer(i) => Some(i128::from(i)),
        Message::Number(n) if n.fract() == 0.0 && (0.0..TWO_POW_64).contains(&n) => Some(n as i128),
        Message::Number(n) => whole_i64(n).map(i128::from),
        _ => None,
    }
}

/// Integer types: either number form, when whole and in range.
macro_rules! from_message_integers {
    ($($t:ty),*) => {$(
        impl FromMessage for $t {
            fn from_message(m: Message) -> Result<Self, ConvertError> {
                match whole_i128(&m).map(<$t>::try_from) {
                    Some(Ok(i)) => Ok(i),
                    Some(Err(_)) => Err(ConvertError::mismatch(
                        format!("an integer from {} to {}", <$t>::MIN, <$t>::MAX),
                        &m,
                    )),
                    None => Err(ConvertError::mismatch("an integer", &m)),
                }
            }
        }
    )*};
}
from_message_integers!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl FromMessage for f64 {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        m.as_f64()
            .ok_or_else(|| ConvertError::mismatch("a number (or an integer within ±2^53)", &m))
    }
}

/// An f64 rounded to the nearest f32, as Luau rounds a vector's components.
impl FromMessage for f32 {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        f64::from_message(m).map(|n| n as f32)
    }
}

impl FromMessage for String {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        match m.as_str() {
            Some(s) => Ok(s.to_owned()),
            None if matches!(m, Message::String(_)) => {
                Err(ConvertError::new(super::ConvertErrorKind::Mismatch {
                    expected: "a UTF-8 string".into(),
                    found: "a string of other bytes".to_owned(),
                }))
            }
            None => Err(ConvertError::mismatch("a string", &m)),
        }
    }
}

/// A string's or a buffer's bytes, without a copy.
impl FromMessage for Bytes {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        match m {
            Message::String(b) | Message::Buffer(b) => Ok(b),
            other => Err(ConvertError::mismatch("a string or a buffer", &other)),
        }
    }
}

/// A Luau vector.
impl FromMessage for [f32; 3] {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        m.as_vector()
            .ok_or_else(|| ConvertError::mismatch("a vector", &m))
    }
}

impl FromMessage for ResourceHandle {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        match m {
            Message::Resource(h) => Ok(h),
            other => Err(ConvertError::mismatch("a resource handle", &other)),
        }
    }
}

/// `None` for `nil`.
impl<T: FromMessage> FromMessage for Option<T> {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        match m {
            Message::Nil => Ok(None),
            other => T::from_message(other).map(Some),
        }
    }
}

/// A list's items (the empty table `{}` is the empty list).
impl<T: FromMessage> FromMessage for Vec<T> {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        match m {
            Message::List(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| T::from_message(v).map_err(|e| e.at(Segment::position(i))))
                .collect(),
            Message::Map(entries) if entries.is_empty() => Ok(Vec::new()),
            other => Err(ConvertError::mismatch("a list", &other)),
        }
    }
}

/// A table's entries: a map's, or a list's with the keys `1..=n`.
impl<K, V, S> FromMessage for HashMap<K, V, S>
where
    K: FromMessage + Eq + Hash,
    V: FromMessage,
    S: BuildHasher + Default,
{
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        table_entries(m)?.collect()
    }
}

/// A table's entries: a map's, or a list's with the keys `1..=n`.
impl<K: FromMessage + Ord, V: FromMessage> FromMessage for BTreeMap<K, V> {
    fn from_message(m: Message) -> Result<Self, ConvertError> {
        table_entries(m)?.collect()
    }
}

/// Each entry of a table read as `(K, V)`, a refusal naming its key.
fn table_entries<K: FromMessage, V: FromMessage>(
    m: Message,
) -> Result<impl Iterator<Item = Result<(K, V), ConvertError>>, ConvertError> {
    let entries: Vec<(MapKey, Message)> = match m {
        Message::Map(entries) => entries,
        Message::List(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (MapKey::Number((i + 1) as f64), v))
            .collect(),
        other => return Err(ConvertError::mismatch("a table", &other)),
    };
    Ok(entries.into_iter().map(|(k, v)| {
        let segment = Segment::key(&k);
        let key = K::from_message(Message::from(k)).map_err(|e| {
            ConvertError::new(e.kind().clone()).at(Segment::Described(match segment.clone() {
                Segment::Name(n) => format!("key {:?}", String::from_utf8_lossy(&n)),
                Segment::Index(i) => format!("key {i}"),
                Segment::Number(n) => format!("key {}", path::number_text(n)),
                Segment::Described(d) => d,
            }))
        })?;
        let value = V::from_message(v).map_err(|e| e.at(segment))?;
        Ok((key, value))
    }))
}

/// Tuples read a list position by position (missing positions are `nil`), and their
/// arguments the same way; they are made into a list.
macro_rules! tuples {
    ($($name:ident $at:tt),+) => {
        impl<$($name: FromMessage),+> FromMessage for ($($name,)+) {
            fn from_message(m: Message) -> Result<Self, ConvertError> {
                let items = match m {
                    Message::List(items) => items,
                    Message::Map(entries) if entries.is_empty() => Vec::new(),
                    other => return Err(ConvertError::mismatch("a list", &other)),
                };
                let mut items = items.into_iter();
                Ok(($(
                    $name::from_message(items.next().unwrap_or(Message::Nil))
                        .map_err(|e| e.at(Segment::Index($at + 1)))?,
                )+))
            }

            fn from_args(args: Vec<Message>) -> Result<Self, ConvertError> {
                Self::from_message(Message::List(args)).map_err(ConvertError::in_args)
            }
        }

        impl<$($name: IntoMessage),+> IntoMessage for ($($name,)+) {
            fn into_message(self) -> Result<Message, ConvertError> {
                Ok(Message::List(vec![$(
                    self.$at.into_message().map_err(|e| e.at(Segment::Index($at + 1)))?,
                )+]))
            }
        }
    };
}
tuples!(A 0);
tuples!(A 0, B 1);
tuples!(A 0, B 1, C 2);
tuples!(A 0, B 1, C 2, D 3);
tuples!(A 0, B 1, C 2, D 3, E 4);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// `TryFrom<Message>` through [`FromMessage`], for the types a host names most.
macro_rules! try_from_message {
    ($($t:ty),*) => {$(
        impl TryFrom<Message> for $t {
            type Error = ConvertError;
            fn try_from(m: Message) -> Result<Self, ConvertError> {
                <$t>::from_message(m)
            }
        }
    )*};
}
try_from_message!(
    bool,
    i8,
    i16,
    i32,
    i64,
    isize,
    u8,
    u16,
    u32,
    u64,
    usize,
    f32,
    f64,
    String,
    Bytes,
    [f32; 3],
    ResourceHandle
);

impl<T: FromMessage> TryFrom<Message> for Vec<T> {
    type Error = ConvertError;
    fn try_from(m: Message) -> Result<Self, ConvertError> {
        Vec::from_message(m)
    }
}

impl<K, V, S> TryFrom<Message> for HashMap<K, V, S>
where
    K: FromMessage + Eq + Hash,
    V: FromMessage,
    S: BuildHasher + Default,
{
    type Error = ConvertError;
    fn try_from(m: Message) -> Result<Self, ConvertError> {
        HashMap::from_message(m)
    }
}

impl<K: FromMessage + Ord, V: FromMessage> TryFrom<Message> for BTreeMap<K, V> {
    type Error = ConvertError;
    fn try_from(m: Message) -> Result<Self, ConvertError> {
        BTreeMap::from_message(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_follow_one_rule_both_ways() {
        assert_eq!(Message::from(2), Message::Number(2.0));
        assert_eq!(Message::from(1i64 << 53), Message::Number(2f64.powi(53)));
        assert_eq!(
            Message::from((1i64 << 53) + 1),
            Message::Integer((1 << 53) + 1)
        );
        assert_eq!(Message::from(i64::MIN), Message::Integer(i64::MIN));
        for i in [0, 2, -7, 1 << 53, (1 << 53) + 1, i64::MAX, i64::MIN] {
            assert_eq!(i64::try_from(Message::from(i)), Ok(i));
        }
        assert_eq!(i64::try_from(Message::Integer(2)), Ok(2));
        assert_eq!(
            u64::try_from(Message::Number(1e19)).ok(),
            Some(10_000_000_000_000_000_000)
        );
        assert_eq!(
            Message::try_from(u64::MAX).unwrap_err().to_string(),
            "value: expected an integer within the range of i64, got 18446744073709551615"
        );
        assert_eq!(
            i64::try_from(Message::Number(2.5)).unwrap_err().to_string(),
            "value: expected an integer, got the number 2.5"
        );
        assert_eq!(
            i64::try_from(Message::Number(2f64.powi(63))).unwrap_err().to_string(),
            "value: expected an integer from -9223372036854775808 to 9223372036854775807, got the number 9223372036854776000"
        );
        assert_eq!(
            u8::try_from(Message::from(-1)).unwrap_err().to_string(),
            "value: expected an integer from 0 to 255, got the number -1"
        );
        assert_eq!(f64::try_from(Message::Integer(1 << 53)), Ok(2f64.powi(53)));
        assert_eq!(
            f64::try_from(Message::Integer((1 << 53) + 1)).unwrap_err().to_string(),
            "value: expected a number (or an integer within ±2^53), got the integer 9007199254740993"
        );
    }

    #[test]
    fn tables_convert_with_paths_naming_the_bad_entry() {
        let m = Message::list([Message::list([1, 2]), Message::list([3])]);
        assert_eq!(
            Vec::<Vec<u8>>::try_from(m.clone()),
            Ok(vec![vec![1, 2], vec![3]])
        );
        let bad = Message::list([Message::list([1, 2]), Message::list(["x"])]);
        assert_eq!(
            Vec::<Vec<u8>>::try_from(bad).unwrap_err().to_string(),
            "value[2][1]: expected an integer, got a string"
        );
        let map = Message::map([("a", 1), ("b", 2)]);
        let read: BTreeMap<String, i32> = map.clone().try_into().unwrap();
        assert_eq!(
            read,
            BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 2)])
        );
        assert_eq!(
            BTreeMap::<String, bool>::try_from(map).unwrap_err().path(),
            "value.a"
        );
        let by_position: HashMap<u32, String> = Message::list(["x", "y"]).try_into().unwrap();
        assert_eq!(by_position[&2], "y");
        assert_eq!(Vec::<i32>::try_from(Message::Map(vec![])), Ok(vec![]));
        assert_eq!(
            BTreeMap::<u8, bool>::try_from(Message::map([("k", true)]))
                .unwrap_err()
                .to_string(),
            "value[key \"k\"]: expected an integer, got a string"
        );
    }

    #[test]
    fn arguments_are_read_by_position_and_named_args() {
        let args = vec![Message::from(3), Message::from([1.0, 2.0, 3.0])];
        assert_eq!(
            <(i64, [f32; 3])>::from_args(args.clone()),
            Ok((3, [1.0, 2.0, 3.0]))
        );
        assert_eq!(i64::from_args(args.clone()), Ok(3));
        assert_eq!(Message::from_args(args.clone()), Ok(Message::from(3)));
        assert_eq!(
            <(i64, String)>::from_args(args.clone())
                .unwrap_err()
                .to_string(),
            "args[2]: expected a string, got a vector"
        );
        assert_eq!(
            <(i64, [f32; 3], bool)>::from_args(args.clone())
                .unwrap_err()
                .to_string(),
            "args[3]: expected a boolean, got nil"
        );
        assert_eq!(
            <(i64, [f32; 3], Option<bool>)>::from_args(args.clone()),
            Ok((3, [1.0, 2.0, 3.0], None))
        );
        assert_eq!(
            String::from_args(args).unwrap_err().to_string(),
            "args[1]: expected a string, got the number 3"
        );
    }
}
