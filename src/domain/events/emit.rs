//! `events.emit` as every VM of a domain reads it, and the `@skein/events` of the VMs that are
//! not the engine VM: pool worker VMs (jobs running for the domain) and actors
//! (`@skein/worker`).
//!
//! All of them post to the one event queue of the domain, under the same limits and with the
//! same refusals. A worker VM or actor posts through the mailbox of its own generation (its
//! principal's), so what it emits after a restart is stamped with the old generation,
//! discarded and counted as stale, and never delivered. Events one job emits are queued in the
//! order it emits them: each post is one push under the queue's lock, made on the job's thread
//! before `emit` returns.
//!
//! Routes are the engine thread's: a worker's event is routed by the drain that delivers it
//! ([`Routing::AtDrain`](crate::principal::event_queue::Routing::AtDrain)). Binding handlers (`events.on`) stays the engine VM's alone.

use std::sync::Arc;

use mlua::{Lua, Value};

use crate::domain::DomainMailbox;
use crate::principal::capability::{self, Authority};
use crate::principal::diagnostic::{Diagnostic, DiagnosticKind};
use crate::principal::event_queue::{EventQueue, PostRefused, QueueBound};
use crate::value::{Message, TransferErrorKind};
use crate::vm;

/// Registry key of a VM's `@skein/events` table (the engine VM's is made in `handlers.rs`).
pub(crate) const EVENTS_KEY: &str = "skein.events";

/// What `events.on` raises outside the engine VM.
pub(crate) const WORKER_ON: &str =
    "events.on: handlers bind only in the engine VM; a worker VM runs jobs, not event handlers";

/// What `events.wait` raises outside the engine VM: named events are delivered there alone.
pub(crate) const WORKER_WAIT: &str =
    "events.wait: a domain's named events are delivered in its engine VM alone; a worker VM or \
     @skein/worker worker waits on the host's engine events with engine.wait";

/// Why an emit was refused: the text after `events.emit: `.
pub(crate) enum EmitRefused {
    /// The event does not fit under the queue's limits (`queue full: ...`).
    Full(String),
    /// Anything else: a bad name, a payload that can't cross, a stopped domain.
    Other(String),
}

impl EmitRefused {
    /// The Luau error `emit` raises.
    pub(crate) fn into_lua(self) -> mlua::Error {
        match self {
            EmitRefused::Full(text) | EmitRefused::Other(text) => {
                mlua::Error::runtime(format!("events.emit: {text}"))
            }
        }
    }
}

impl From<PostRefused> for EmitRefused {
    fn from(refused: PostRefused) -> Self {
        match refused {
            PostRefused::Full { .. } => EmitRefused::Full(refused.to_string()),
            other => EmitRefused::Other(other.to_string()),
        }
    }
}

/// The text of a `queue full` refusal at `bound`.
fn full(bound: QueueBound, limit: usize) -> String {
    PostRefused::Full {
        bound,
        limit,
        payload: Message::Nil,
    }
    .to_string()
}

/// Reads `emit(name, payload)` against the room `queue` has now: the name checked, the
/// payload copied only as far as the bytes left, so a vast table is refused part way through.
/// Nothing is queued here; the Luau payload is only read.
/// Reads an event name: a string of 1 to the queue's name bound in bytes, checked by its
/// length before it is copied. The refusal is the text after the call's name.
pub(crate) fn read_event_name(queue: &EventQueue, name: &Value) -> Result<String, String> {
    let Value::String(s) = name else {
        return Err(format!("name must be a string, got {}", vm::a_type(name)));
    };
    let bytes = s.as_bytes();
    let max = queue.limits().name;
    if bytes.is_empty() || bytes.len() > max {
        let refused = PostRefused::Name {
            len: bytes.len(),
            max,
            payload: Message::Nil,
        };
        return Err(refused.to_string());
    }
    match std::str::from_utf8(&bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(_) => Err("name must be UTF-8 text".to_owned()),
    }
}

pub(crate) fn read_emit(
    queue: &EventQueue,
    name: &Value,
    payload: &Value,
) -> Result<(String, Message), EmitRefused> {
    let name = read_event_name(queue, name).map_err(EmitRefused::Other)?;
    let limits = queue.limits();
    let (events_free, bytes_free) = queue.room();
    if events_free == 0 {
        return Err(EmitRefused::Full(full(QueueBound::Pending, limits.pending)));
    }
    let room = bytes_free.saturating_sub(name.len());
    match Message::read_within(payload, "payload", room) {
        Ok(payload) => Ok((name, payload)),
        Err(e) if matches!(e.reason, TransferErrorKind::TooLarge { .. }) => {
            Err(EmitRefused::Full(full(QueueBound::Bytes, limits.bytes)))
        }
        Err(e) => Err(EmitRefused::Other(e.to_string())),
    }
}

/// `emit` in a worker VM or actor: read as the engine reads it, then queued through the
/// mailbox of the emitter's generation, to be routed at the drain. A `queue full` refusal is
/// also kept for the next drain's report, as the engine VM's are; it is attributed to the
/// authority of the running task (its context or actor), else to `fallback`'s.
fn emit_off_engine(
    mailbox: &DomainMailbox,
    fallback: Option<&Arc<Authority>>,
    name: Value,
    payload: Value,
) -> mlua::Result<()> {
    let queue = mailbox.event_queue();
    let event = match &name {
        Value::String(s) => Some(s.to_string_lossy()),
        _ => None,
    };
    let emitted = read_emit(queue, &name, &payload)
        .and_then(|(name, payload)| Ok(mailbox.emit_named(&name, payload)?));
    match emitted {
        Ok(()) => Ok(()),
        Err(EmitRefused::Full(text)) => {
            let text = format!("events.emit: {text}");
            if let Some(authority) = capability::current_arc().or_else(|| fallback.cloned()) {
                let mut diagnostic = Diagnostic::new(
                    DiagnosticKind::QueueFull,
                    authority.attribution().clone(),
                    text.clone(),
                );
                diagnostic.event = event;
                queue.note_refusal(diagnostic);
            }
            Err(mlua::Error::runtime(text))
        }
        Err(other) => Err(other.into_lua()),
    }
}

/// Installs `@skein/events` in a VM that is not the engine VM (a pool worker's VM of the
/// domain, or an actor's): `emit` posts to the domain's queue through `mailbox`, `on` raises.
/// `authority` names who refusals are attributed to when no task's authority is installed.
/// Answers the module.
pub(crate) fn install_off_engine_events(
    lua: &Lua,
    mailbox: DomainMailbox,
    authority: Option<Arc<Authority>>,
) -> mlua::Result<Value> {
    let module = lua.create_table()?;
    module.raw_set(
        "emit",
        lua.create_function(move |_, (name, payload): (Value, Value)| {
            emit_off_engine(&mailbox, authority.as_ref(), name, payload)
        })?,
    )?;
    module.raw_set(
        "on",
        lua.create_function(|_, _: mlua::MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime(WORKER_ON))
        })?,
    )?;
    module.raw_set(
        "wait",
        lua.create_function(|_, _: mlua::MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime(WORKER_WAIT))
        })?,
    )?;
    module.set_readonly(true);
    lua.set_named_registry_value(EVENTS_KEY, &module)?;
    Ok(Value::Table(module))
}
