//! A compact, versioned binary form of [`Message`], for queues that leave the process and for
//! fuzzing the invariants.
//!
//! Layout: one version byte ([`Limits::CODEC_VERSION`]), then one value. A value is a tag byte
//! followed by its payload: integers as zigzag LEB128 varints, floats as little-endian IEEE
//! bits, strings, buffers and resource kinds as a varint length and the bytes, lists as a varint
//! count (at least 1) and the items, maps as a varint count and key/value pairs. A map key is a
//! tag (integer, number or string, the value tags) and its payload.
//!
//! Decoding trusts nothing: every length is checked against the bytes left *and* against the
//! byte budget before anything is allocated, nesting is bounded by [`Limits::MAX_DEPTH`], and
//! only canonical forms are accepted (minimal varints, no empty list, no NaN or duplicate map
//! keys), so `decode(encode(m)) == m` and one value has one encoding up to map order.

use bytes::Bytes;

use super::{DecodeError, DecodeErrorKind, Limits, MapKey, Message, ResourceHandle};

/// Value tags. Map keys reuse `INTEGER`, `NUMBER` and `STRING`.
mod tag {
    pub(super) const NIL: u8 = 0;
    pub(super) const FALSE: u8 = 1;
    pub(super) const TRUE: u8 = 2;
    pub(super) const INTEGER: u8 = 3;
    pub(super) const NUMBER: u8 = 4;
    pub(super) const STRING: u8 = 5;
    pub(super) const VECTOR: u8 = 6;
    pub(super) const BUFFER: u8 = 7;
    pub(super) const LIST: u8 = 8;
    pub(super) const MAP: u8 = 9;
    pub(super) const RESOURCE: u8 = 10;
}

