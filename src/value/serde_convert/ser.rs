//! `Serialize` → [`Message`]: a serde `Serializer` that weighs each node as it makes it and
//! refuses past the byte bound or the depth bound before it builds more.

use bytes::Bytes;
use serde::ser::{self, Serialize};

use crate::value::path::Segment;
use crate::value::{ConvertError, ConvertErrorKind, Limits, MapKey, Message};

/// The state of one build: the running weight and the tables open around the current value.
pub(super) struct Builder {
    limit: usize,
    weight: usize,
    depth: usize,
}

impl Builder {
    pub(super) fn new(limit: usize) -> Self {
        Builder {
            limit,
            weight: 0,
            depth: 0,
        }
    }

    /// Adds one node of `bytes` payload, refusing past the limit.
    fn charge(&mut self, bytes: usize) -> Result<(), ConvertError> {
        self.weight = self
            .weight
            .saturating_add(Limits::NODE_WEIGHT)
            .saturating_add(bytes);
        if self.weight > self.limit {
            return Err(ConvertError::new(ConvertErrorKind::TooLarge {
                limit: self.limit,
            }));
        }
        Ok(())
    }

    /// Opens a table (charging its node), refusing one level past [`Limits::MAX_DEPTH`].
    fn open(&mut self) -> Result<(), ConvertError> {
        if self.depth >= Limits::MAX_DEPTH {
            return Err(ConvertError::new(ConvertErrorKind::TooDeep {
                max_depth: Limits::MAX_DEPTH,
            }));
        }
        self.charge(0)?;
        self.depth += 1;
        Ok(())
    }

    fn close(&mut self) {
        self.depth -= 1;
    }

    fn scalar(&mut self, message: Message) -> Result<Message, ConvertError> {
        self.charge(0)?;
        Ok(message)
    }

    fn key(&mut self, key: MapKey) -> Result<MapKey, ConvertError> {
        let bytes = match &key {
            MapKey::String(s) => s.len(),
            MapKey::Integer(_) | MapKey::Number(_) => 0,
        };
        self.charge(bytes)?;
        Ok(key)
    }

    /// `{ [variant] = value }`, the form of a variant with data: opens the outer table.
    fn open_variant(&mut self, variant: &'static str) -> Result<MapKey, ConvertError> {
        self.open()?;
        self.key(MapKey::from(variant))
    }
}

impl<'a> ser::Serializer for &'a mut Builder {
    type Ok = Message;
    type Error = ConvertError;
    type SerializeSeq = ListBuilder<'a>;
    type SerializeTuple = ListBuilder<'a>;
    type SerializeTupleStruct = ListBuilder<'a>;
    type SerializeTupleVariant = ListBuilder<'a>;
    type SerializeMap = MapBuilder<'a>;
    type SerializeStruct = MapBuilder<'a>;
    type SerializeStructVariant = MapBuilder<'a>;

