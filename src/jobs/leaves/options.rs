//! The arguments of `jobs.dispatch`, `jobs.parallelFor` and `jobs.map` that say what runs and
//! how: the module and entry, and `opts`; read, checked and refused at the call. A key is kept
//! per thread as one shared allocation ([`key_bytes`]), so naming it again copies nothing.

use std::cell::RefCell;
use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use foldhash::fast::RandomState;
use mlua::{LuaString, Value};

use super::chunking::whole;
use crate::value::article;
use crate::vm::loader::MAX_SPEC_BYTES;
use crate::vm::{a_type, for_each_option, format_seconds, luau_number};

/// The longest one run of an item may take, and the default: 60 seconds.
pub(crate) const MAX_DEADLINE: Duration = Duration::from_secs(60);

/// The longest entry name, in bytes: an entry is the name of a module's function.
pub(crate) const MAX_ENTRY_BYTES: usize = 256;

/// Reads the `module` and `entry` arguments of `call`: a require path string and the name of a
/// function, both kept as the Luau strings they are.
#[inline]
pub(crate) fn read_target(
    call: &str,
    module: Value,
    entry: Value,
) -> Result<(LuaString, LuaString), String> {
    Ok((
        read_module(call, "module", module)?,
        read_entry(call, "entry", entry)?,
    ))
}

/// Reads a require path argument `param` of `call`: a string of at most
/// [`MAX_SPEC_BYTES`] bytes, refused by its length before anything copies it.
pub(crate) fn read_module(call: &str, param: &str, module: Value) -> Result<LuaString, String> {
    let Value::String(module) = module else {
        return Err(format!(
            "{call}: {param} must be a require path string, got {}",
            a_type(&module)
        ));
    };
    let len = module.as_bytes().len();
    if len > MAX_SPEC_BYTES {
        return Err(format!(
            "{call}: {param} must be a require path of at most {MAX_SPEC_BYTES} bytes, got a \
             string of {len} bytes"
        ));
    }
    Ok(module)
}

/// Reads an entry argument `param` of `call`: the name of a function, at most
/// [`MAX_ENTRY_BYTES`] bytes.
pub(crate) fn read_entry(call: &str, param: &str, entry: Value) -> Result<LuaString, String> {
    let Value::String(entry) = entry else {
        return Err(format!(
            "{call}: {param} must be the name of a function, got {}",
            a_type(&entry)
        ));
    };
    let len = entry.as_bytes().len();
    if len > MAX_ENTRY_BYTES {
        return Err(format!(
            "{call}: {param} must be the name of a function, at most {MAX_ENTRY_BYTES} bytes, \
             got a string of {len} bytes"
        ));
    }
    Ok(entry)
}

/// The refusal of `call` whose module argument `param` did not resolve (`why`, the loader's
/// text), naming the argument.
pub(crate) fn module_refused(call: &str, param: &str, why: &str) -> String {
    if why.starts_with("module ") {
        format!("{call}: {why}")
    } else {
        format!("{call}: {param}: {why}")
    }
}

/// The checked options of one dispatch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DispatchOptions {
    pub(crate) deadline: Duration,
    pub(crate) name: Option<String>,
    /// `opts.key`: the lane the item runs in.
    pub(crate) key: Option<Bytes>,
    /// `opts.supersede`: reject the key's items that have not started.
    pub(crate) supersede: bool,
}

/// The longest key, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 256;

