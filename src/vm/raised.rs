//! The text of a raised value that is not a string: `error({ code = 1 })` that nobody caught.
//!
//! mlua turns such a value into text with `luaL_tolstring`, which honours `__tostring` and
//! otherwise gives `table: 0x...`. The prelude's `error` keeps the last non-string value each
//! thread raised (weakly, by thread), so when a task fails with `table: 0x...` and the kept value
//! is that table, the failure shows the table's contents instead: bounded in depth, entries and
//! length, so a huge or cyclic value costs little.

use mlua::{Lua, Table, Thread, Value};

/// Registry key of the prelude's table of raised values, by thread.
pub(crate) const RAISED_KEY: &str = "skein.raised";

/// How deep nested tables are shown; deeper ones are `{...}`.
const MAX_DEPTH: usize = 3;
/// How many entries of one table are shown; more are `...`.
const MAX_ENTRIES: usize = 16;
/// How many entries of one table are read to choose (and sort) the ones shown.
const MAX_READ: usize = 256;
/// How many characters of one string are shown.
const MAX_STRING: usize = 64;
/// How long the whole text may grow before it is cut with `...`.
const MAX_TEXT: usize = 512;

/// The rendering of the value `thread` raised, when `message` is mlua's text for exactly that
/// value (`table: 0x...`); `None` otherwise. Forgets the kept value either way.
pub(crate) fn raised_text(lua: &Lua, thread: &Thread, message: &str) -> Option<String> {
    let raised: Table = lua.named_registry_value(RAISED_KEY).ok()?;
    let value: Value = raised.raw_get(thread.clone()).ok()?;
    let _ = raised.raw_set(thread.clone(), Value::Nil);
    let Value::Table(table) = &value else {
        return None;
    };
    if !is_address_text(message, "table", table.to_pointer() as usize) {
        return None;
    }
    let mut out = String::new();
    render_table(table, 0, &mut out);
    if out.len() > MAX_TEXT {
        let mut cut = MAX_TEXT;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    Some(out)
}

/// Whether `message` is `<kind>: 0x<hex>` naming `address`.
fn is_address_text(message: &str, kind: &str, address: usize) -> bool {
    let Some(rest) = message
        .strip_prefix(kind)
        .and_then(|r| r.strip_prefix(": 0x"))
    else {
        return false;
    };
    usize::from_str_radix(rest.trim_end(), 16).is_ok_and(|a| a == address)
}

/// `{1, 2, code = 1, ["a b"] = "x", nested = {...}}`: the array part in order, then the other
/// entries sorted by their text, so the rendering does not depend on the table's layout.
fn render_table(table: &Table, depth: usize, out: &mut String) {
    if depth >= MAX_DEPTH {
        out.push_str("{...}");
        return;
    }
    let mut array = Vec::new();
    let mut named = Vec::new();
    let mut more = false;
    let mut next_index = 1i64;
    for (read, pair) in table.pairs::<Value, Value>().enumerate() {
        if read >= MAX_READ {
            more = true;
            break;
        }
        let Ok((key, value)) = pair else { break };
        let mut text = String::new();
        match key {
            Value::Integer(i) if i == next_index => {
                next_index += 1;
                render_value(&value, depth, &mut text);
                array.push(text);
                continue;
            }
            Value::String(s) => {
                let name = s.to_string_lossy();
                if is_identifier(&name) {
                    text.push_str(&name);
                } else {
                    text.push('[');
                    render_value(&Value::String(s), depth, &mut text);
                    text.push(']');
                }
            }
            other => {
                text.push('[');
                render_value(&other, depth, &mut text);
                text.push(']');
            }
        }
        text.push_str(" = ");
        render_value(&value, depth, &mut text);
        named.push(text);
    }
    named.sort();
    let total = array.len() + named.len();
    out.push('{');
    for (n, entry) in array
        .iter()
        .chain(named.iter())
        .take(MAX_ENTRIES)
        .enumerate()
    {
        if n > 0 {
            out.push_str(", ");
        }
        out.push_str(entry);
    }
    if more || total > MAX_ENTRIES {
        out.push_str(if total == 0 { "..." } else { ", ..." });
    }
    out.push('}');
}

fn render_value(value: &Value, depth: usize, out: &mut String) {
    match value {
        Value::Nil => out.push_str("nil"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Integer(i) => out.push_str(&i.to_string()),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => {
            let text = s.to_string_lossy();
            let shown: String = text.chars().take(MAX_STRING).collect();
            out.push_str(&format!("{shown:?}"));
            if shown.len() < text.len() {
                out.push_str("...");
            }
        }
        Value::Table(t) => render_table(t, depth + 1, out),
        other => out.push_str(other.type_name()),
    }
}

/// Whether `name` can stand as a field name without brackets.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(lua: &Lua, source: &str) -> String {
        let table: Table = lua.load(source).eval().unwrap();
        let mut out = String::new();
        render_table(&table, 0, &mut out);
        out
    }

    #[test]
    fn a_table_shows_its_array_then_its_fields_sorted() {
        let lua = Lua::new();
        assert_eq!(render(&lua, "return { code = 1 }"), "{code = 1}");
        assert_eq!(
            render(
                &lua,
                r#"return { 10, 20, code = 1, ["a b"] = "x", [true] = 2.5 }"#
            ),
            r#"{10, 20, ["a b"] = "x", [true] = 2.5, code = 1}"#
        );
        assert_eq!(render(&lua, "return {}"), "{}");
    }

    #[test]
    fn depth_entries_and_strings_are_bounded() {
        let lua = Lua::new();
        assert_eq!(
            render(&lua, "return { a = { b = { c = { d = 1 } } } }"),
            "{a = {b = {{...}}}}".replace("{{...}}", "{c = {...}}")
        );
        let many = render(&lua, "local t = {} for i = 1, 100 do t[i] = i end return t");
        assert_eq!(
            many,
            "{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, ...}"
        );
        let long = render(&lua, r#"return { s = string.rep("y", 100) }"#);
        assert_eq!(long, format!("{{s = \"{}\"...}}", "y".repeat(64)));
        // A cycle stops at the depth bound.
        let cyclic = render(&lua, "local t = {} t.me = t return t");
        assert_eq!(cyclic, "{me = {me = {me = {...}}}}");
    }

    #[test]
    fn only_the_text_of_that_very_value_is_replaced() {
        assert!(is_address_text("table: 0x1f", "table", 0x1f));
        assert!(!is_address_text("table: 0x1f", "table", 0x20));
        assert!(!is_address_text("boom: 0x1f", "table", 0x1f));
        assert!(!is_address_text("table: 0x1f and more", "table", 0x1f));
    }
}
