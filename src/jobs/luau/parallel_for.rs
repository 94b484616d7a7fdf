//! `jobs.parallelFor(module, entry, over, args?, opts?)`: one loop cut into chunk items; and
//! [`queue_chunks`], which queues the chunks of a `parallelFor` or a `jobs.map` (`map.rs`).
//!
//! Everything is checked and copied at the call: `args` once into a `Message` every chunk shares,
//! a buffer once into `Bytes` every chunk slices. Each chunk is an ordinary, stealable pool item
//! whose reply goes to the call's [`Gather`]; the promise homed in the caller's VM settles once,
//! when the collector has every result or the first failure.
//!
//! # Nested waiting
//!
//! A worker never blocks on a promise: `await` parks the calling task, and the worker's loop goes
//! on taking items, its own deque first. Chunks of a call made on a worker go to that worker's own
//! deque, so a chunk that awaits an inner `parallelFor` leaves its worker free to run the inner
//! chunks itself (siblings may steal some). No thread ever waits on another, so however many
//! workers are parked inside chunks, every queued chunk still has a thread that will take it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::{Lua, LuaString, Table, Value};

use super::home::{charge_or_reclaim, home, refuse, HomeKind, JobsHome};
use crate::jobs::leaves::chunking::{self, whole, Over};
use crate::jobs::leaves::options::{module_refused, read_target, ParallelForOptions};
use crate::jobs::protocol::gather::{Gather, Gathered};
use crate::jobs::protocol::item::{ChunkArgs, Item, ItemArgs};
use crate::jobs::protocol::job::{JobShared, JobTarget, JOB_WEIGHT};
use crate::jobs::protocol::reply::ReplyTo;
use crate::ledger::Held;
use crate::principal::capability::current_or;
use crate::value::{ExactValue, Message};
use crate::vm::{a_type, promise_handle, with_caller_source, VmCore};

/// Reads `over`, once `opts.stride` is known.
fn read_over(over: &Value, stride: Option<usize>) -> Result<Over, String> {
    let over = match over {
        Value::Integer(_) | Value::Number(_) => chunking::count(over)?,
        Value::Table(t) => read_range(t)?,
        Value::Buffer(b) => return chunking::buffer(Bytes::from(b.to_vec()), stride.unwrap_or(1)),
        other => {
            return Err(format!(
            "jobs.parallelFor: over must be a count, a {{ first, last }} range or a buffer, got {}",
            a_type(other)
        ))
        }
    };
    if let Some(stride) = stride {
        return Err(format!(
            "jobs.parallelFor: opts.stride ({stride}) sizes the elements of a buffer, and over is not one"
        ));
    }
    Ok(over)
}

fn read_range(t: &Table) -> Result<Over, String> {
    let first: Value = t.raw_get("first").map_err(|e| e.to_string())?;
    let last: Value = t.raw_get("last").map_err(|e| e.to_string())?;
    let first = whole(&first, "jobs.parallelFor: over.first")?;
    let last = whole(&last, "jobs.parallelFor: over.last")?;
    chunking::range(first, last)
}

pub(super) fn parallel_for(
    lua: &Lua,
    (module, entry, over, ExactValue(args), opts): (Value, Value, Value, ExactValue, Value),
) -> mlua::Result<Value> {
    let home = home(lua)?;
    let core = VmCore::of(lua)?;
    let (module, entry) = read_target("jobs.parallelFor", module, entry).map_err(refuse)?;
    let opts = ParallelForOptions::read(&opts, home.principal.max_deadline).map_err(refuse)?;
    let over = read_over(&over, opts.stride).map_err(refuse)?;
    let chunks = chunking::chunk_count(
        "jobs.parallelFor",
        opts.chunks,
        over.elements(),
        home.pool.exec.threads(),
    )
    .map_err(refuse)?;
    let target = ChunkTarget::resolve(lua, &home, &core, "jobs.parallelFor", &module, &entry)?;
    let (args, weight) = Message::read_weighed(&args, "args")
        .map_err(|e| refuse(format!("jobs.parallelFor: {e}")))?;
    // The arguments are one copy every chunk shares.
    let args = Arc::new(args);
    let chunks = chunking::cut(&over, chunks)
        .iter()
        .enumerate()
        .map(|(i, run)| {
            ItemArgs::Chunk(Box::new(ChunkArgs {
                index: i + 1,
                run: *run,
                args: args.clone(),
                data: over.data(run),
            }))
        })
        .collect();
    let call = ChunkedCall {
        call: "jobs.parallelFor",
        kind: Gathered::Chunks,
        target,
        name: opts.name,
        deadline: opts.deadline,
    };
    queue_chunks(lua, &home, &core, call, chunks, weight)
}

