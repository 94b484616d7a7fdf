//! `Message`: the plain value that crosses between Luau VMs, threads and processes.
//!
//! This module owns the conversion between Luau values and [`Message`] (with its refusals and
//! limits) and the binary codec. It never holds a Luau value past a call: what leaves a VM is
//! copied out into `Message`, and what enters is built fresh in the receiving VM.
//!
//! The conversions work on the Luau stack through `mlua::ffi` rather than through `mlua::Value`,
//! for two reasons: `Value` cannot tell a Luau integer from a whole number (both become
//! `Value::Integer`, and `Value::Integer` goes back as a number), and per-element `Value`
//! construction costs several times what a raw stack read does.

mod access;
mod args;
mod codec;
mod convert;
mod copy;
mod display;
mod error;
mod limits;
pub(crate) mod path;
pub(crate) mod read;
mod resource_handle;
#[cfg(feature = "serde")]
mod serde_convert;
mod typed;
pub(crate) mod write;

use bytes::Bytes;

pub use args::Args;
pub(crate) use convert::{ExactValue, ExactValues, MessageArg, MessageArgs};
pub(crate) use copy::{copy_values, Copied, SOURCE_STACK_NEEDED};
pub(crate) use display::article;
pub use error::{
    ConvertError, ConvertErrorKind, DecodeError, DecodeErrorKind, TransferError, TransferErrorKind,
};
pub use limits::Limits;
pub use resource_handle::ResourceHandle;
#[cfg(feature = "serde")]
pub use serde_convert::Serde;
pub use typed::{FromMessage, IntoMessage};
pub(crate) use write::{push_scalar, write_protected};

/// The largest magnitude an f64 holds every whole number up to: 2^53.
pub(crate) const MAX_EXACT_INTEGER: i64 = 1 << 53;

/// A value that can cross a worker or event boundary: plain data, copied once each way.
///
/// A Luau table becomes a [`Message::List`] when its keys are exactly `1..n` (`n >= 1`), and a
/// [`Message::Map`] otherwise; the empty table `{}` is `Map(vec![])`.
///
/// # Whole numbers: one rule on every path
///
/// A Luau number (`2`, `2.5`: an f64) is a [`Message::Number`], and a Luau integer
/// (`integer.create(2)`, Luau's separate i64 type) is a [`Message::Integer`], wherever the value
/// crosses: a service's arguments and answer, a shared table or queue, a job's arguments and
/// result ([`Promise::wait`](crate::Promise::wait)), `eval`, at the top level as nested. So a
/// `Message` that goes into Luau and back is the one that went in. A Rust whole number becomes
/// a `Number` when an f64 holds it exactly (within ±2^53), which is what a script computes
/// with, and an `Integer` past that (`Message::from(i64)`); the
/// accessors ([`as_i64`](Self::as_i64), [`as_f64`](Self::as_f64)) and [`FromMessage`] accept
/// either form when the value is exact in the Rust type. So a Rust value that goes into Luau
/// and back is the one that went in, too.
///
/// # Equality
///
/// `PartialEq` is the equality a round trip keeps: structural and exact. `Number(2.0)` and
/// `Integer(2)` differ (Luau's `==` says they differ too); compare through
/// [`as_i64`](Self::as_i64) or [`as_f64`](Self::as_f64) to take either form. Floats compare bit
/// for bit, so a NaN equals itself (with the same payload) and `-0.0` differs from `0.0`. Maps
/// compare as sets of entries, whatever their order, because Luau tables have no order, and the
/// empty list equals the empty map (both are `{}` in Luau).
///
/// ```
/// use skein::Message;
///
/// assert_eq!(Message::from(2), Message::Number(2.0));
/// assert_ne!(Message::Number(2.0), Message::Integer(2));
/// assert_eq!(Message::Number(2.0).as_i64(), Message::Integer(2).as_i64());
/// assert_eq!(Message::from(1i64 << 60), Message::Integer(1 << 60));
/// ```
///
/// # Building and reading
///
/// `From` impls build a message from Rust values (`Message::from("text")`, `Message::from(2)`,
/// `Message::from([1.0, 2.0, 3.0])` for a vector, a `Vec` or map of such), [`Message::list`] and
/// [`Message::map`] build tables from iterators, and `TryFrom`/[`FromMessage`] read one back
/// with an error that names where it did not fit. With the `serde` feature,
/// [`Message::from_serde`] and [`Message::to_serde`] take any `Serialize`/`Deserialize` type.
///
/// ```
/// use skein::Message;
///
/// let m = Message::map([("name", Message::from("crate")), ("pos", Message::from([1.0, 0.0, 2.0]))]);
/// assert_eq!(m.get("name").and_then(Message::as_str), Some("crate"));
/// let pos: [f32; 3] = m.get("pos").cloned().unwrap_or(Message::Nil).try_into()?;
/// assert_eq!(pos, [1.0, 0.0, 2.0]);
/// # Ok::<(), skein::message::ConvertError>(())
/// ```
///
/// # Copying to and from Luau
///
/// ```
/// use mlua::Lua;
/// use skein::Message;
///
/// let lua = Lua::new();
/// let value = lua.load("{ 1.5, 'two', { x = true } }").eval().unwrap();
/// let message = Message::from_lua(&value, "message").unwrap();
/// let other = Lua::new();
/// let copy = message.to_lua(&other).unwrap();
/// assert_eq!(Message::from_lua(&copy, "message").unwrap(), message);
/// ```
#[derive(Clone, Debug)]
pub enum Message {
    /// `nil`.
    Nil,
    /// `true` or `false`.
    Boolean(bool),
    /// Luau's 64-bit integer type.
    Integer(i64),
    /// Luau's number type (an f64).
    Number(f64),
    /// A string: any bytes, NULs and invalid UTF-8 included.
    String(Bytes),
    /// A Luau vector.
    Vector([f32; 3]),
    /// A copy of a Luau buffer's bytes.
    Buffer(Bytes),
    /// A table whose keys are exactly `1..n`, `n >= 1`, in order.
    List(Vec<Message>),
    /// Any other table, including the empty one.
    Map(Vec<(MapKey, Message)>),
    /// A [`ResourceHandle`] userdata.
    Resource(ResourceHandle),
}

