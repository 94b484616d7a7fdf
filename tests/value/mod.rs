//! `Message`: conversion to and from Luau, refusals with their paths, limits, and the codec.

use mlua::{Function, Lua, Value};
use skein::message::{DecodeErrorKind, Limits, ResourceHandle, TransferErrorKind};
use skein::{MapKey, Message};

const BOUNDARY: &str = "can't cross a worker or event boundary";

fn eval(lua: &Lua, code: &str) -> Value {
    lua.load(code)
        .eval()
        .unwrap_or_else(|e| panic!("{code}: {e}"))
}

fn refusal(code: &str) -> String {
    let lua = Lua::new();
    lua.globals()
        .set("handle", ResourceHandle::new("buffer", 1))
        .unwrap();
    let value = eval(&lua, code);
    Message::from_lua(&value, "message")
        .expect_err(code)
        .to_string()
}

/// Luau → Message → a fresh VM → Message, through the exact stack path (function argument and
/// result), which keeps integers and numbers apart even at the top level.
fn round_trip_exact(message: &Message) -> Message {
    let lua = Lua::new();
    let identity: Function = lua.load("function(x) return x end").eval().unwrap();
    identity.call::<Message>(message).unwrap()
}

/// Builds `code` in one VM, reads it, rebuilds it in another VM through `to_lua`, reads it again.
fn luau_round_trip(code: &str) -> Message {
    let lua = Lua::new();
    let first = Message::from_lua(&eval(&lua, code), "message").unwrap();
    let other = Lua::new();
    let rebuilt = first.to_lua(&other).unwrap();
    let second = Message::from_lua(&rebuilt, "message").unwrap();
    assert_eq!(first, second, "{code}");
    assert_eq!(round_trip_exact(&first), first, "{code}");
    first
}

fn s(text: &str) -> Message {
    Message::String(text.as_bytes().to_vec().into())
}

fn key(text: &str) -> MapKey {
    MapKey::String(text.as_bytes().to_vec().into())
}

#[test]
fn each_unsupported_value_is_refused_with_its_path() {
    assert_eq!(
        refusal("{ items = { 1, 2, { callback = function() end } } }"),
        format!("message.items[3].callback: a function {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ co = coroutine.create(function() end) }"),
        format!("message.co: a coroutine {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ list = { newproxy() } }"),
        format!("message.list[1]: a userdata {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ ['weird key'] = setmetatable({}, {}) }"),
        format!("message[\"weird key\"]: a table with a metatable {BOUNDARY}")
    );
    assert_eq!(
        refusal("setmetatable({}, {})"),
        format!("message: a table with a metatable {BOUNDARY}")
    );
    assert_eq!(refusal("print"), format!("message: a function {BOUNDARY}"));
}

#[test]
fn keys_that_are_not_integers_numbers_or_strings_are_refused() {
    assert_eq!(
        refusal("{ x = { [true] = 1 } }"),
        format!("message.x[true]: a boolean key {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ x = { [{}] = 1 } }"),
        format!("message.x[<table key>]: a table key {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ x = { [vector.create(1, 2, 3)] = 1 } }"),
        format!("message.x[<vector key>]: a vector key {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ [print] = 1 }"),
        format!("message[<function key>]: a function key {BOUNDARY}")
    );
    assert_eq!(
        refusal("{ [buffer.create(1)] = 1 }"),
        format!("message[<buffer key>]: a buffer key {BOUNDARY}")
    );
}

#[test]
fn a_nan_key_is_refused() {
    // Luau itself refuses to store a NaN key, so the only NaN key a Message can meet is one
    // built in Rust; building it in Luau is refused, naming it.
    let lua = Lua::new();
    let m = Message::Map(vec![(MapKey::Number(f64::NAN), Message::Integer(1))]);
    let err = m.to_lua(&lua).unwrap_err().to_string();
    assert!(
        err.contains("a NaN map key can't be built in Luau"),
        "{err}"
    );
    let bytes = m.to_bytes();
    assert_eq!(
        Message::decode(&bytes, 1 << 20).unwrap_err().kind,
        DecodeErrorKind::NanKey
    );
    let err = lua.load("local t = {}; t[0/0] = 1").exec().unwrap_err();
    assert!(err.to_string().contains("NaN"), "{err}");
}