/// A varint never needs more than this many bytes for a `u64`.
const MAX_VARINT_BYTES: usize = 10;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(i: i64) -> u64 {
    ((i << 1) ^ (i >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

impl Message {
    /// Appends the encoded form of this message to `out`.
    ///
    /// ```
    /// use skein::Message;
    /// let mut out = Vec::new();
    /// Message::Integer(-1).encode(&mut out);
    /// assert_eq!(out, [1, 3, 1]);
    /// ```
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(Limits::CODEC_VERSION);
        self.encode_value(out);
    }

    /// The encoded form of this message.
    ///
    /// ```
    /// use skein::Message;
    /// let m = Message::List(vec![Message::String("hi".into()), Message::Nil]);
    /// assert_eq!(Message::decode(&m.to_bytes(), 1024).unwrap(), m);
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    fn encode_value(&self, out: &mut Vec<u8>) {
        match self {
            Message::Nil => out.push(tag::NIL),
            Message::Boolean(false) => out.push(tag::FALSE),
            Message::Boolean(true) => out.push(tag::TRUE),
            Message::Integer(i) => {
                out.push(tag::INTEGER);
                put_varint(out, zigzag(*i));
            }
            Message::Number(n) => {
                out.push(tag::NUMBER);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Message::String(s) => {
                out.push(tag::STRING);
                put_bytes(out, s);
            }
            Message::Vector(v) => {
                out.push(tag::VECTOR);
                for c in v {
                    out.extend_from_slice(&c.to_le_bytes());
                }
            }
            Message::Buffer(b) => {
                out.push(tag::BUFFER);
                put_bytes(out, b);
            }
            // The empty table has one canonical form, the empty map.
            Message::List(items) if items.is_empty() => {
                out.push(tag::MAP);
                put_varint(out, 0);
            }
            Message::List(items) => {
                out.push(tag::LIST);
                put_varint(out, items.len() as u64);
                for item in items {
                    item.encode_value(out);
                }
            }
            Message::Map(entries) => {
                out.push(tag::MAP);
                put_varint(out, entries.len() as u64);
                for (key, value) in entries {
                    match key {
                        MapKey::Integer(i) => {
                            out.push(tag::INTEGER);
                            put_varint(out, zigzag(*i));
                        }
                        MapKey::Number(n) => {
                            out.push(tag::NUMBER);
                            out.extend_from_slice(&n.to_le_bytes());
                        }
                        MapKey::String(s) => {
                            out.push(tag::STRING);
                            put_bytes(out, s);
                        }
                    }
                    value.encode_value(out);
                }
            }
            Message::Resource(handle) => {
                out.push(tag::RESOURCE);
                put_bytes(out, &handle.kind);
                put_varint(out, handle.id);
            }
        }
    }

    /// Decodes a message encoded by [`Message::encode`], allocating at most about `limit` bytes
    /// of [`queue_weight`](Message::queue_weight).
    ///
    /// # Errors
    /// A [`DecodeError`] with the byte offset and what was wrong: a cut-off input, an unknown
    /// version or tag, an overlong varint, a length past the input or the limit, nesting deeper
    /// than [`Limits::MAX_DEPTH`], a NaN or repeated map key, a non-canonical form, or bytes left
    /// after the value.
    ///
    /// ```
    /// use skein::message::DecodeErrorKind;
    /// use skein::Message;
    /// let bytes = Message::String("hello".into()).to_bytes();
    /// assert_eq!(Message::decode(&bytes, 21).unwrap(), Message::String("hello".into()));
    /// assert_eq!(Message::decode(&bytes, 20).unwrap_err().kind, DecodeErrorKind::OverLimit { limit: 20 });
    /// ```
    pub fn decode(bytes: &[u8], limit: usize) -> Result<Message, DecodeError> {
        let mut decoder = Decoder {
            input: bytes,
            pos: 0,
            limit,
            weight: 0,
        };
        let version = decoder.byte()?;
        if version != Limits::CODEC_VERSION {
            return Err(decoder.error_at(0, DecodeErrorKind::UnknownVersion(version)));
        }
        let message = decoder.value(0)?;
        if decoder.pos != bytes.len() {
            return Err(decoder.error_at(decoder.pos, DecodeErrorKind::TrailingBytes));
        }
        Ok(message)
    }
}

struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
    limit: usize,
    weight: usize,
}

impl Decoder<'_> {
    #[cold]
    fn error_at(&self, offset: usize, kind: DecodeErrorKind) -> DecodeError {
        DecodeError { offset, kind }
    }

    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .input
            .get(self.pos)
            .ok_or_else(|| self.error_at(self.pos, DecodeErrorKind::Truncated))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.error_at(self.pos, DecodeErrorKind::Truncated));
        }
        let slice = &self.input[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for i in 0..MAX_VARINT_BYTES {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if i == MAX_VARINT_BYTES - 1 && b > 1 {
                return Err(self.error_at(start, DecodeErrorKind::VarintOverflow));
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    return Err(self.error_at(start, DecodeErrorKind::NonMinimalVarint));
                }
                return Ok(value);
            }
        }
        Err(self.error_at(start, DecodeErrorKind::VarintOverflow))
    }

    /// A varint used as a count or length, which must fit in the input left: each counted item
    /// takes at least `min_item_bytes`.
    fn count(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let start = self.pos;
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(min_item_bytes) <= self.remaining() => Ok(n),
            _ => Err(self.error_at(start, DecodeErrorKind::Truncated)),
        }
    }

    /// Adds a node of `bytes` payload to the budget before anything is allocated for it.
    fn charge(&mut self, offset: usize, bytes: usize) -> Result<(), DecodeError> {
        self.weight = self
            .weight
            .saturating_add(Limits::NODE_WEIGHT)
            .saturating_add(bytes);
        if self.weight > self.limit {
            return Err(self.error_at(offset, DecodeErrorKind::OverLimit { limit: self.limit }));
        }
        Ok(())
    }

    fn bytes(&mut self, offset: usize) -> Result<Bytes, DecodeError> {
        let len = self.count(1)?;
        self.charge(offset, len)?;
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }

    /// How many nodes the budget still has room for: caps up-front reservations.
    fn room(&self) -> usize {
        (self.limit.saturating_sub(self.weight) / Limits::NODE_WEIGHT).saturating_add(1)
    }

    fn value(&mut self, depth: usize) -> Result<Message, DecodeError> {
        let start = self.pos;
        let tag = self.byte()?;
        Ok(match tag {
            tag::NIL | tag::FALSE | tag::TRUE | tag::INTEGER | tag::NUMBER | tag::VECTOR => {
                self.charge(start, 0)?;
                match tag {
                    tag::NIL => Message::Nil,
                    tag::FALSE => Message::Boolean(false),
                    tag::TRUE => Message::Boolean(true),
                    tag::INTEGER => Message::Integer(unzigzag(self.varint()?)),
                    tag::NUMBER => Message::Number(f64::from_le_bytes(self.array()?)),
                    _ => {
                        let raw: [u8; 12] = self.array()?;
                        let c = |i: usize| {
                            f32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]])
                        };
                        Message::Vector([c(0), c(4), c(8)])
                    }
                }
            }
            tag::STRING => Message::String(self.bytes(start)?),
            tag::BUFFER => Message::Buffer(self.bytes(start)?),
            tag::RESOURCE => {
                let kind = self.bytes(start)?;
                let id = self.varint()?;
                Message::Resource(ResourceHandle { kind, id })
            }
            tag::LIST => {
                self.enter(start, depth)?;
                let n = self.count(1)?;
                if n == 0 {
                    return Err(self.error_at(start, DecodeErrorKind::NonCanonical("empty list")));
                }
                let mut items = Vec::with_capacity(n.min(self.room()));
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Message::List(items)
            }
            tag::MAP => {
                self.enter(start, depth)?;
                let n = self.count(2)?;
                let mut entries = Vec::with_capacity(n.min(self.room()));
                for _ in 0..n {
                    let key = self.key()?;
                    let value = self.value(depth + 1)?;
                    entries.push((key, value));
                }
                self.check_unique(start, &entries)?;
                Message::Map(entries)
            }
            other => return Err(self.error_at(start, DecodeErrorKind::UnknownTag(other))),
        })
    }

    /// Enters a table at `depth` (0 for the outermost), charging its node.
    fn enter(&mut self, start: usize, depth: usize) -> Result<(), DecodeError> {
        if depth >= Limits::MAX_DEPTH {
            return Err(self.error_at(start, DecodeErrorKind::TooDeep));
        }
        self.charge(start, 0)
    }

    fn key(&mut self) -> Result<MapKey, DecodeError> {
        let start = self.pos;
        let tag = self.byte()?;
        match tag {
            tag::INTEGER => {
                self.charge(start, 0)?;
                Ok(MapKey::Integer(unzigzag(self.varint()?)))
            }
            tag::NUMBER => {
                self.charge(start, 0)?;
                let n = f64::from_le_bytes(self.array()?);
                if n.is_nan() {
                    return Err(self.error_at(start, DecodeErrorKind::NanKey));
                }
                Ok(MapKey::Number(n))
            }
            tag::STRING => Ok(MapKey::String(self.bytes(start)?)),
            other => Err(self.error_at(start, DecodeErrorKind::UnknownKeyTag(other))),
        }
    }

    /// Refuses a map with two equal keys (Luau treats `0` and `-0` as one key).
    fn check_unique(&self, start: usize, entries: &[(MapKey, Message)]) -> Result<(), DecodeError> {
        if entries.len() < 2 {
            return Ok(());
        }
        let mut keys: Vec<(u8, u64, &[u8])> = entries
            .iter()
            .map(|(k, _)| match k {
                MapKey::Integer(i) => (0, *i as u64, &[][..]),
                MapKey::Number(n) if *n == 0.0 => (1, 0, &[][..]),
                MapKey::Number(n) => (1, n.to_bits(), &[][..]),
                MapKey::String(s) => (2, 0, &s[..]),
            })
            .collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.error_at(start, DecodeErrorKind::DuplicateKey));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_minimal_and_bounded() {
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut d = Decoder {
                input: &out,
                pos: 0,
                limit: 0,
                weight: 0,
            };
            assert_eq!(d.varint().unwrap(), v);
            assert_eq!(d.pos, out.len());
        }
        let mut d = Decoder {
            input: &[0x80, 0x00],
            pos: 0,
            limit: 0,
            weight: 0,
        };
        assert_eq!(
            d.varint().unwrap_err().kind,
            DecodeErrorKind::NonMinimalVarint
        );
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        let mut d = Decoder {
            input: &overflow,
            pos: 0,
            limit: 0,
            weight: 0,
        };
        assert_eq!(
            d.varint().unwrap_err().kind,
            DecodeErrorKind::VarintOverflow
        );
        for i in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(i)), i);
        }
    }

    #[test]
    fn canonical_forms_only() {
        // An empty list is written as the empty map, and refused when met as a list.
        assert_eq!(Message::List(vec![]).to_bytes(), [1, tag::MAP, 0]);
        let err = Message::decode(&[1, tag::LIST, 0], 100).unwrap_err();
        assert_eq!(
            (err.offset, err.kind),
            (1, DecodeErrorKind::NonCanonical("empty list"))
        );
        let dup = Message::Map(vec![
            (MapKey::Number(0.0), Message::Nil),
            (MapKey::Number(-0.0), Message::Nil),
        ]);
        assert_eq!(
            Message::decode(&dup.to_bytes(), 1000).unwrap_err().kind,
            DecodeErrorKind::DuplicateKey
        );
        let distinct = Message::Map(vec![
            (MapKey::Number(1.0), Message::Nil),
            (MapKey::Integer(1), Message::Nil),
        ]);
        assert_eq!(
            Message::decode(&distinct.to_bytes(), 1000).unwrap(),
            distinct
        );
        assert_eq!(
            Message::decode(&[1, tag::MAP, 1, 7, 0], 1000).unwrap_err(),
            DecodeError {
                offset: 3,
                kind: DecodeErrorKind::UnknownKeyTag(7)
            }
        );
    }

    #[test]
    fn a_huge_claimed_count_allocates_nothing() {
        // A list that claims u32::MAX items in 8 bytes of input is refused as truncated.
        let mut bytes = vec![1, tag::LIST];
        put_varint(&mut bytes, u64::from(u32::MAX));
        let err = Message::decode(&bytes, usize::MAX).unwrap_err();
        assert_eq!((err.offset, err.kind), (2, DecodeErrorKind::Truncated));
    }
}
