//! `ResourceHandle`: the one userdata that may cross a boundary, because it is only a name for a
//! native resource (a shared buffer, a queue) and carries no Luau state.

use std::fmt;

use bytes::Bytes;
use mlua::{MetaMethod, UserData, UserDataFields, UserDataMethods, Value};

/// The largest id Luau's number type holds exactly (2^53).
const MAX_EXACT_ID: u64 = 1 << 53;

/// A handle to a native resource that Skein owns, by kind and id.
///
/// It is plain data: copying it across a boundary copies the name, not the resource. In Luau it
/// is a userdata with read-only fields `kind` and `id`, `tostring` support and `==` by value.
///
/// ```
/// use mlua::Lua;
/// use skein::message::ResourceHandle;
///
/// let lua = Lua::new();
/// let handle = ResourceHandle::new("buffer", 7);
/// lua.globals().set("h", handle.clone()).unwrap();
/// lua.globals().set("same", handle).unwrap();
/// let text: String = lua.load("return h.kind .. ' ' .. h.id .. ' ' .. tostring(h == same)").eval().unwrap();
/// assert_eq!(text, "buffer 7 true");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceHandle {
    /// A short name of what the handle refers to, like `buffer`.
    pub kind: Bytes,
    /// Which one of that kind.
    pub id: u64,
}

impl ResourceHandle {
    /// A handle to resource `id` of `kind`.
    pub fn new(kind: impl Into<Bytes>, id: u64) -> Self {
        ResourceHandle {
            kind: kind.into(),
            id,
        }
    }
}

impl fmt::Display for ResourceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResourceHandle({}#{})",
            String::from_utf8_lossy(&self.kind),
            self.id
        )
    }
}

impl UserData for ResourceHandle {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("kind", |lua, this| lua.create_string(&this.kind));
        fields.add_field_method_get("id", |_, this| {
            // A Luau number is an f64: refuse an id it can't hold rather than round it.
            if this.id > MAX_EXACT_ID {
                return Err(mlua::Error::runtime(format!(
                    "resource id {} is too large for a Luau number",
                    this.id
                )));
            }
            Ok(this.id as f64)
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::ToString, |_, this, ()| Ok(this.to_string()));
        methods.add_meta_method(MetaMethod::Eq, |_, this, other: Value| {
            Ok(match other {
                Value::UserData(ud) => ud
                    .borrow::<ResourceHandle>()
                    .is_ok_and(|other| *this == *other),
                _ => false,
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    #[test]
    fn fields_tostring_and_equality() {
        let lua = Lua::new();
        lua.globals()
            .set("a", ResourceHandle::new("queue", 3))
            .unwrap();
        lua.globals()
            .set("b", ResourceHandle::new("queue", 4))
            .unwrap();
        let (kind, id, text, eq): (String, f64, String, bool) = lua
            .load("return a.kind, a.id, tostring(a), a == b")
            .eval()
            .unwrap();
        assert_eq!(
            (kind.as_str(), id, text.as_str(), eq),
            ("queue", 3.0, "ResourceHandle(queue#3)", false)
        );
    }

    #[test]
    fn an_id_past_two_to_the_53_is_refused_not_rounded() {
        let lua = Lua::new();
        lua.globals()
            .set("h", ResourceHandle::new("buffer", (1 << 53) + 1))
            .unwrap();
        let err = lua.load("return h.id").exec().unwrap_err();
        assert!(
            err.to_string()
                .contains("resource id 9007199254740993 is too large for a Luau number"),
            "{err}"
        );
    }
}