#[test]
fn a_cycle_is_refused_but_a_shared_table_is_copied_twice() {
    assert_eq!(
        refusal("local t = {}; t.a = { b = t }; return t"),
        format!("message.a.b: a table that contains itself {BOUNDARY}")
    );
    assert_eq!(
        refusal("local t = {}; t[1] = t; return t"),
        format!("message[1]: a table that contains itself {BOUNDARY}")
    );
    let shared = luau_round_trip("local s = { 1, 2 }; return { a = s, b = s, c = { s } }");
    let pair = Message::List(vec![Message::Number(1.0), Message::Number(2.0)]);
    assert_eq!(
        shared,
        Message::Map(vec![
            (key("a"), pair.clone()),
            (key("b"), pair.clone()),
            (key("c"), Message::List(vec![pair])),
        ])
    );
}

fn nested(depth: usize) -> String {
    format!(
        "return {}{}",
        "{ x = ".repeat(depth - 1) + "{",
        "} ".repeat(depth)
    )
}

#[test]
fn depth_64_crosses_and_65_is_refused() {
    let lua = Lua::new();
    let ok = Message::from_lua(&eval(&lua, &nested(Limits::MAX_DEPTH)), "message").unwrap();
    let mut depth = 0;
    let mut cursor = &ok;
    while let Message::Map(entries) = cursor {
        depth += 1;
        match entries.first() {
            Some((_, inner)) => cursor = inner,
            None => break,
        }
    }
    assert_eq!(depth, 64);
    assert_eq!(round_trip_exact(&ok), ok);

    let err = Message::from_lua(&eval(&lua, &nested(65)), "message").unwrap_err();
    assert_eq!(err.path, format!("message{}", ".x".repeat(64)));
    assert_eq!(err.reason, TransferErrorKind::TooDeep { max_depth: 64 });
    assert_eq!(
        err.to_string(),
        format!(
            "{}: a table nested deeper than 64 tables {BOUNDARY}",
            err.path
        )
    );
}

#[test]
fn read_within_accepts_the_limit_and_refuses_one_byte_past() {
    let lua = Lua::new();
    let value = eval(&lua, "{ name = 'abcd', 1.5 }");
    let message = Message::from_lua(&value, "message").unwrap();
    let weight = message.queue_weight();
    // table + key 1 + 1.5 + key "name" (4) + "abcd" (4)
    assert_eq!(weight, 16 * 5 + 8);
    assert_eq!(
        Message::read_within(&value, "message", weight).unwrap(),
        message
    );
    let err = Message::read_within(&value, "message", weight - 1).unwrap_err();
    assert_eq!(
        err.reason,
        TransferErrorKind::TooLarge { limit: weight - 1 }
    );

    let text = eval(&lua, "string.rep('x', 100)");
    assert!(Message::read_within(&text, "s", 116).is_ok());
    assert_eq!(
        Message::read_within(&text, "s", 115)
            .unwrap_err()
            .to_string(),
        format!("s: a value weighing more than its limit of 115 bytes {BOUNDARY}")
    );
}

#[test]
fn read_within_stops_early_on_a_huge_table() {
    let lua = Lua::new();
    let value = eval(
        &lua,
        "local t = table.create(1000000, 0); for i = 1, 1000000 do t[i] = i end; return t",
    );
    // Room for the table and four numbers: the refusal names the fifth element, so the walk
    // stopped there instead of copying a million entries first.
    let err = Message::read_within(&value, "message", 16 * 5).unwrap_err();
    assert_eq!(err.path, "message[5]");
    // The same holds for a map walk.
    let value = eval(
        &lua,
        "local t = {}; for i = 1, 1000000 do t['k' .. i] = i end; return t",
    );
    let err = Message::read_within(&value, "message", 16 * 10).unwrap_err();
    assert_eq!(err.reason, TransferErrorKind::TooLarge { limit: 160 });
    // A buffer over the limit is refused before it is copied.
    let value = eval(&lua, "buffer.create(1000000)");
    let err = Message::read_within(&value, "message", 1000).unwrap_err();
    assert_eq!(err.path, "message");
    assert_eq!(err.reason, TransferErrorKind::TooLarge { limit: 1000 });
    // And inside a table, by the walk.
    let value = eval(&lua, "{ buffer.create(1000000) }");
    let err = Message::read_within(&value, "message", 1000).unwrap_err();
    assert_eq!(err.path, "message[1]");
    assert_eq!(err.reason, TransferErrorKind::TooLarge { limit: 1000 });
}

