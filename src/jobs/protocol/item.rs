//! A pool item: one `jobs.dispatch`, one `jobs.parallelFor` or `jobs.map` chunk, one registered
//! job's call or one kernel call, on its way to a worker; and what its entry is called with.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::job::JobShared;
use super::principal_shared::PrincipalShared;
use super::reply::ReplyTo;
use crate::jobs::leaves::chunking::Run;
use crate::ledger::Held;
use crate::principal::capability::Authority;
use crate::principal::Principal;
use crate::value::Message;

/// What an item's entry is called with. The chunk and kernel forms are boxed, so an item of a
/// plain dispatch, the common one, is no larger than its message needs.
pub(crate) enum ItemArgs {
    /// A dispatch's `args`, copied once at the call.
    Plain(Message),
    /// A `parallelFor` chunk: its table is built in the worker VM, around `args` that every
    /// chunk of the call shares (one copy at the call) and its own slice of a buffer.
    Chunk(Box<ChunkArgs>),
    /// A `jobs.map` chunk: its elements, each passed to the entry in turn.
    Map(Box<MapChunk>),
    /// A kernel job's call: a native function of the host over its copied input. The worker
    /// runs it without touching any VM.
    Kernel(Box<KernelCall>),
}

/// A native function the host registered by name (`ScriptDomain::register_kernel`).
pub(crate) type Kernel = Arc<dyn Fn(Message) -> Result<Message, String> + Send + Sync>;

/// One run of a kernel: the function and the input it runs over.
pub(crate) struct KernelCall {
    pub(crate) kernel: Kernel,
    pub(crate) input: Message,
}

/// The parts of one chunk's `{ index, count, first, last, args, data }` table.
pub(crate) struct ChunkArgs {
    /// From 1.
    pub(crate) index: usize,
    pub(crate) run: Run,
    pub(crate) args: Arc<Message>,
    pub(crate) data: Option<Bytes>,
}

/// One chunk of a `jobs.map`: a run of the list's elements, moved out of the one copy made at
/// the call (each element is copied once, into the chunk that runs it).
pub(crate) struct MapChunk {
    /// The list index of its first element, from 1.
    pub(crate) first: usize,
    /// The length of the whole list, which failures name.
    pub(crate) total: usize,
    /// The chunk's elements, as one [`Message::List`] (built in the worker VM as one table).
    pub(crate) elements: Message,
}

/// How a failure of a `jobs.map` is named: by the list index of the element it happened in, of
/// the list's length (`element 7 of 100: <why>`), as a `parallelFor` names a chunk.
pub(crate) fn name_element(at: usize, total: usize, why: &str) -> String {
    format!("element {at} of {total}: {why}")
}

impl ItemArgs {
    /// Builds the entry's argument in the worker VM.
    pub(crate) fn to_lua(&self, lua: &mlua::Lua) -> mlua::Result<mlua::Value> {
        match self {
            ItemArgs::Plain(message) => message.to_lua(lua),
            ItemArgs::Chunk(chunk) => {
                let t = lua.create_table_with_capacity(0, 6)?;
                // Luau numbers, not integers: the bounds are within ±2^53, so exact.
                t.raw_set("index", chunk.index as f64)?;
                t.raw_set("count", chunk.run.count() as f64)?;
                t.raw_set("first", chunk.run.first as f64)?;
                t.raw_set("last", chunk.run.last as f64)?;
                // Pushed from the message, so a top-level integer stays an integer.
                t.raw_set("args", &*chunk.args)?;
                if let Some(data) = &chunk.data {
                    t.raw_set("data", lua.create_buffer(data)?)?;
                }
                Ok(mlua::Value::Table(t))
            }
            // The elements' table: the map's runner (`worker/map_chunk.rs`) calls the entry
            // with each and writes its result back in its place.
            ItemArgs::Map(chunk) => chunk.elements.to_lua(lua),
            ItemArgs::Kernel(call) => call.input.to_lua(lua),
        }
    }
}

/// One `jobs.dispatch`, or one chunk of a `jobs.parallelFor`, on its way to a worker.
pub(crate) struct Item {
    pub(crate) principal: Arc<PrincipalShared>,
    /// Its job, which also says what it runs ([`JobShared::target`]).
    pub(crate) job: Arc<JobShared>,
    pub(crate) args: ItemArgs,
    pub(crate) deadline: Duration,
    pub(crate) reply: ReplyTo,
    /// The authority of the code that dispatched it; its task on the worker runs under it.
    pub(crate) authority: Arc<Authority>,
    /// When a keyed item was dispatched, to measure how long it waited for its key's VM.
    pub(crate) queued_at: Option<Instant>,
    /// What its arguments hold of the generation's [`MAX_JOB_BYTES`](crate::DomainSpec::MAX_JOB_BYTES) while it waits and runs
    /// (shared by the chunks of one `parallelFor`, which share their arguments); given back
    /// when the item is dropped, or when a worker has built its arguments in a VM. `None` for
    /// the host's own items.
    pub(crate) charge: Option<Held>,
}

impl Item {
    /// The path of the module the item runs.
    pub(crate) fn module(&self) -> &Arc<Path> {
        &self.job.target.path
    }

    /// The entry the item runs.
    pub(crate) fn entry(&self) -> &Arc<str> {
        &self.job.target.entry
    }
}

/// A key's lane: the principal's keys are its own, so two domains using the same key string
/// never share a binding.
pub(crate) type LaneKey = (Principal, Bytes);