/// One option's value as the rules of `opts` read it: the kinds an option takes, and any other
/// kind by its Luau type name, for the refusal to name. The raw `jobs.dispatch` makes it from the
/// Luau stack in place, every other reader from an `mlua::Value` ([`option_value`]), so an option
/// is read by one rule whichever way it came.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OptionValue<'a> {
    /// A number (an integer too), as `f64`.
    Number(f64),
    /// A string's bytes, borrowed from the VM.
    String(&'a [u8]),
    Boolean(bool),
    /// Any other kind, by its type name: `table`, `nil`, `function`.
    Other(&'static str),
}

impl OptionValue<'_> {
    /// The value's kind with its article, as a refusal names it: `a string`, `nil`.
    fn a_type(self) -> String {
        let name = match self {
            OptionValue::Number(_) => "number",
            OptionValue::String(_) => "string",
            OptionValue::Boolean(_) => "boolean",
            OptionValue::Other("nil") => return "nil".to_owned(),
            OptionValue::Other(name) => name,
        };
        format!("{} {name}", article(name))
    }
}

/// Calls `read` with `value` as an [`OptionValue`], a string's bytes read in place.
pub(crate) fn option_value<R>(value: &Value, read: impl FnOnce(OptionValue<'_>) -> R) -> R {
    match value {
        Value::Integer(i) => read(OptionValue::Number(*i as f64)),
        Value::Number(n) => read(OptionValue::Number(*n)),
        Value::String(s) => read(OptionValue::String(&s.as_bytes())),
        Value::Boolean(b) => read(OptionValue::Boolean(*b)),
        other => read(OptionValue::Other(other.type_name())),
    }
}

/// Reads a key: a string of 1 to [`MAX_KEY_BYTES`] bytes, kept as [`key_bytes`] keeps it. `what`
/// names it in the refusal.
pub(crate) fn read_key(value: &Value, what: &str) -> Result<Bytes, String> {
    option_value(value, |value| key_of(value, what))
}

/// [`read_key`]'s rule, on an [`OptionValue`].
fn key_of(value: OptionValue<'_>, what: &str) -> Result<Bytes, String> {
    match value {
        OptionValue::String(key) if !key.is_empty() && key.len() <= MAX_KEY_BYTES => {
            Ok(key_bytes(key))
        }
        refused => Err(key_refused(refused, what)),
    }
}

/// The refusal of a value that breaks [`read_key`]'s rule.
#[cold]
fn key_refused(value: OptionValue<'_>, what: &str) -> String {
    let rule = format!("{what} must be a string of 1 to {MAX_KEY_BYTES} bytes");
    match value {
        OptionValue::String(key) => {
            let n = key.len();
            let unit = if n == 1 { "byte" } else { "bytes" };
            format!("{rule}, got a string of {n} {unit}")
        }
        other => format!("{rule}, got {}", other.a_type()),
    }
}

/// How many keys [`key_bytes`] keeps per thread; one more empties its cache first. Keys are at
/// most 256 bytes, so a thread keeps at most about 1 MiB of key bytes.
const KEPT_KEYS: usize = 4_096;

thread_local! {
    /// The keys this thread's dispatches named lately, shared: see [`key_bytes`].
    static KEPT: RefCell<HashSet<Bytes, RandomState>> = RefCell::new(HashSet::default());
}

/// The key of a keyed dispatch as [`Bytes`]: a key this thread named lately is the same
/// allocation again (one lookup and a reference count), not a new copy. A keyed item's key is
/// held by its job, its promise and its lane, and a fresh copy cost an allocation, another when
/// it was first shared, and their frees: about 800 instructions on every keyed dispatch.
pub(crate) fn key_bytes(key: &[u8]) -> Bytes {
    // A thread whose locals are being torn down (a VM dropped there) copies the key.
    KEPT.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some(found) = kept.get(key) {
            return found.clone();
        }
        if kept.len() >= KEPT_KEYS {
            kept.clear();
        }
        let made = Bytes::copy_from_slice(key);
        kept.insert(made.clone());
        made
    })
    .unwrap_or_else(|_| Bytes::copy_from_slice(key))
}

/// Reads a deadline in seconds: above 0 and at most `cap`.
pub(crate) fn read_deadline(value: &Value, what: &str, cap: Duration) -> Result<Duration, String> {
    option_value(value, |value| deadline_of(value, what, cap))
}