/// A key of a [`Message::Map`]. Luau keeps integer keys and number keys apart, and so does this.
#[derive(Clone, Debug)]
pub enum MapKey {
    /// A Luau integer key.
    Integer(i64),
    /// A Luau number key; never NaN.
    Number(f64),
    /// A string key.
    String(Bytes),
}

impl PartialEq for MapKey {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (MapKey::Integer(a), MapKey::Integer(b)) => a == b,
            (MapKey::Number(a), MapKey::Number(b)) => a.to_bits() == b.to_bits(),
            (MapKey::String(a), MapKey::String(b)) => a == b,
            _ => false,
        }
    }
}

impl MapKey {
    /// A total order used to compare maps regardless of entry order.
    fn sort_key(&self) -> (u8, u64, &[u8]) {
        match self {
            MapKey::Integer(i) => (0, *i as u64, &[]),
            MapKey::Number(n) => (1, n.to_bits(), &[]),
            MapKey::String(s) => (2, 0, s),
        }
    }

    /// The weight this key adds when queued.
    fn weight(&self) -> usize {
        match self {
            MapKey::String(s) => Limits::NODE_WEIGHT.saturating_add(s.len()),
            MapKey::Integer(_) | MapKey::Number(_) => Limits::NODE_WEIGHT,
        }
    }
}

fn maps_equal(a: &[(MapKey, Message)], b: &[(MapKey, Message)]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a == b {
        return true;
    }
    let mut a: Vec<_> = a.iter().collect();
    let mut b: Vec<_> = b.iter().collect();
    a.sort_by(|x, y| x.0.sort_key().cmp(&y.0.sort_key()));
    b.sort_by(|x, y| x.0.sort_key().cmp(&y.0.sort_key()));
    a == b
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        use Message::*;
        match (self, other) {
            (Nil, Nil) => true,
            (Boolean(a), Boolean(b)) => a == b,
            (Integer(a), Integer(b)) => a == b,
            (Number(a), Number(b)) => a.to_bits() == b.to_bits(),
            (String(a), String(b)) => a == b,
            (Vector(a), Vector(b)) => a.map(f32::to_bits) == b.map(f32::to_bits),
            (Buffer(a), Buffer(b)) => a == b,
            (List(a), List(b)) => a == b,
            (Map(a), Map(b)) => maps_equal(a, b),
            // Both are the empty table once they reach Luau.
            (List(l), Map(m)) | (Map(m), List(l)) => l.is_empty() && m.is_empty(),
            (Resource(a), Resource(b)) => a == b,
            _ => false,
        }
    }
}

