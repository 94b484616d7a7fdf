//! Reading `jobs.register`'s descriptor: every field checked at the call, and a bad one raised
//! naming it, so nothing half-valid is ever registered.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mlua::{Function, Lua, Table, Value};

use crate::jobs::leaves::options::{read_deadline, read_entry, read_key, read_module};
use crate::jobs::leaves::registered::order::{Declared, MAX_DECLARED_NAMES};
use crate::jobs::leaves::registered::remote_job::RemoteJob;
use crate::jobs::protocol::item::Kernel;
use crate::ledger::{format_bytes, Charge, Ledger};
use crate::value::Message;
use crate::vm::{a_type, error_message, quoted, with_caller_source, VmCore};

/// The longest phase name, in bytes.
pub(crate) const MAX_PHASE_BYTES: usize = 64;

/// The longest `origin` a descriptor may give: 1 KiB. It names a chunk.
pub(crate) const MAX_ORIGIN_BYTES: usize = 1 << 10;

/// The most a descriptor's `metadata` may weigh (by
/// [`Message::queue_weight`](crate::Message::queue_weight)): 64 KiB. A job keeps its copy as
/// long as it is registered, and every `jobs.info` copies it again.
pub(crate) const MAX_METADATA_BYTES: usize = 64 << 10;

/// What a registered job holds in the host besides the bytes of its fields: its entries in the
/// registry and the directory, its tally and its state.
pub(crate) const REGISTERED_JOB_WEIGHT: usize = 512;

/// What runs each frame for a registered job: the descriptor's `executor` table, read.
pub(crate) enum JobBody {
    /// `run()` on the engine thread, as a task.
    Luau { run: Function },
    /// `input()` on the engine thread, `module.entry(input)` on a worker, `apply(result)` back
    /// on the engine thread.
    Worker {
        path: Arc<Path>,
        spec: Arc<str>,
        entry: Arc<str>,
        input: Function,
        apply: Function,
        key: Option<Bytes>,
        deadline: Duration,
    },
    /// A native function of the host, run on a worker over the copied input.
    Kernel {
        name: Arc<str>,
        kernel: Kernel,
        input: Option<Function>,
        apply: Option<Function>,
    },
    /// A `luau` or `worker` job registered from a worker VM: its functions stay in that VM, and
    /// the engine only posts each frame's call there (see `remote`).
    Remote {
        /// `"luau"` or `"worker"`.
        kind: &'static str,
        /// The pool worker that holds the VM, and the VM's serial.
        worker: usize,
        vm: u64,
        shared: Arc<RemoteJob>,
    },
}

impl JobBody {
    /// The kind as the descriptor names it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            JobBody::Luau { .. } => "luau",
            JobBody::Worker { .. } => "worker",
            JobBody::Kernel { .. } => "kernel",
            JobBody::Remote { kind, .. } => kind,
        }
    }
}

/// A checked descriptor.
pub(crate) struct Descriptor {
    pub(crate) name: Option<String>,
    pub(crate) phase: Arc<str>,
    pub(crate) body: JobBody,
    pub(crate) origin: String,
    pub(crate) metadata: Option<Message>,
    /// Its `reads`, `writes`, `after`, `before` and `pure`.
    pub(crate) declared: Arc<Declared>,
}

impl Descriptor {
    /// Charges what the job will hold in the host while it is registered to the domain's host
    /// memory: [`REGISTERED_JOB_WEIGHT`] and the bytes of its name, phase, origin, declared
    /// names and `copies` copies of its metadata. Every field is bounded, but the number of
    /// jobs (a phase holds at most 4,096, and phases are many) is bounded only by this, so a
    /// loop of registers is refused here instead of growing the host without end.
    pub(crate) fn hold(&self, memory: &Arc<Ledger>, copies: usize) -> Result<Charge, String> {
        let declared = &self.declared;
        let names = [
            &declared.reads,
            &declared.writes,
            &declared.after,
            &declared.before,
        ]
        .iter()
        .flat_map(|list| list.iter())
        .map(String::len)
        .sum::<usize>();
        let metadata = self.metadata.as_ref().map_or(0, Message::queue_weight);
        let bytes = REGISTERED_JOB_WEIGHT
            .saturating_add(self.name.as_ref().map_or(0, String::len))
            .saturating_add(self.phase.len())
            .saturating_add(self.origin.len())
            .saturating_add(names)
            .saturating_add(metadata.saturating_mul(copies));
        Charge::take(memory, bytes).map_err(|refused| {
            format!(
                "{WHAT}: a job holding {} would not fit: {refused}; cancel some jobs before \
                 registering more",
                format_bytes(bytes)
            )
        })
    }
}

/// The descriptor's fields, as a refusal lists them.
const FIELDS: &[&str] = &[
    "name", "phase", "executor", "reads", "writes", "after", "before", "pure", "origin", "metadata",
];