/// [`read_deadline`]'s rule, on an [`OptionValue`].
fn deadline_of(value: OptionValue<'_>, what: &str, cap: Duration) -> Result<Duration, String> {
    match value {
        // NaN fails every comparison, so it is refused here too.
        OptionValue::Number(seconds) if seconds > 0.0 && seconds <= cap.as_secs_f64() => {
            Ok(Duration::from_secs_f64(seconds))
        }
        refused => Err(deadline_refused(refused, what, cap)),
    }
}

/// The refusal of a value that breaks [`read_deadline`]'s rule.
#[cold]
fn deadline_refused(value: OptionValue<'_>, what: &str, cap: Duration) -> String {
    let OptionValue::Number(seconds) = value else {
        return format!("{what} must be a number of seconds, got {}", value.a_type());
    };
    if seconds.is_nan() || seconds <= 0.0 {
        return format!(
            "{what} must be a number of seconds above 0, got {}",
            luau_number(seconds)
        );
    }
    format!(
        "{what} of {} s is past the cap of {} s: a deadline may be lowered, never raised",
        luau_number(seconds),
        format_seconds(cap)
    )
}

/// `opts.name` of `call`: a string.
fn name_of(value: OptionValue<'_>, call: &str) -> Result<String, String> {
    match value {
        OptionValue::String(name) => Ok(String::from_utf8_lossy(name).into_owned()),
        other => Err(format!(
            "{call}: opts.name must be a string, got {}",
            other.a_type()
        )),
    }
}

/// `opts.name` of `call`, read from an `mlua` value.
fn read_name(value: &Value, call: &str) -> Result<String, String> {
    option_value(value, |value| name_of(value, call))
}

impl DispatchOptions {
    /// The options of a dispatch whose `opts` is nil or empty: the deadline `cap`, no name, no
    /// key.
    pub(crate) fn defaults(cap: Duration) -> DispatchOptions {
        DispatchOptions {
            deadline: cap,
            name: None,
            key: None,
            supersede: false,
        }
    }

    /// A reader of `opts`, one option at a time, with `cap` as the default and longest deadline.
    pub(crate) fn reader(cap: Duration) -> DispatchOptionsReader {
        DispatchOptionsReader {
            read: DispatchOptions::defaults(cap),
            cap,
            supersede_given: false,
        }
    }

    /// Reads `opts` (nil or a table) from an `mlua` value, with `cap` as the default and longest
    /// deadline; the refusal names the first option that breaks its rule.
    pub(crate) fn read(opts: &Value, cap: Duration) -> Result<DispatchOptions, String> {
        let mut reader = DispatchOptions::reader(cap);
        for_each_option(
            opts,
            "jobs.dispatch",
            "deadline, name, key or supersede",
            |key, value| option_value(&value, |value| reader.option(key.as_bytes(), value)),
        )?;
        reader.finish()
    }
}

/// The one parse of `jobs.dispatch`'s `opts`, fed an option at a time by both of its entrances:
/// the raw path reading the table off the Luau stack in place (`jobs/luau/dispatch_raw.rs`) and
/// the `mlua` path ([`DispatchOptions::read`]). Each rule and each refusal is written once, here.
pub(crate) struct DispatchOptionsReader {
    read: DispatchOptions,
    cap: Duration,
    supersede_given: bool,
}

