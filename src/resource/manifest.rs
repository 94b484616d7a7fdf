//! The two files a resource host reads: a resource's `skein.toml` ([`Manifest`]) and a served
//! folder's `skein-host.toml` ([`HostFile`]), both parsed with `toml` and serde.
//!
//! Every refusal names the file, the line and the key (`store/skein.toml:3: resource.exports:
//! invalid type: string "get", expected a sequence`): serde refuses unknown keys and wrong
//! types with the span of the offending text, and the key is read from the source around it.
//! Names are checked here too (exports are Luau identifiers, capability names are checked as
//! the library checks them, scripts and roots stay inside the resource's folder), each refusal
//! pointing at the element's own line.

use std::collections::HashSet;
use std::ops::Range;
use std::path::{Component, Path};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, ResourceRefusal, Result};
use crate::ledger::parse_size;
use crate::principal::capability::CapabilityId;
use crate::vm::source::{file_kind, read_within};

/// The largest `skein.toml` or `skein-host.toml` read: 1 MiB.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The longest `resource.deadline_ms` a manifest may ask: 60,000 (60 s, the longest run
/// deadline a domain may have).
pub(crate) const MAX_DEADLINE_MS: u64 = 60_000;

/// A resource's `skein.toml`, as read and checked.
///
/// ```toml
/// [resource]
/// scripts = ["main.luau"]          # run in order in the resource's engine VM at start
/// exports = ["add", "describe"]    # global functions other resources may call
/// dependencies = ["store"]         # resources that must be running first
/// deadline_ms = 250                # the longest one run of its code may take, 1 to 60000
/// memory = "64M"                   # each of its VMs' memory limit, at most the host's
/// [capabilities]                   # never more than the host holds
/// allow = ["worker.spawn"]
/// read = ["data"]                  # roots relative to the resource's folder
/// write = []
/// ```
///
/// Every key may be left out (an empty list). The resource's name is its folder's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Manifest {
    /// Scripts run in order in the engine VM at start, relative to the resource's folder.
    pub scripts: Vec<String>,
    /// Global functions other resources may call, each a Luau identifier.
    pub exports: Vec<String>,
    /// Resources that must be running before this one starts.
    pub dependencies: Vec<String>,
    /// The longest one run of the resource's code may take (`deadline_ms`, 1 ms to 60 s): its
    /// start scripts, each call of an export, each handler and task run. Its domain's run
    /// deadline ([`DomainSpec::run_deadline`](crate::DomainSpec::run_deadline)); when left
    /// out, the host's.
    pub deadline: Option<Duration>,
    /// The memory limit of each of the resource's VMs (`memory`, bytes or a size such as
    /// `"64M"`, at least [`Manifest::MIN_MEMORY`]): the host's
    /// ([`ResourceHost::memory_limit`](crate::resource::ResourceHost::memory_limit)) when left out, and
    /// never more than it. A resource that asks for less holds less of the pool's memory
    /// budget while it runs, so more resources fit.
    pub memory: Option<usize>,
    /// Capabilities asked of the host.
    pub allow: Vec<CapabilityId>,
    /// Directories, relative to the resource's folder, that `filesystem.read` reaches.
    pub read: Vec<String>,
    /// Directories, relative to the resource's folder, that `filesystem.write` reaches.
    pub write: Vec<String>,
}