    fn serialize_bool(self, v: bool) -> Result<Message, ConvertError> {
        self.scalar(Message::Boolean(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<Message, ConvertError> {
        let m = Message::try_from(v)?;
        self.scalar(m)
    }
    fn serialize_u8(self, v: u8) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<Message, ConvertError> {
        let m = Message::try_from(v)?;
        self.scalar(m)
    }
    fn serialize_u128(self, v: u128) -> Result<Message, ConvertError> {
        let m = Message::try_from(v)?;
        self.scalar(m)
    }
    fn serialize_f32(self, v: f32) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<Message, ConvertError> {
        self.scalar(Message::from(v))
    }
    fn serialize_char(self, v: char) -> Result<Message, ConvertError> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Message, ConvertError> {
        self.charge(v.len())?;
        Ok(Message::from(v))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Message, ConvertError> {
        self.charge(v.len())?;
        Ok(Message::Buffer(Bytes::copy_from_slice(v)))
    }
    fn serialize_none(self) -> Result<Message, ConvertError> {
        self.scalar(Message::Nil)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Message, ConvertError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Message, ConvertError> {
        self.scalar(Message::Nil)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Message, ConvertError> {
        self.scalar(Message::Nil)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Message, ConvertError> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Message, ConvertError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Message, ConvertError> {
        let key = self.open_variant(variant)?;
        let inner = value
            .serialize(&mut *self)
            .map_err(|e| e.at(Segment::key(&key)))?;
        self.close();
        Ok(Message::Map(vec![(key, inner)]))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<ListBuilder<'a>, ConvertError> {
        ListBuilder::open(self, None, len)
    }
    fn serialize_tuple(self, len: usize) -> Result<ListBuilder<'a>, ConvertError> {
        ListBuilder::open(self, None, Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<ListBuilder<'a>, ConvertError> {
        ListBuilder::open(self, None, Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<ListBuilder<'a>, ConvertError> {
        let key = self.open_variant(variant)?;
        ListBuilder::open(self, Some(key), Some(len))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<MapBuilder<'a>, ConvertError> {
        MapBuilder::open(self, None)
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<MapBuilder<'a>, ConvertError> {
        MapBuilder::open(self, None)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<MapBuilder<'a>, ConvertError> {
        let key = self.open_variant(variant)?;
        MapBuilder::open(self, Some(key))
    }
}

/// Wraps `inner` in the variant's outer table when there is one, closing it.
fn finish(builder: &mut Builder, variant: Option<MapKey>, inner: Message) -> Message {
    builder.close();
    match variant {
        Some(key) => {
            builder.close();
            Message::Map(vec![(key, inner)])
        }
        None => inner,
    }
}

/// A list being built.
pub(super) struct ListBuilder<'a> {
    builder: &'a mut Builder,
    variant: Option<MapKey>,
    items: Vec<Message>,
}

impl<'a> ListBuilder<'a> {
    fn open(
        builder: &'a mut Builder,
        variant: Option<MapKey>,
        len: Option<usize>,
    ) -> Result<Self, ConvertError> {
        builder.open()?;
        // A length hint is the caller's word, not a weighed fact: reserve no more than the
        // bound could hold.
        let most = builder.limit / Limits::NODE_WEIGHT;
        Ok(ListBuilder {
            builder,
            variant,
            items: Vec::with_capacity(len.unwrap_or(0).min(most).min(1024)),
        })
    }

    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ConvertError> {
        let at = self.items.len();
        let item = value.serialize(&mut *self.builder).map_err(|e| {
            let e = e.at(Segment::position(at));
            match &self.variant {
                Some(key) => e.at(Segment::key(key)),
                None => e,
            }
        })?;
        self.items.push(item);
        Ok(())
    }

    fn end(self) -> Message {
        finish(self.builder, self.variant, Message::List(self.items))
    }
}

/// The four list-shaped compounds all push an item and end with the list.
macro_rules! list_compound {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for ListBuilder<'_> {
            type Ok = Message;
            type Error = ConvertError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ConvertError> {
                self.push(value)
            }
            fn end(self) -> Result<Message, ConvertError> {
                Ok(ListBuilder::end(self))
            }
        }
    )*};
}
list_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// A map being built.
pub(super) struct MapBuilder<'a> {
    builder: &'a mut Builder,
    variant: Option<MapKey>,
    entries: Vec<(MapKey, Message)>,
    key: Option<MapKey>,
}

impl<'a> MapBuilder<'a> {
    fn open(builder: &'a mut Builder, variant: Option<MapKey>) -> Result<Self, ConvertError> {
        builder.open()?;
        Ok(MapBuilder {
            builder,
            variant,
            entries: Vec::new(),
            key: None,
        })
    }

    fn value<T: Serialize + ?Sized>(&mut self, key: MapKey, value: &T) -> Result<(), ConvertError> {
        let key = self.builder.key(key)?;
        let value = value.serialize(&mut *self.builder).map_err(|e| {
            let e = e.at(Segment::key(&key));
            match &self.variant {
                Some(outer) => e.at(Segment::key(outer)),
                None => e,
            }
        })?;
        // A Luau table holds no nil: the entry is left out, as Luau would leave it.
        if !value.is_nil() {
            self.entries.push((key, value));
        }
        Ok(())
    }

    fn end(self) -> Message {
        finish(self.builder, self.variant, Message::Map(self.entries))
    }
}

impl ser::SerializeMap for MapBuilder<'_> {
    type Ok = Message;
    type Error = ConvertError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), ConvertError> {
        let left = self.builder.limit.saturating_sub(self.builder.weight);
        let key = match key.serialize(&mut Builder::new(left))? {
            Message::String(s) => MapKey::String(s),
            Message::Integer(i) => MapKey::Integer(i),
            Message::Number(n) if !n.is_nan() => MapKey::Number(n),
            other => {
                return Err(ConvertError::mismatch(
                    "a map key that is a string or a number (not NaN)",
                    &other,
                ))
            }
        };
        self.key = Some(key);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ConvertError> {
        let key = self.key.take().ok_or_else(|| {
            ConvertError::new(ConvertErrorKind::Custom(
                "serialize_value called before serialize_key".to_owned(),
            ))
        })?;
        self.value(key, value)
    }
    fn end(self) -> Result<Message, ConvertError> {
        Ok(MapBuilder::end(self))
    }
}

/// A struct and a struct variant both add named fields and end with the map.
macro_rules! struct_compound {
    ($($trait:ident),*) => {$(
        impl ser::$trait for MapBuilder<'_> {
            type Ok = Message;
            type Error = ConvertError;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), ConvertError> {
                self.value(MapKey::from(key), value)
            }
            fn end(self) -> Result<Message, ConvertError> {
                Ok(MapBuilder::end(self))
            }
        }
    )*};
}
struct_compound!(SerializeStruct, SerializeStructVariant);