#[test]
fn integers_and_numbers_keep_their_types_exactly() {
    let lua = Lua::new();
    let value = eval(
        &lua,
        "{ 0, integer.create(0), integer.create(-1), integer.fromstring('-9223372036854775808'),
           integer.fromstring('9223372036854775807'), integer.fromstring('9007199254740993'),
           -0.0, 0/0, math.huge, -math.huge, 2^53 }",
    );
    let m = Message::from_lua(&value, "message").unwrap();
    let Message::List(items) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(items[0], Message::Number(0.0));
    assert_eq!(items[1], Message::Integer(0));
    assert_eq!(items[2], Message::Integer(-1));
    assert_eq!(items[3], Message::Integer(i64::MIN));
    assert_eq!(items[4], Message::Integer(i64::MAX));
    assert_eq!(items[5], Message::Integer((1 << 53) + 1));
    assert_eq!(items[6], Message::Number(-0.0));
    assert!(matches!(items[7], Message::Number(n) if n.is_nan()));
    assert_eq!(items[8], Message::Number(f64::INFINITY));
    assert_eq!(items[9], Message::Number(f64::NEG_INFINITY));
    assert_eq!(items[10], Message::Number(9007199254740992.0));
    luau_round_trip(
        "{ 0, integer.create(0), integer.fromstring('9007199254740993'), -0.0, 0/0, math.huge }",
    );
    // Read back in Luau, the integer is still an integer and exact.
    let other = Lua::new();
    other.globals().set("m", m.to_lua(&other).unwrap()).unwrap();
    let (kind, text): (String, String) = other
        .load("return typeof(m[6]), tostring(m[6])")
        .eval()
        .unwrap();
    assert_eq!(
        (kind.as_str(), text.as_str()),
        ("integer", "9007199254740993")
    );
}

#[test]
fn top_level_integers_cross_exactly_through_the_stack_path() {
    for i in [0, -1, i64::MIN, i64::MAX, (1 << 53) + 1] {
        assert_eq!(round_trip_exact(&Message::Integer(i)), Message::Integer(i));
    }
    for n in [0.0, -0.0, 1.5, f64::INFINITY, f64::NEG_INFINITY, 3.0] {
        assert_eq!(round_trip_exact(&Message::Number(n)), Message::Number(n));
    }
    let nan = f64::from_bits(0x7ff8_0000_dead_beef);
    assert_eq!(
        round_trip_exact(&Message::Number(nan)),
        Message::Number(nan)
    );
    let lua = Lua::new();
    let f: Function = lua.load("function(x) return typeof(x) end").eval().unwrap();
    assert_eq!(f.call::<String>(Message::Integer(5)).unwrap(), "integer");
    assert_eq!(f.call::<String>(Message::Number(5.0)).unwrap(), "number");
    // As a bare Value, an integer beyond 2^53 would become a rounded number: refused.
    let err = Message::Integer((1 << 53) + 1).to_lua(&lua).unwrap_err();
    assert!(err.to_string().contains("would be rounded"), "{err}");
}

#[test]
fn nan_payload_survives_inside_tables() {
    let nan = f64::from_bits(0x7ff8_0000_0000_0abc);
    let m = Message::List(vec![
        Message::Number(nan),
        Message::Vector([f32::NAN, -0.0, 1.0]),
    ]);
    let lua = Lua::new();
    let back = Message::from_lua(&m.to_lua(&lua).unwrap(), "message").unwrap();
    assert_eq!(back, m);
    let Message::List(items) = back else { panic!() };
    assert!(matches!(items[0], Message::Number(n) if n.to_bits() == nan.to_bits()));
}

