//! [`Message`] → `Deserialize`: a serde `Deserializer` over a borrowed message, which lends its
//! strings and bytes where the target borrows them and names the path of a value that does not
//! fit.

use serde::de::value::F32Deserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use crate::value::path::Segment;
use crate::value::{ConvertError, MapKey, Message};

/// A message being read.
pub(super) struct Reader<'de>(pub(super) &'de Message);

/// The whole number a value or key holds, wide enough for `u64` and `i64` alike.
fn whole(m: &Message) -> Option<i128> {
    match *m {
        Message::Integer(i) => Some(i128::from(i)),
        Message::Number(n) if n.fract() == 0.0 && n.abs() < 18_446_744_073_709_551_616.0 => {
            Some(n as i128)
        }
        _ => None,
    }
}

/// Visits a whole number as the widest form serde's integer visitors all accept.
fn visit_whole<'de, V: Visitor<'de>>(i: i128, visitor: V) -> Result<V::Value, ConvertError> {
    match (i64::try_from(i), u64::try_from(i)) {
        (Ok(i), _) => visitor.visit_i64(i),
        (_, Ok(u)) => visitor.visit_u64(u),
        _ => visitor.visit_i128(i),
    }
}

/// The deserializer methods for integers: a whole number of either form, anything else as it
/// is (so the visitor words the mismatch).
macro_rules! integers {
    () => {
        integers!(
            deserialize_i8,
            deserialize_i16,
            deserialize_i32,
            deserialize_i64,
            deserialize_i128,
            deserialize_u8,
            deserialize_u16,
            deserialize_u32,
            deserialize_u64,
            deserialize_u128
        );
    };
    ($($method:ident),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
            match Whole::whole(self.0) {
                Some(i) => visit_whole(i, visitor),
                None => self.deserialize_any(visitor),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Reader<'de> {
    type Error = ConvertError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        match self.0 {
            Message::Nil => visitor.visit_unit(),
            Message::Boolean(b) => visitor.visit_bool(*b),
            Message::Integer(i) => visitor.visit_i64(*i),
            Message::Number(n) => visitor.visit_f64(*n),
            Message::String(s) => match std::str::from_utf8(s) {
                Ok(text) => visitor.visit_borrowed_str(text),
                Err(_) => visitor.visit_borrowed_bytes(s),
            },
            Message::Buffer(b) => visitor.visit_borrowed_bytes(b),
            Message::Vector(v) => visitor.visit_seq(VectorAccess { v: *v, at: 0 }),
            Message::List(items) => visitor.visit_seq(ListAccess { items, at: 0 }),
            Message::Map(entries) => visitor.visit_map(MapAccess {
                entries,
                at: 0,
                list: None,
            }),
            Message::Resource(_) => Err(ConvertError::mismatch("plain data", self.0)),
        }
    }

    integers!();

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        match self.0.as_f64() {
            Some(n) => visitor.visit_f64(n),
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        match self.0 {
            Message::Nil => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        match self.0 {
            Message::Map(entries) if entries.is_empty() => {
                visitor.visit_seq(ListAccess { items: &[], at: 0 })
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        match self.0 {
            Message::List(items) => visitor.visit_map(MapAccess {
                entries: &[],
                at: 0,
                list: Some(items),
            }),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        match self.0 {
            Message::String(_) => visitor.visit_enum(VariantAccess {
                name: self.0,
                value: None,
            }),
            Message::Map(entries) => match entries.as_slice() {
                [(MapKey::String(_), value)] => {
                    let (key, _) = &entries[0];
                    visitor.visit_enum(VariantAccess {
                        name: KeyRef(key),
                        value: Some(value),
                    })
                }
                _ => Err(ConvertError::mismatch(
                    "an enum: a variant's name, or a table of one entry under it",
                    self.0,
                )),
            },
            _ => Err(ConvertError::mismatch(
                "an enum: a variant's name, or a table of one entry under it",
                self.0,
            )),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool char str string bytes byte_buf unit unit_struct identifier
    }
}

/// A map key, read as the value it is.
#[derive(Clone, Copy)]
struct KeyRef<'de>(&'de MapKey);

impl<'de> de::Deserializer<'de> for KeyRef<'de> {
    type Error = ConvertError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ConvertError> {
        match self.0 {
            MapKey::String(s) => match std::str::from_utf8(s) {
                Ok(text) => visitor.visit_borrowed_str(text),
                Err(_) => visitor.visit_borrowed_bytes(s),
            },
            MapKey::Integer(i) => visitor.visit_i64(*i),
            MapKey::Number(n) => visitor.visit_f64(*n),
        }
    }

    integers!();

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        visitor.visit_enum(KeyVariant(self))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool f32 f64 char str string bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

impl KeyRef<'_> {
    /// The message this key stands for, to name it in an error.
    fn as_message(self) -> Message {
        Message::from(self.0.clone())
    }
}

/// The whole number a value or a key holds: what `integers!` reads.
trait Whole {
    fn whole(&self) -> Option<i128>;
}

impl Whole for MapKey {
    fn whole(&self) -> Option<i128> {
        match *self {
            MapKey::Integer(i) => Some(i128::from(i)),
            MapKey::Number(n) => whole(&Message::Number(n)),
            MapKey::String(_) => None,
        }
    }
}

impl Whole for Message {
    fn whole(&self) -> Option<i128> {
        whole(self)
    }
}

/// The items of a list, each named by its position when it does not fit.
struct ListAccess<'de> {
    items: &'de [Message],
    at: usize,
}

impl<'de> de::SeqAccess<'de> for ListAccess<'de> {
    type Error = ConvertError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ConvertError> {
        let Some(item) = self.items.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        seed.deserialize(Reader(item))
            .map(Some)
            .map_err(|e| e.at(Segment::Index(self.at as i64)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len() - self.at)
    }
}

/// A vector's three components, as a sequence of `f32`.
struct VectorAccess {
    v: [f32; 3],
    at: usize,
}

impl<'de> de::SeqAccess<'de> for VectorAccess {
    type Error = ConvertError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ConvertError> {
        let Some(&c) = self.v.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        let component: F32Deserializer<ConvertError> = c.into_deserializer();
        seed.deserialize(component).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(3 - self.at)
    }
}

/// A map's entries, or a list's read as a map with the keys `1..=n`.
struct MapAccess<'de> {
    entries: &'de [(MapKey, Message)],
    at: usize,
    list: Option<&'de [Message]>,
}

impl<'de> de::MapAccess<'de> for MapAccess<'de> {
    type Error = ConvertError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ConvertError> {
        if let Some(items) = self.list {
            if self.at >= items.len() {
                return Ok(None);
            }
            let position = (self.at + 1) as u64;
            return seed.deserialize(position.into_deserializer()).map(Some);
        }
        let Some((key, _)) = self.entries.get(self.at) else {
            return Ok(None);
        };
        seed.deserialize(KeyRef(key)).map(Some).map_err(|e| {
            let named = KeyRef(key).as_message().describe();
            e.at(Segment::Described(format!("key {named}")))
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ConvertError> {
        let at = self.at;
        self.at += 1;
        if let Some(items) = self.list {
            let item = items.get(at).unwrap_or(&Message::Nil);
            return seed
                .deserialize(Reader(item))
                .map_err(|e| e.at(Segment::Index(at as i64 + 1)));
        }
        match self.entries.get(at) {
            Some((key, value)) => seed
                .deserialize(Reader(value))
                .map_err(|e| e.at(Segment::key(key))),
            None => seed.deserialize(Reader(&Message::Nil)),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.list.map_or(self.entries.len(), <[_]>::len) - self.at)
    }
}

/// An enum read from a variant's name, with the value under it when it has one.
struct VariantAccess<'de, N> {
    name: N,
    value: Option<&'de Message>,
}

impl<'de> de::EnumAccess<'de> for VariantAccess<'de, &'de Message> {
    type Error = ConvertError;
    type Variant = UnitOnly;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, UnitOnly), ConvertError> {
        seed.deserialize(Reader(self.name)).map(|v| (v, UnitOnly))
    }
}

impl<'de> de::EnumAccess<'de> for VariantAccess<'de, KeyRef<'de>> {
    type Error = ConvertError;
    type Variant = Reader<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Reader<'de>), ConvertError> {
        let value = self.value.unwrap_or(&Message::Nil);
        seed.deserialize(self.name).map(|v| (v, Reader(value)))
    }
}

/// A variant with data given by its name alone.
#[cold]
fn named_only() -> ConvertError {
    de::Error::invalid_type(
        de::Unexpected::UnitVariant,
        &"a table of one entry under the variant's name",
    )
}

/// A variant given by name alone: a unit variant.
struct UnitOnly;

impl<'de> de::VariantAccess<'de> for UnitOnly {
    type Error = ConvertError;

    fn unit_variant(self) -> Result<(), ConvertError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        _seed: T,
    ) -> Result<T::Value, ConvertError> {
        Err(named_only())
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, ConvertError> {
        Err(named_only())
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ConvertError> {
        Err(named_only())
    }
}

/// The value under a variant's name.
impl<'de> de::VariantAccess<'de> for Reader<'de> {
    type Error = ConvertError;

    fn unit_variant(self) -> Result<(), ConvertError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, ConvertError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ConvertError> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

/// A key used as an enum (a map keyed by a unit enum): its name is the variant.
struct KeyVariant<'de>(KeyRef<'de>);

impl<'de> de::EnumAccess<'de> for KeyVariant<'de> {
    type Error = ConvertError;
    type Variant = UnitOnly;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, UnitOnly), ConvertError> {
        seed.deserialize(self.0).map(|v| (v, UnitOnly))
    }
}