impl DispatchOptionsReader {
    /// Reads the option named `key`; `Ok(false)` when `key` names no option of `jobs.dispatch`.
    ///
    /// # Errors
    ///
    /// The refusal of a value that breaks its option's rule.
    #[inline]
    pub(crate) fn option(&mut self, key: &[u8], value: OptionValue<'_>) -> Result<bool, String> {
        let out = &mut self.read;
        match key {
            b"deadline" => {
                out.deadline = deadline_of(value, "jobs.dispatch: opts.deadline", self.cap)?;
            }
            b"name" => out.name = Some(name_of(value, "jobs.dispatch")?),
            b"key" => out.key = Some(key_of(value, "jobs.dispatch: opts.key")?),
            b"supersede" => match value {
                OptionValue::Boolean(supersede) => {
                    out.supersede = supersede;
                    self.supersede_given = true;
                }
                other => {
                    return Err(format!(
                        "jobs.dispatch: opts.supersede must be a boolean, got {}",
                        other.a_type()
                    ))
                }
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The options read, once every option has been.
    ///
    /// # Errors
    ///
    /// `supersede` given without `key`.
    pub(crate) fn finish(self) -> Result<DispatchOptions, String> {
        if self.supersede_given && self.read.key.is_none() {
            return Err(
                "jobs.dispatch: opts.supersede needs opts.key: only the items of a key \
                        can be superseded"
                    .to_owned(),
            );
        }
        Ok(self.read)
    }
}

/// The checked options of one `jobs.parallelFor`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParallelForOptions {
    pub(crate) deadline: Duration,
    pub(crate) name: Option<String>,
    /// `opts.chunks` as given; checked against the element count once `over` is read.
    pub(crate) chunks: Option<i64>,
    /// `opts.stride`: bytes in one element of a buffer; `None` when not given.
    pub(crate) stride: Option<usize>,
}

impl ParallelForOptions {
    /// Reads `opts` (nil or a table) with `cap` as the default and longest deadline.
    pub(crate) fn read(opts: &Value, cap: Duration) -> Result<ParallelForOptions, String> {
        let mut out = ParallelForOptions {
            deadline: cap,
            name: None,
            chunks: None,
            stride: None,
        };
        for_each_option(
            opts,
            "jobs.parallelFor",
            "deadline, name, chunks or stride",
            |key, value| {
                match key {
                    "deadline" => {
                        out.deadline =
                            read_deadline(&value, "jobs.parallelFor: opts.deadline", cap)?
                    }
                    "name" => out.name = Some(read_name(&value, "jobs.parallelFor")?),
                    "chunks" => out.chunks = Some(whole(&value, "jobs.parallelFor: opts.chunks")?),
                    "stride" => {
                        let stride = whole(&value, "jobs.parallelFor: opts.stride")?;
                        if stride < 1 {
                            return Err(format!(
                            "jobs.parallelFor: opts.stride must be at least 1 byte, got {stride}"
                        ));
                        }
                        out.stride = Some(stride as usize);
                    }
                    _ => return Ok(false),
                }
                Ok(true)
            },
        )?;
        Ok(out)
    }
}

/// The checked options of one `jobs.map`: those of `jobs.parallelFor` that apply to a list.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MapOptions {
    pub(crate) deadline: Duration,
    pub(crate) name: Option<String>,
    /// `opts.chunks` as given; checked against the list's length once the list is read.
    pub(crate) chunks: Option<i64>,
}

impl MapOptions {
    /// Reads `opts` (nil or a table) with `cap` as the default and longest deadline. `key` and
    /// `supersede` are refused by name: a map's chunks run on any worker, and a key would bind
    /// them all to one.
    pub(crate) fn read(opts: &Value, cap: Duration) -> Result<MapOptions, String> {
        let mut out = MapOptions {
            deadline: cap,
            name: None,
            chunks: None,
        };
        for_each_option(
            opts,
            "jobs.map",
            "deadline, name or chunks",
            |key, value| {
                match key {
                "deadline" => out.deadline = read_deadline(&value, "jobs.map: opts.deadline", cap)?,
                "name" => out.name = Some(read_name(&value, "jobs.map")?),
                "chunks" => out.chunks = Some(whole(&value, "jobs.map: opts.chunks")?),
                "key" | "supersede" => {
                    return Err(format!(
                        "jobs.map: opts.{key} does not apply to a map: its chunks run on every \
                         worker, and a key binds items to one; dispatch keyed items with jobs.dispatch"
                    ))
                }
                _ => return Ok(false),
            }
                Ok(true)
            },
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_len() -> usize {
        KEPT.with(|kept| kept.borrow().len())
    }

    #[test]
    fn an_option_value_names_its_kind_as_a_refusal_of_an_mlua_value_does() {
        let lua = mlua::Lua::new();
        let values = [
            Value::Nil,
            Value::Integer(3),
            Value::Number(0.5),
            Value::Boolean(true),
            Value::String(lua.create_string("k").unwrap()),
            Value::Table(lua.create_table().unwrap()),
            Value::Function(lua.create_function(|_, ()| Ok(())).unwrap()),
        ];
        for value in &values {
            assert_eq!(option_value(value, |v| v.a_type()), a_type(value));
        }
    }

    #[test]
    fn the_dispatch_reader_reads_each_option_and_refuses_by_one_rule() {
        let cap = Duration::from_secs(10);
        let mut reader = DispatchOptions::reader(cap);
        assert_eq!(
            reader.option(b"deadline", OptionValue::Number(2.0)),
            Ok(true)
        );
        assert_eq!(reader.option(b"name", OptionValue::String(b"n")), Ok(true));
        assert_eq!(reader.option(b"key", OptionValue::String(b"k")), Ok(true));
        assert_eq!(
            reader.option(b"supersede", OptionValue::Boolean(true)),
            Ok(true)
        );
        assert_eq!(
            reader.option(b"dealine", OptionValue::Number(2.0)),
            Ok(false)
        );
        let read = reader.finish().unwrap();
        assert_eq!(read.deadline, Duration::from_secs(2));
        assert_eq!(read.name.as_deref(), Some("n"));
        assert_eq!(read.key.as_deref(), Some(&b"k"[..]));
        assert!(read.supersede);

        let mut reader = DispatchOptions::reader(cap);
        assert_eq!(
            reader.option(b"deadline", OptionValue::Number(11.0)),
            Err(
                "jobs.dispatch: opts.deadline of 11 s is past the cap of 10 s: a deadline may \
                 be lowered, never raised"
                    .to_owned()
            )
        );
        assert_eq!(
            reader.option(b"key", OptionValue::Other("table")),
            Err(
                "jobs.dispatch: opts.key must be a string of 1 to 256 bytes, got a table"
                    .to_owned()
            )
        );
        assert_eq!(
            reader.option(b"supersede", OptionValue::Boolean(false)),
            Ok(true)
        );
        assert_eq!(
            reader.finish(),
            Err(
                "jobs.dispatch: opts.supersede needs opts.key: only the items of a key can be \
                 superseded"
                    .to_owned()
            )
        );
        assert_eq!(
            DispatchOptions::reader(cap).finish(),
            Ok(DispatchOptions::defaults(cap))
        );
    }

    #[test]
    fn a_key_named_again_is_the_same_buffer_with_the_same_bytes() {
        let first = key_bytes(b"k1");
        let again = key_bytes(b"k1");
        assert_eq!(first, again);
        assert_eq!(first.as_ptr(), again.as_ptr(), "one buffer, shared");
        let other = key_bytes(b"k2");
        assert_eq!(&other[..], b"k2");
        assert_ne!(first.as_ptr(), other.as_ptr());
    }

    #[test]
    fn a_thread_keeps_at_most_kept_keys_and_empties_its_cache_one_past() {
        // Each test runs on its own thread: the cache starts empty here.
        for i in 0..KEPT_KEYS {
            key_bytes(format!("key{i}").as_bytes());
        }
        assert_eq!(kept_len(), KEPT_KEYS);
        // A key already kept is found without growing the cache.
        assert_eq!(&key_bytes(b"key0")[..], b"key0");
        assert_eq!(kept_len(), KEPT_KEYS);
        // One past: the cache is emptied, then keeps the new key alone.
        let past = key_bytes(b"one more");
        assert_eq!(&past[..], b"one more");
        assert_eq!(kept_len(), 1);
    }
}