const WHAT: &str = "jobs.register";

/// Reads the descriptor. `kernel` finds a kernel the host registered, or answers why it can't
/// (the text raised at the call); `cap` is the longest deadline a worker job may ask for.
pub(crate) fn read(
    lua: &Lua,
    descriptor: &Value,
    kernel: impl Fn(&str) -> Result<Kernel, String>,
    cap: Duration,
) -> Result<Descriptor, String> {
    let Value::Table(t) = descriptor else {
        return Err(format!(
            "{WHAT}: descriptor must be a table, got {}",
            a_type(descriptor)
        ));
    };
    only_fields(t, FIELDS, "descriptor field")?;
    let name = match field(t, "name")? {
        Value::Nil => None,
        v => {
            let bytes = read_key(&v, &format!("{WHAT}: name"))?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let phase = match field(t, "phase")? {
        Value::String(s) if (1..=MAX_PHASE_BYTES).contains(&s.as_bytes().len()) => {
            Arc::from(s.to_string_lossy().as_str())
        }
        Value::String(s) => {
            return Err(format!(
                "{WHAT}: phase must be a string of 1 to {MAX_PHASE_BYTES} bytes, got a string of {} bytes",
                s.as_bytes().len()
            ))
        }
        other => {
            return Err(format!(
                "{WHAT}: phase must be a string of 1 to {MAX_PHASE_BYTES} bytes, got {}",
                a_type(&other)
            ))
        }
    };
    let body = read_executor(lua, &field(t, "executor")?, kernel, cap)?;
    let declared = read_declared(t)?;
    let origin = match field(t, "origin")? {
        Value::Nil => caller_origin(lua),
        Value::String(s) if s.as_bytes().len() <= MAX_ORIGIN_BYTES => {
            s.to_string_lossy().to_string()
        }
        Value::String(s) => {
            return Err(format!(
                "{WHAT}: origin must be at most {MAX_ORIGIN_BYTES} bytes, got {}",
                s.as_bytes().len()
            ))
        }
        other => {
            return Err(format!(
                "{WHAT}: origin must be a string, got {}",
                a_type(&other)
            ))
        }
    };
    let metadata = match field(t, "metadata")? {
        Value::Nil => None,
        v @ Value::Table(_) => Some(
            Message::read_within(&v, "metadata", MAX_METADATA_BYTES)
                .map_err(|e| format!("{WHAT}: {e}"))?,
        ),
        other => {
            return Err(format!(
                "{WHAT}: metadata must be a table of data, got {}",
                a_type(&other)
            ))
        }
    };
    Ok(Descriptor {
        name,
        phase,
        body,
        origin,
        metadata,
        declared: Arc::new(declared),
    })
}

/// Reads `reads`, `writes`, `after`, `before` (each a list of at most [`MAX_DECLARED_NAMES`]
/// names) and `pure`.
fn read_declared(t: &Table) -> Result<Declared, String> {
    let pure = match field(t, "pure")? {
        Value::Nil => false,
        Value::Boolean(b) => b,
        other => {
            return Err(format!(
                "{WHAT}: pure must be a boolean, got {}",
                a_type(&other)
            ))
        }
    };
    let declared = Declared {
        reads: names(t, "reads", "name")?,
        writes: names(t, "writes", "name")?,
        after: names(t, "after", "job name")?,
        before: names(t, "before", "job name")?,
        pure,
    };
    if pure && !declared.writes.is_empty() {
        return Err(format!(
            "{WHAT}: a pure job changes nothing outside its result, so it declares no writes \
             (writes names '{}')",
            declared.writes[0]
        ));
    }
    Ok(declared)
}

/// Reads the list `t[list]`: nil (none), or a list of 1 to [`MAX_DECLARED_NAMES`] strings of
/// 1 to 256 bytes, repeats dropped. Its length is checked before any element is read.
fn names(t: &Table, list: &str, what: &str) -> Result<Vec<String>, String> {
    let rule = format!("{WHAT}: {list} must be a list of at most {MAX_DECLARED_NAMES} {what}s");
    let items = match field(t, list)? {
        Value::Nil => return Ok(Vec::new()),
        Value::Table(items) => items,
        other => return Err(format!("{rule}, got {}", a_type(&other))),
    };
    let len = items.raw_len();
    if len > MAX_DECLARED_NAMES {
        return Err(format!("{rule}, got {len}"));
    }
    // A table with keys past its list part (`{ x = true }`) is not a list.
    if items.clone().pairs::<Value, Value>().take(len + 1).count() > len {
        return Err(format!("{rule}, got a table with other keys"));
    }
    let mut out: Vec<String> = Vec::with_capacity(len);
    for index in 1..=len {
        let value: Value = items.raw_get(index).map_err(|e| error_message(&e))?;
        let bytes = read_key(&value, &format!("{WHAT}: {list}[{index}]"))?;
        let name = String::from_utf8_lossy(&bytes).into_owned();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

fn read_executor(
    lua: &Lua,
    value: &Value,
    kernel: impl Fn(&str) -> Result<Kernel, String>,
    cap: Duration,
) -> Result<JobBody, String> {
    let Value::Table(t) = value else {
        return Err(format!(
            "{WHAT}: executor must be a table with a kind, got {}",
            a_type(value)
        ));
    };
    let kind = field(t, "kind")?;
    let kind = match &kind {
        Value::String(s) => s.to_string_lossy().to_string(),
        _ => String::new(),
    };
    match kind.as_str() {
        "luau" => {
            only_fields(t, &["kind", "run"], "executor field for kind 'luau'")?;
            Ok(JobBody::Luau {
                run: function(t, "run")?,
            })
        }
        "worker" => {
            let allowed = [
                "kind", "module", "entry", "input", "apply", "key", "deadline",
            ];
            only_fields(t, &allowed, "executor field for kind 'worker'")?;
            let module = read_module(WHAT, "executor.module", field(t, "module")?)?;
            let entry = read_entry(WHAT, "executor.entry", field(t, "entry")?)?;
            let input = function(t, "input")?;
            let apply = function(t, "apply")?;
            let key = match field(t, "key")? {
                Value::Nil => None,
                v => Some(read_key(&v, &format!("{WHAT}: executor.key"))?),
            };
            let deadline = match field(t, "deadline")? {
                Value::Nil => cap,
                v => read_deadline(&v, &format!("{WHAT}: executor.deadline"), cap)?,
            };
            let core = VmCore::of(lua).map_err(|e| error_message(&e))?;
            let spec = module.to_string_lossy().to_string();
            let resolved = with_caller_source(lua, |source| core.modules.resolve(source, &spec))
                .map_err(|e| format!("{WHAT}: executor.module: {e}"))?;
            Ok(JobBody::Worker {
                path: resolved.path,
                spec: resolved.spec,
                entry: Arc::from(entry.to_string_lossy().as_str()),
                input,
                apply,
                key,
                deadline,
            })
        }
        "kernel" => {
            only_fields(
                t,
                &["kind", "kernel", "input", "apply"],
                "executor field for kind 'kernel'",
            )?;
            let name = match field(t, "kernel")? {
                Value::String(s) => s.to_string_lossy().to_string(),
                other => {
                    return Err(format!(
                        "{WHAT}: executor.kernel must be the name of a registered kernel, got {}",
                        a_type(&other)
                    ))
                }
            };
            let found = kernel(&name)?;
            Ok(JobBody::Kernel {
                name: Arc::from(name.as_str()),
                kernel: found,
                input: optional_function(t, "input")?,
                apply: optional_function(t, "apply")?,
            })
        }
        _ => {
            let got = match field(t, "kind")? {
                Value::String(s) => quoted(&s.as_bytes()),
                other => a_type(&other),
            };
            Err(format!(
                "{WHAT}: executor.kind must be one of 'luau', 'worker', 'kernel', got {got}"
            ))
        }
    }
}

/// The chunk that called `jobs.register`, as its debug info names it: a file path, or the name
/// host code gave the chunk.
fn caller_origin(lua: &Lua) -> String {
    with_caller_source(lua, |source| match source {
        Some(s) => s
            .strip_prefix('@')
            .or_else(|| s.strip_prefix('='))
            .unwrap_or(s)
            .to_owned(),
        None => "host".to_owned(),
    })
}

fn field(t: &Table, name: &str) -> Result<Value, String> {
    t.raw_get(name).map_err(|e| error_message(&e))
}

/// Refuses any key of `t` not in `allowed`, naming it: a misspelt field is never ignored.
fn only_fields(t: &Table, allowed: &[&str], what: &str) -> Result<(), String> {
    for pair in t.clone().pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| error_message(&e))?;
        let known = match &key {
            Value::String(s) => allowed
                .iter()
                .any(|a| s.as_bytes().as_ref() == a.as_bytes()),
            _ => false,
        };
        if !known {
            let shown = match &key {
                Value::String(s) => quoted(&s.as_bytes()),
                other => format!("{} key", a_type(other)),
            };
            return Err(format!(
                "{WHAT}: unknown {what} {shown}: expected {}",
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

fn function(t: &Table, name: &str) -> Result<Function, String> {
    match field(t, name)? {
        Value::Function(f) => Ok(f),
        other => Err(format!(
            "{WHAT}: executor.{name} must be a function, got {}",
            a_type(&other)
        )),
    }
}

fn optional_function(t: &Table, name: &str) -> Result<Option<Function>, String> {
    match field(t, name)? {
        Value::Nil => Ok(None),
        _ => function(t, name).map(Some),
    }
}