impl Message {
    /// The bytes this value costs when queued: [`Limits::NODE_WEIGHT`] per node (each value and
    /// each map key), plus the length of every string, buffer and resource kind.
    ///
    /// [`Message::read_within`] counts the same way, so a value read within `n` bytes has a
    /// `queue_weight` of at most `n`.
    ///
    /// ```
    /// use skein::message::Limits;
    /// use skein::Message;
    /// let m = Message::List(vec![Message::String("abc".into()), Message::Integer(1)]);
    /// assert_eq!(m.queue_weight(), 3 * Limits::NODE_WEIGHT + 3);
    /// ```
    pub fn queue_weight(&self) -> usize {
        self.weigh().0
    }

    /// [`queue_weight`](Self::queue_weight), or `None` when a [`ResourceHandle`] is anywhere in
    /// the value: what a shared queue needs, in one walk.
    pub(crate) fn data_weight(&self) -> Option<usize> {
        match self.weigh() {
            (weight, false) => Some(weight),
            (_, true) => None,
        }
    }

    /// The weight, and whether a resource handle is inside.
    fn weigh(&self) -> (usize, bool) {
        let add =
            |(sum, any): (usize, bool), (w, r): (usize, bool)| (sum.saturating_add(w), any | r);
        let (own, resource) = match self {
            Message::String(b) | Message::Buffer(b) => (b.len(), false),
            Message::Resource(h) => (h.kind.len(), true),
            Message::List(items) => items.iter().map(Message::weigh).fold((0, false), add),
            Message::Map(entries) => entries
                .iter()
                .map(|(k, v)| {
                    let (w, r) = v.weigh();
                    (k.weight().saturating_add(w), r)
                })
                .fold((0, false), add),
            Message::Nil
            | Message::Boolean(_)
            | Message::Integer(_)
            | Message::Number(_)
            | Message::Vector(_) => (0, false),
        };
        (Limits::NODE_WEIGHT.saturating_add(own), resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_compare_bit_for_bit() {
        let nan = f64::from_bits(0x7ff8_0000_0000_1234);
        assert_eq!(Message::Number(nan), Message::Number(nan));
        assert_ne!(Message::Number(nan), Message::Number(f64::NAN));
        assert_ne!(Message::Number(0.0), Message::Number(-0.0));
        assert_ne!(
            Message::Vector([0.0, 0.0, 0.0]),
            Message::Vector([-0.0, 0.0, 0.0])
        );
        assert_ne!(MapKey::Number(0.0), MapKey::Number(-0.0));
        assert_ne!(MapKey::Integer(1), MapKey::Number(1.0));
    }

    #[test]
    fn maps_compare_as_sets_and_lists_in_order() {
        let a = Message::Map(vec![
            (MapKey::String("x".into()), Message::Integer(1)),
            (MapKey::Integer(2), Message::Boolean(true)),
        ]);
        let b = Message::Map(vec![
            (MapKey::Integer(2), Message::Boolean(true)),
            (MapKey::String("x".into()), Message::Integer(1)),
        ]);
        let c = Message::Map(vec![
            (MapKey::Integer(2), Message::Boolean(false)),
            (MapKey::String("x".into()), Message::Integer(1)),
        ]);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let l1 = Message::List(vec![Message::Integer(1), Message::Integer(2)]);
        let l2 = Message::List(vec![Message::Integer(2), Message::Integer(1)]);
        assert_ne!(l1, l2);
        assert_eq!(Message::List(vec![]), Message::Map(vec![]));
    }

    #[test]
    fn weight_counts_nodes_keys_and_bytes() {
        let m = Message::Map(vec![
            (
                MapKey::String("key".into()),
                Message::Buffer(vec![0; 10].into()),
            ),
            (
                MapKey::Integer(7),
                Message::Resource(ResourceHandle::new("queue", 1)),
            ),
        ]);
        // map node + 2 keys (one with 3 bytes) + buffer (10 bytes) + resource (5 bytes)
        assert_eq!(m.queue_weight(), 16 + (16 + 3) + (16 + 10) + 16 + (16 + 5));
        assert_eq!(Message::Nil.queue_weight(), 16);
    }
}
