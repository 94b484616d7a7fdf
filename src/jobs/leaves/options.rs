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

/// Reads a key: a string of 1 to [`MAX_KEY_BYTES`] bytes. `what` names it in the refusal.
pub(crate) fn read_key(value: &Value, what: &str) -> Result<Bytes, String> {
    let rule = format!("{what} must be a string of 1 to {MAX_KEY_BYTES} bytes");
    match value {
        Value::String(s) => {
            let bytes = s.as_bytes();
            if !key_fits(&bytes) {
                let n = bytes.len();
                let unit = if n == 1 { "byte" } else { "bytes" };
                return Err(format!("{rule}, got a string of {n} {unit}"));
            }
            Ok(key_bytes(&bytes))
        }
        other => Err(format!("{rule}, got {}", a_type(other))),
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

/// Whether `key` is a key's length: 1 to [`MAX_KEY_BYTES`] bytes. The rule [`read_key`] words
/// and the raw dispatch path checks in place.
pub(crate) fn key_fits(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_BYTES
}

/// Whether `seconds` is a deadline `cap` allows: above 0 and at most `cap`. The rule
/// [`read_deadline`] words and the raw dispatch path checks in place.
pub(crate) fn deadline_fits(seconds: f64, cap: Duration) -> bool {
    !seconds.is_nan() && seconds > 0.0 && seconds <= cap.as_secs_f64()
}

/// Reads a deadline in seconds: above 0 and at most `cap`.
pub(crate) fn read_deadline(value: &Value, what: &str, cap: Duration) -> Result<Duration, String> {
    let seconds = match value {
        Value::Integer(i) => *i as f64,
        Value::Number(n) => *n,
        other => {
            return Err(format!(
                "{what} must be a number of seconds, got {}",
                a_type(other)
            ))
        }
    };
    if deadline_fits(seconds, cap) {
        return Ok(Duration::from_secs_f64(seconds));
    }
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!(
            "{what} must be a number of seconds above 0, got {}",
            luau_number(seconds)
        ));
    }
    Err(format!(
        "{what} of {} s is past the cap of {} s: a deadline may be lowered, never raised",
        luau_number(seconds),
        format_seconds(cap)
    ))
}

/// `opts.name`: a string.
fn read_name(value: Value, call: &str) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.to_string_lossy()),
        other => Err(format!(
            "{call}: opts.name must be a string, got {}",
            a_type(&other)
        )),
    }
}

impl DispatchOptions {
    /// Reads `opts` (nil or a table) with `cap` as the default and longest deadline.
    pub(crate) fn read(opts: &Value, cap: Duration) -> Result<DispatchOptions, String> {
        let mut out = DispatchOptions {
            deadline: cap,
            name: None,
            key: None,
            supersede: false,
        };
        let mut supersede_given = false;
        for_each_option(
            opts,
            "jobs.dispatch",
            "deadline, name, key or supersede",
            |key, value| {
                match key {
                    "deadline" => {
                        out.deadline = read_deadline(&value, "jobs.dispatch: opts.deadline", cap)?
                    }
                    "name" => out.name = Some(read_name(value, "jobs.dispatch")?),
                    "key" => out.key = Some(read_key(&value, "jobs.dispatch: opts.key")?),
                    "supersede" => match value {
                        Value::Boolean(b) => {
                            out.supersede = b;
                            supersede_given = true;
                        }
                        other => {
                            return Err(format!(
                                "jobs.dispatch: opts.supersede must be a boolean, got {}",
                                a_type(&other)
                            ))
                        }
                    },
                    _ => return Ok(false),
                }
                Ok(true)
            },
        )?;
        if supersede_given && out.key.is_none() {
            return Err("jobs.dispatch: opts.supersede needs opts.key: only the items of a key can be superseded".to_owned());
        }
        Ok(out)
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
                    "name" => out.name = Some(read_name(value, "jobs.parallelFor")?),
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
                "name" => out.name = Some(read_name(value, "jobs.map")?),
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