/// A served folder's `skein-host.toml`: which resources start with the host.
///
/// ```toml
/// [host]
/// start = ["store", "scores", "report"]
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostFile {
    /// The startup set, in the order listed (started in dependency order, keeping this order
    /// between independent resources).
    pub start: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    resource: RawResource,
    #[serde(default)]
    capabilities: RawCapabilities,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawResource {
    #[serde(default)]
    scripts: Vec<Spanned<String>>,
    #[serde(default)]
    exports: Vec<Spanned<String>>,
    #[serde(default)]
    dependencies: Vec<Spanned<String>>,
    #[serde(default)]
    deadline_ms: Option<Spanned<i64>>,
    #[serde(default)]
    memory: Option<Spanned<RawSize>>,
}

/// `resource.memory`: a whole number of bytes, or a size written as `skein::size::parse_size` reads
/// it.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(i64),
    Text(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
    #[serde(default)]
    read: Vec<Spanned<String>>,
    #[serde(default)]
    write: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHostFile {
    #[serde(default)]
    host: RawHost,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHost {
    #[serde(default)]
    start: Vec<Spanned<String>>,
}

impl Manifest {
    /// The least `resource.memory` a manifest may ask: 1 MiB, as for a worker actor's VM.
    pub const MIN_MEMORY: usize = 1 << 20;

    /// Reads and checks the manifest at `path`.
    ///
    /// # Errors
    /// [`Error::Resource`] with [`ResourceRefusal::Manifest`] naming the file (and, for what
    /// is in it, the line and the key).
    pub fn read(path: impl AsRef<Path>) -> Result<Manifest> {
        let path = path.as_ref();
        Manifest::parse(&path.display().to_string(), &read_text(path)?)
    }

    /// Checks the text of a manifest; `file` names it in refusals.
    ///
    /// ```
    /// use skein::resource::Manifest;
    ///
    /// let m = Manifest::parse("store/skein.toml", "[resource]\nexports = ['get']\n")?;
    /// assert_eq!(m.exports, ["get"]);
    /// let err = Manifest::parse("store/skein.toml", "[resource]\nexport = ['get']\n").unwrap_err();
    /// assert!(err.to_string().starts_with("store/skein.toml:2: resource.export: unknown field `export`"), "{err}");
    /// # Ok::<(), skein::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn parse(file: &str, text: &str) -> Result<Manifest> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| de_error(file, text, &e))?;
        let at = |item: &Spanned<String>, key: &str, why: String| {
            refused(file, text, item.span(), key, &why)
        };
        let mut scripts = Vec::new();
        for s in raw.resource.scripts {
            inside("resource.scripts", &s, &at)?;
            scripts.push(s.into_inner());
        }
        // The names seen so far of each list, for the duplicate checks: a manifest of 1 MiB
        // holds some 100,000 names, and a check by list would compare each with every other.
        let mut seen: HashSet<String> = HashSet::new();
        let mut exports: Vec<String> = Vec::new();
        for e in raw.resource.exports {
            if !is_identifier(e.get_ref()) {
                return Err(at(
                    &e,
                    "resource.exports",
                    format!("'{}' is not a Luau identifier", e.get_ref()),
                ));
            }
            if !seen.insert(e.get_ref().clone()) {
                return Err(at(
                    &e,
                    "resource.exports",
                    format!("'{}' is listed twice", e.get_ref()),
                ));
            }
            exports.push(e.into_inner());
        }
        seen.clear();
        let mut dependencies: Vec<String> = Vec::new();
        for d in raw.resource.dependencies {
            if let Err(why) = check_name(d.get_ref()) {
                return Err(at(&d, "resource.dependencies", why));
            }
            if seen.insert(d.get_ref().clone()) {
                dependencies.push(d.into_inner());
            }
        }
        let deadline = match raw.resource.deadline_ms {
            None => None,
            Some(ms) => {
                let value = *ms.get_ref();
                match u64::try_from(value) {
                    Ok(good @ 1..=MAX_DEADLINE_MS) => Some(Duration::from_millis(good)),
                    _ => {
                        return Err(refused(
                            file,
                            text,
                            ms.span(),
                            "resource.deadline_ms",
                            &format!(
                            "{value} is not a deadline: give 1 to {MAX_DEADLINE_MS} milliseconds"
                        ),
                        ))
                    }
                }
            }
        };
        let memory = match raw.resource.memory {
            None => None,
            Some(size) => {
                let span = size.span();
                let bytes = match size.into_inner() {
                    RawSize::Bytes(n) => {
                        usize::try_from(n).map_err(|_| format!("{n} is not a size"))
                    }
                    RawSize::Text(t) => parse_size(&t),
                };
                match bytes {
                    Ok(b) if b >= Manifest::MIN_MEMORY => Some(b),
                    Ok(b) => {
                        return Err(refused(
                            file,
                            text,
                            span,
                            "resource.memory",
                            &format!("{b} bytes is less than the least VM limit, 1 MiB"),
                        ))
                    }
                    Err(why) => return Err(refused(file, text, span, "resource.memory", &why)),
                }
            }
        };
        let mut allow = Vec::new();
        for a in raw.capabilities.allow {
            let id = CapabilityId::new(a.get_ref())
                .map_err(|e| at(&a, "capabilities.allow", e.to_string()))?;
            allow.push(id);
        }
        let mut read = Vec::new();
        for r in raw.capabilities.read {
            inside("capabilities.read", &r, &at)?;
            read.push(r.into_inner());
        }
        let mut write = Vec::new();
        for w in raw.capabilities.write {
            inside("capabilities.write", &w, &at)?;
            write.push(w.into_inner());
        }
        Ok(Manifest {
            scripts,
            exports,
            dependencies,
            deadline,
            memory,
            allow,
            read,
            write,
        })
    }
}

impl HostFile {
    /// The name of the file in a served folder: `skein-host.toml`.
    pub const FILE_NAME: &'static str = "skein-host.toml";

    /// Reads and checks the host file at `path`.
    ///
    /// # Errors
    /// As [`Manifest::read`].
    pub fn read(path: impl AsRef<Path>) -> Result<HostFile> {
        let path = path.as_ref();
        HostFile::parse(&path.display().to_string(), &read_text(path)?)
    }

    /// Checks the text of a host file; `file` names it in refusals.
    ///
    /// ```
    /// use skein::resource::HostFile;
    ///
    /// let host = HostFile::parse("skein-host.toml", "[host]\nstart = ['store', 'report']\n")?;
    /// assert_eq!(host.start, ["store", "report"]);
    /// let err = HostFile::parse("skein-host.toml", "[host]\nstart = 'store'\n").unwrap_err();
    /// assert!(err.to_string().starts_with("skein-host.toml:2: host.start: invalid type"), "{err}");
    /// # Ok::<(), skein::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Manifest::read`].
    pub fn parse(file: &str, text: &str) -> Result<HostFile> {
        let raw: RawHostFile = toml::from_str(text).map_err(|e| de_error(file, text, &e))?;
        // The names seen so far: a host file of 1 MiB names some 100,000 resources, and a
        // check by list would compare each with every other.
        let mut seen: HashSet<String> = HashSet::new();
        let mut start: Vec<String> = Vec::new();
        for s in raw.host.start {
            if let Err(why) = check_name(s.get_ref()) {
                return Err(refused(file, text, s.span(), "host.start", &why));
            }
            if seen.insert(s.get_ref().clone()) {
                start.push(s.into_inner());
            }
        }
        Ok(HostFile { start })
    }
}

/// A resource name: its folder's name, 1 to 64 ASCII letters, digits, `_`, `-` or `.`, not
/// starting with `.`.
pub(crate) fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a resource name: 1 to 64 ASCII letters, digits, '_', '-' or '.', not starting with '.'",
            name.escape_debug()
        ))
    }
}

fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && s.len() <= 256
}

/// Refuses a path that is empty, absolute or climbs out of the resource's folder.
fn inside(
    key: &str,
    item: &Spanned<String>,
    at: &impl Fn(&Spanned<String>, &str, String) -> Error,
) -> Result<()> {
    let path = Path::new(item.get_ref());
    let escapes = path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if item.get_ref().is_empty() || escapes {
        return Err(at(
            item,
            key,
            format!(
                "'{}' must be a relative path inside the resource's folder",
                item.get_ref().escape_debug()
            ),
        ));
    }
    Ok(())
}

fn read_text(path: &Path) -> Result<String> {
    let named = |why: String| Error::Resource {
        refusal: ResourceRefusal::Manifest,
        message: format!("{}: {why}", path.display()),
    };
    let meta = std::fs::metadata(path).map_err(|e| named(e.to_string()))?;
    // Looked at before the open: opening a FIFO would wait for a writer that may never come.
    if !meta.is_file() {
        return Err(named(format!(
            "it is {}, not a regular file",
            file_kind(meta.file_type())
        )));
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(named(format!(
            "{} bytes is more than a manifest may hold ({MAX_MANIFEST_BYTES})",
            meta.len()
        )));
    }
    // The open does not wait either, and the open file is looked at again: the path may have
    // changed since.
    let bytes = read_within(path, MAX_MANIFEST_BYTES as usize).map_err(|e| named(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| named("it is not UTF-8 text".to_owned()))
}

/// A serde or TOML refusal, placed and keyed from its span.
fn de_error(file: &str, text: &str, e: &toml::de::Error) -> Error {
    let message = e.message().trim_end();
    match e.span() {
        Some(span) => {
            let key = key_at(text, span.start);
            refused(file, text, span, &key, message)
        }
        None => Error::Resource {
            refusal: ResourceRefusal::Manifest,
            message: format!("{file}: {message}"),
        },
    }
}

fn refused(file: &str, text: &str, span: Range<usize>, key: &str, why: &str) -> Error {
    let line = line_of(text, span.start);
    let message = if key.is_empty() {
        format!("{file}:{line}: {why}")
    } else {
        format!("{file}:{line}: {key}: {why}")
    };
    Error::Resource {
        refusal: ResourceRefusal::Manifest,
        message,
    }
}

/// The 1-based line of byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    text.as_bytes()[..at]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The dotted key whose text holds byte `at`: the nearest `key =` at or before its line (an
/// array's element may sit lines below its key), under the nearest `[table]` header before
/// that; a header itself when `at` is on one.
fn key_at(text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let start_of_line = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end_of_line = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let mut lines = text[..end_of_line].lines().rev();
    let mut key = None;
    let header = |line: &str| {
        let line = line.trim();
        line.strip_prefix('[')
            .and_then(|l| l.split(']').next())
            .map(|h| h.trim_matches(|c| c == '[' || c == ' ').to_owned())
    };
    // A header on the line itself names the table.
    if let Some(h) = header(&text[start_of_line..end_of_line]) {
        return h;
    }
    for line in lines.by_ref() {
        if let Some(h) = header(line) {
            return match key {
                Some(k) => format!("{h}.{k}"),
                None => h,
            };
        }
        if key.is_none() {
            if let Some((k, _)) = line.split_once('=') {
                let k = k.trim().trim_matches('"');
                if !k.is_empty() && !k.contains(['"', '\'', '[', ',']) {
                    key = Some(k.to_owned());
                }
            }
        }
    }
    key.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(result: Result<Manifest>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_whole_manifest_is_read() {
        let m = Manifest::parse(
            "m",
            "[resource]\nscripts = ['main.luau', 'lib/more.luau']\nexports = ['add']\n\
             dependencies = ['store', 'store']\n[capabilities]\nallow = ['worker.spawn']\n\
             read = ['data']\nwrite = []\n",
        )
        .unwrap();
        assert_eq!(m.scripts, ["main.luau", "lib/more.luau"]);
        assert_eq!(m.dependencies, ["store"]);
        assert_eq!(m.allow[0].as_str(), "worker.spawn");
        assert_eq!(Manifest::parse("m", "").unwrap(), Manifest::default());
    }

    #[test]
    fn refusals_name_the_file_line_and_key() {
        assert!(
            text(Manifest::parse("m", "[resource]\nexports = 'add'\n")).starts_with(
                "m:2: resource.exports: invalid type: string \"add\", expected a sequence"
            )
        );
        assert!(
            text(Manifest::parse("m", "[resource]\nscripts = []\nfoo = 1\n"))
                .starts_with("m:3: resource.foo: unknown field `foo`")
        );
        assert!(text(Manifest::parse("m", "[server]\n"))
            .starts_with("m:1: server: unknown field `server`"));
        assert_eq!(
            text(Manifest::parse(
                "m",
                "[resource]\nexports = [\n  'ok',\n  'not ok',\n]\n"
            )),
            "m:4: resource.exports: 'not ok' is not a Luau identifier"
        );
        assert_eq!(
            text(Manifest::parse("m", "[resource]\nscripts = ['../x.luau']\n")),
            "m:2: resource.scripts: '../x.luau' must be a relative path inside the resource's folder"
        );
        assert!(text(Manifest::parse(
            "m",
            "[capabilities]\nallow = ['Bad Name']\n"
        ))
        .starts_with("m:2: capabilities.allow: "),);
        assert!(text(Manifest::parse("m", "[resource\n")).starts_with("m:1: "));
        assert_eq!(
            text(Manifest::parse("m", "[resource]\ndependencies = ['.x']\n")),
            "m:2: resource.dependencies: '.x' is not a resource name: 1 to 64 ASCII letters, \
             digits, '_', '-' or '.', not starting with '.'"
        );
    }

    #[test]
    fn a_memory_is_a_size_of_at_least_1_mib() {
        let memory = |v: &str| {
            Manifest::parse("m", &format!("[resource]\nmemory = {v}\n")).map(|m| m.memory)
        };
        assert_eq!(memory("'64M'").unwrap(), Some(64 << 20));
        assert_eq!(memory("1048576").unwrap(), Some(1 << 20));
        assert_eq!(Manifest::parse("m", "[resource]\n").unwrap().memory, None);
        assert_eq!(
            memory("1048575").unwrap_err().to_string(),
            "m:2: resource.memory: 1048575 bytes is less than the least VM limit, 1 MiB"
        );
        assert_eq!(
            memory("'lots'").unwrap_err().to_string(),
            "m:2: resource.memory: 'lots' is not a size: give a whole number of bytes, or one \
             ending in K, M or G"
        );
        assert_eq!(
            memory("-5").unwrap_err().to_string(),
            "m:2: resource.memory: -5 is not a size"
        );
    }

    #[test]
    fn a_deadline_is_1_to_60000_milliseconds() {
        let deadline = |ms: &str| {
            Manifest::parse("m", &format!("[resource]\ndeadline_ms = {ms}\n")).map(|m| m.deadline)
        };
        assert_eq!(deadline("1").unwrap(), Some(Duration::from_millis(1)));
        assert_eq!(deadline("60000").unwrap(), Some(Duration::from_secs(60)));
        assert_eq!(Manifest::parse("m", "[resource]\n").unwrap().deadline, None);
        for (ms, shown) in [("0", "0"), ("60001", "60001"), ("-5", "-5")] {
            assert_eq!(
                deadline(ms).unwrap_err().to_string(),
                format!(
                    "m:2: resource.deadline_ms: {shown} is not a deadline: give 1 to 60000 milliseconds"
                )
            );
        }
        assert!(deadline("0.5")
            .unwrap_err()
            .to_string()
            .starts_with("m:2: resource.deadline_ms: invalid type: floating point"));
    }

    #[test]
    fn lists_of_100_000_names_are_checked_for_duplicates_in_linear_time() {
        // A check of each name against the list so far took 14 s for a host file of 100,000
        // names in a release build.
        let names: Vec<String> = (0..100_000).map(|i| format!("'r{i}'")).collect();
        let list = names.join(",");
        let began = std::time::Instant::now();
        let host = HostFile::parse("h", &format!("[host]\nstart = [{list},'r0']\n")).unwrap();
        assert_eq!(host.start.len(), 100_000);
        let m =
            Manifest::parse("m", &format!("[resource]\ndependencies = [{list},'r0']\n")).unwrap();
        assert_eq!(m.dependencies.len(), 100_000);
        let exports = Manifest::parse("m", &format!("[resource]\nexports = [{list},'r0']\n"));
        assert_eq!(text(exports), "m:2: resource.exports: 'r0' is listed twice");
        // Seconds even in a debug build; the quadratic check took minutes there.
        let took = began.elapsed();
        assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    }
}
