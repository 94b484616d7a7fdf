//! Build a Luau value from the fuzzer's bytes, copy it to a Message, build that in a second VM,
//! copy it back, and require the two Messages to be equal. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mlua::{Lua, Value};
use skein::Message;

/// Reads the fuzzer's bytes as a little program that builds one value.
struct Recipe<'a> {
    data: &'a [u8],
    tables: usize,
}

impl Recipe<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head.to_vec()
    }

    fn u64(&mut self) -> u64 {
        let mut raw = [0u8; 8];
        for b in &mut raw {
            *b = self.byte();
        }
        u64::from_le_bytes(raw)
    }

    fn value(&mut self, lua: &Lua, depth: usize) -> mlua::Result<Value> {
        Ok(match self.byte() % 10 {
            0 => Value::Nil,
            1 => Value::Boolean(self.byte() & 1 == 1),
            2 => Value::Number(f64::from_bits(self.u64())),
            3 => {
                // A real Luau integer: only the stack path keeps the type, so make it in Luau.
                let i = self.u64() as i64;
                lua.load(format!("return integer.fromstring('{i}')")).eval()?
            }
            4 => {
                let n = usize::from(self.byte());
                Value::String(lua.create_string(self.bytes(n))?)
            }
            5 => {
                let c = |r: &mut Self| f32::from_bits(r.u64() as u32);
                Value::Vector(mlua::Vector::new(c(self), c(self), c(self)))
            }
            6 => {
                let n = usize::from(self.byte());
                Value::Buffer(lua.create_buffer(self.bytes(n))?)
            }
            _ if depth >= 70 || self.tables > 200 => Value::Nil,
            7 => {
                self.tables += 1;
                let t = lua.create_table()?;
                for _ in 0..self.byte() % 8 {
                    t.raw_push(self.value(lua, depth + 1)?)?;
                }
                Value::Table(t)
            }
            _ => {
                self.tables += 1;
                let t = lua.create_table()?;
                for _ in 0..self.byte() % 8 {
                    let key = self.value(lua, depth + 1)?;
                    let value = self.value(lua, depth + 1)?;
                    // Luau itself refuses nil and NaN keys; skip what it refuses.
                    let _ = t.raw_set(key, value);
                }
                Value::Table(t)
            }
        })
    }
}

fuzz_target!(|data: &[u8]| {
    let lua = Lua::new();
    let mut recipe = Recipe { data, tables: 0 };
    let Ok(value) = recipe.value(&lua, 0) else {
        return;
    };
    // Refusals (bad keys, depth) are fine; a panic or an unequal copy is not.
    let Ok(first) = Message::from_lua(&value, "message") else {
        return;
    };
    let other = Lua::new();
    let rebuilt = match first.to_lua(&other) {
        Ok(v) => v,
        // A top-level integer beyond 2^53 can't be a bare Value: that refusal is by design.
        Err(_) if matches!(first, Message::Integer(_)) => return,
        Err(e) => panic!("building {first:?} failed: {e}"),
    };
    let second = Message::from_lua(&rebuilt, "message").expect("a rebuilt message must read back");
    assert_eq!(first, second);
    let decoded = Message::decode(&first.to_bytes(), usize::MAX).expect("codec round trip");
    assert_eq!(decoded, first);
});