/// The module and entry every chunk of a call runs, resolved and interned once.
pub(super) struct ChunkTarget(Arc<JobTarget>);

impl ChunkTarget {
    /// Resolves `module` from the calling script, as `require` would; `call` names the function
    /// in a refusal.
    pub(super) fn resolve(
        lua: &Lua,
        home: &JobsHome,
        core: &VmCore,
        call: &str,
        module: &LuaString,
        entry: &LuaString,
    ) -> mlua::Result<ChunkTarget> {
        let module = with_caller_source(lua, |source| {
            core.modules.resolve(source, &module.to_string_lossy())
        })
        .map_err(|e| refuse(module_refused(call, "module", &e)))?;
        let entry = home.intern_entry(&entry.to_string_lossy());
        Ok(ChunkTarget(home.target(module, entry)))
    }
}

/// What every chunk of one `parallelFor` or `map` shares besides its arguments.
pub(super) struct ChunkedCall {
    /// `jobs.parallelFor` or `jobs.map`: the promise's kind, and the name in refusals.
    pub(super) call: &'static str,
    pub(super) kind: Gathered,
    pub(super) target: ChunkTarget,
    pub(super) name: Option<String>,
    pub(super) deadline: Duration,
}

/// Queues one chunk item per element of `chunks`, all replying to one collector, and answers
/// the call's promise. `weight` is what the chunks' arguments weigh together: a charge they
/// share, given back when the last chunk item is dropped. The chunks' jobs share one charge too
/// (each chunk's weight, and their results as they come in), held until the promise is gone.
/// Both are taken before anything is made, so a refusal leaves nothing queued.
pub(super) fn queue_chunks(
    lua: &Lua,
    home: &JobsHome,
    core: &VmCore,
    call: ChunkedCall,
    chunks: Vec<ItemArgs>,
    weight: usize,
) -> mlua::Result<Value> {
    let ChunkedCall {
        call,
        kind,
        target,
        name,
        deadline,
    } = call;
    let budget = &home.principal.job_bytes;
    let charge = Arc::new(
        charge_or_reclaim(
            lua,
            core,
            budget,
            // The chunks' jobs, and the one copy of the name they share.
            chunks
                .len()
                .saturating_mul(JOB_WEIGHT)
                .saturating_add(name.as_ref().map_or(0, String::len)),
            call,
        )
        .map_err(refuse)?,
    );
    let carried = Arc::new(charge_or_reclaim(lua, core, budget, weight, call).map_err(refuse)?);
    // One copy of the name, which every chunk's job shares.
    let name: Option<Arc<str>> = name.map(Arc::from);
    let jobs: Vec<Arc<JobShared>> = chunks
        .iter()
        .map(|_| {
            JobShared::dispatched(
                name.clone(),
                target.0.clone(),
                home.pool.clone(),
                home.principal.id,
                None,
                Some(Held::Shared(charge.clone())),
            )
        })
        .collect();
    let cell = core.promises.borrow_mut().make(call);
    let reply = home.reply_to(cell.id());
    let gather = Gather::new(
        kind,
        jobs.clone(),
        reply,
        home.principal.clone(),
        home.pool.clone(),
    );
    cell.set_canceller(gather.clone());
    for (i, (args, job)) in chunks.into_iter().zip(jobs).enumerate() {
        let item = Item {
            principal: home.principal.clone(),
            authority: current_or(&home.principal.authority),
            job,
            args,
            deadline,
            reply: ReplyTo::Chunk {
                gather: gather.clone(),
                index: i,
            },
            queued_at: home.principal.profile.is_some().then(Instant::now),
            charge: Some(Held::Shared(carried.clone())),
        };
        match &home.kind {
            HomeKind::Engine | HomeKind::Actor { .. } => home.pool.inject(item),
            HomeKind::Worker { outbox, .. } => outbox.borrow_mut().push(item),
        }
    }
    promise_handle(lua, cell)
}