#[test]
fn tables_strings_buffers_and_vectors_round_trip() {
    assert_eq!(luau_round_trip("{}"), Message::Map(vec![]));
    assert_eq!(
        luau_round_trip("{ 'a', 'b', x = 1 }"),
        Message::Map(vec![
            (MapKey::Number(1.0), s("a")),
            (MapKey::Number(2.0), s("b")),
            (key("x"), Message::Number(1.0)),
        ])
    );
    assert_eq!(
        luau_round_trip("{ [1] = 'a', [3] = 'c' }"),
        Message::Map(vec![
            (MapKey::Number(1.0), s("a")),
            (MapKey::Number(3.0), s("c")),
        ])
    );
    assert_eq!(
        luau_round_trip("{ [integer.create(1)] = 'i', [1.5] = 'f', [-2] = 'n' }"),
        Message::Map(vec![
            (MapKey::Integer(1), s("i")),
            (MapKey::Number(1.5), s("f")),
            (MapKey::Number(-2.0), s("n")),
        ])
    );
    // A list whose keys sit in the hash part, inserted backwards, is still a list.
    assert_eq!(
        luau_round_trip("local t = {}; t[3] = 'c'; t[2] = 'b'; t[1] = 'a'; return t"),
        Message::List(vec![s("a"), s("b"), s("c")])
    );
    assert_eq!(
        luau_round_trip("{ 'a\\0b', '\\255\\254', [ 'k\\0' ] = 'v' }"),
        Message::Map(vec![
            (
                MapKey::Number(1.0),
                Message::String(b"a\0b".to_vec().into())
            ),
            (
                MapKey::Number(2.0),
                Message::String(b"\xff\xfe".to_vec().into())
            ),
            (MapKey::String(b"k\0".to_vec().into()), s("v")),
        ])
    );
    assert_eq!(
        luau_round_trip("{ buffer.create(0), vector.create(1, -0, 3.5) }"),
        Message::List(vec![
            Message::Buffer(Vec::new().into()),
            Message::Vector([1.0, -0.0, 3.5]),
        ])
    );
    assert_eq!(
        luau_round_trip("{ a = { b = { c = { true, false } } } }"),
        Message::Map(vec![(
            key("a"),
            Message::Map(vec![(
                key("b"),
                Message::Map(vec![(
                    key("c"),
                    Message::List(vec![Message::Boolean(true), Message::Boolean(false)])
                )])
            )])
        )])
    );
}

#[test]
fn a_16_mib_buffer_round_trips_byte_for_byte() {
    let lua = Lua::new();
    let value = eval(
        &lua,
        "local b = buffer.create(16 * 1024 * 1024)
         for i = 0, 16 * 1024 * 1024 - 1, 4093 do buffer.writeu8(b, i, i % 251) end
         return b",
    );
    let m = Message::from_lua(&value, "message").unwrap();
    let Message::Buffer(bytes) = &m else { panic!() };
    assert_eq!(bytes.len(), 16 << 20);
    assert_eq!(bytes[4093], (4093 % 251) as u8);
    let other = Lua::new();
    let back = m.to_lua(&other).unwrap();
    let Value::Buffer(b) = &back else { panic!() };
    assert_eq!(b.to_vec(), bytes.to_vec());
    assert_eq!(Message::decode(&m.to_bytes(), 17 << 20).unwrap(), m);
}

#[test]
fn resource_handles_cross_and_compare_by_value() {
    let lua = Lua::new();
    lua.globals()
        .set("h", ResourceHandle::new("queue", 9))
        .unwrap();
    let m = Message::from_lua(&eval(&lua, "{ h, h }"), "message").unwrap();
    let handle = Message::Resource(ResourceHandle::new("queue", 9));
    assert_eq!(m, Message::List(vec![handle.clone(), handle]));
    let other = Lua::new();
    other.globals().set("m", m.to_lua(&other).unwrap()).unwrap();
    let (eq, text): (bool, String) = other
        .load("return m[1] == m[2], tostring(m[1])")
        .eval()
        .unwrap();
    assert!(eq);
    assert_eq!(text, "ResourceHandle(queue#9)");
}

#[test]
fn from_lua_trait_uses_the_default_root() {
    let lua = Lua::new();
    let f: Function = lua
        .load("function() return { f = print } end")
        .eval()
        .unwrap();
    let err = f.call::<Message>(()).unwrap_err().to_string();
    assert!(
        err.contains(&format!("message.f: a function {BOUNDARY}")),
        "{err}"
    );
}

#[test]
fn codec_round_trips_and_refuses_bad_input() {
    let m = Message::Map(vec![
        (
            key("list"),
            Message::List(vec![Message::Integer(i64::MIN), Message::Number(-0.0)]),
        ),
        (MapKey::Integer(-5), Message::Buffer(vec![1, 2, 3].into())),
        (MapKey::Number(2.5), Message::Vector([1.0, 2.0, 3.0])),
        (
            key("h"),
            Message::Resource(ResourceHandle::new("buffer", u64::MAX)),
        ),
        (key("empty"), Message::Map(vec![])),
        (key("s"), Message::String(b"\0\xff".to_vec().into())),
    ]);
    let bytes = m.to_bytes();
    assert_eq!(bytes[0], Limits::CODEC_VERSION);
    assert_eq!(Message::decode(&bytes, 1 << 20).unwrap(), m);

    for cut in 0..bytes.len() {
        let err = Message::decode(&bytes[..cut], 1 << 20).unwrap_err();
        assert_eq!(err.kind, DecodeErrorKind::Truncated, "cut at {cut}");
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(
        Message::decode(&trailing, 1 << 20).unwrap_err(),
        skein::message::DecodeError {
            offset: bytes.len(),
            kind: DecodeErrorKind::TrailingBytes
        }
    );
    assert_eq!(
        Message::decode(&[Limits::CODEC_VERSION, 99], 100)
            .unwrap_err()
            .to_string(),
        "unknown value tag 99 at byte 1"
    );
    assert_eq!(
        Message::decode(&[7, 0], 100).unwrap_err().kind,
        DecodeErrorKind::UnknownVersion(7)
    );
    let big = Message::String(vec![b'x'; 1000].into());
    let bytes = big.to_bytes();
    assert_eq!(Message::decode(&bytes, 1016).unwrap(), big);
    assert_eq!(
        Message::decode(&bytes, 1015).unwrap_err().kind,
        DecodeErrorKind::OverLimit { limit: 1015 }
    );
}

#[test]
fn codec_refuses_depth_65() {
    let mut m = Message::Map(vec![]);
    for _ in 1..Limits::MAX_DEPTH {
        m = Message::List(vec![m]);
    }
    assert_eq!(Message::decode(&m.to_bytes(), 1 << 20).unwrap(), m);
    let deeper = Message::List(vec![m]);
    assert_eq!(
        Message::decode(&deeper.to_bytes(), 1 << 20)
            .unwrap_err()
            .kind,
        DecodeErrorKind::TooDeep
    );
}

/// Fuzz regression (luau_roundtrip, input `[202]`): a top-level whole number came back from
/// `to_lua` as `Value::Integer` and read back as `Message::Integer`.
#[test]
fn a_top_level_whole_number_stays_a_number_through_to_lua() {
    let lua = Lua::new();
    for n in [0.0, -0.0, 3.0, 1e300] {
        let value = Message::Number(n).to_lua(&lua).unwrap();
        assert!(matches!(value, Value::Number(_)), "{value:?}");
        assert_eq!(Message::from_lua(&value, "m").unwrap(), Message::Number(n));
    }
    let v = Message::Vector([1.0, -0.0, f32::INFINITY]);
    assert_eq!(Message::from_lua(&v.to_lua(&lua).unwrap(), "m").unwrap(), v);
}

#[test]
fn a_rust_callback_receives_and_returns_exact_messages() {
    let lua = Lua::new();
    let echo = lua.create_function(|_, m: Message| Ok(m)).unwrap();
    lua.globals().set("echo", echo).unwrap();
    lua.globals()
        .set("h", ResourceHandle::new("buffer", 2))
        .unwrap();
    let (kind, same, nested): (String, bool, String) = lua
        .load(
            "local big = integer.fromstring('9223372036854775807')
             local t = echo({ big, h, x = 1.0 })
             return typeof(echo(big)), echo(big) == big, typeof(t[1]) .. ' ' .. typeof(t.x)",
        )
        .eval()
        .unwrap();
    assert_eq!(kind, "integer");
    assert!(same);
    assert_eq!(nested, "integer number");
    let err = lua
        .load("echo({ f = print })")
        .exec()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("message.f: a function {BOUNDARY}")),
        "{err}"
    );
}
