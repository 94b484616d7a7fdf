//! `jobs.parallelFor(module, entry, over, args?, opts?)`: one loop cut into chunk items.
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

use bytes::Bytes;
use mlua::{Lua, Table, Value};

use super::chunking::{self, whole, Over};
use super::gather::Gather;
use super::home::{charge_or_reclaim, home, refuse, HomeKind};
use super::item::{ChunkArgs, Item, ItemArgs};
use super::job::{JobShared, JOB_WEIGHT};
use super::options::{read_target, ParallelForOptions};
use super::reply::ReplyTo;
use crate::principal::capability::current_or;
use crate::value::{ExactValue, Held, Message};
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
    let chunks = chunking::chunk_count(opts.chunks, over.elements(), home.pool.exec.threads())
        .map_err(refuse)?;
    let module = with_caller_source(lua, |source| {
        core.modules.resolve(source, &module.to_string_lossy())
    })
    .map_err(|e| refuse(format!("jobs.parallelFor: {e}")))?;
    let entry = home.intern_entry(&entry.to_string_lossy());
    let (args, weight) = Message::read_weighed(&args, "args")
        .map_err(|e| refuse(format!("jobs.parallelFor: {e}")))?;
    let args = Arc::new(args);
    // The arguments are one copy every chunk shares: the chunk items share its charge, given
    // back when the last of them is dropped. The chunks' jobs share one charge too (each
    // chunk's weight, and their results as they come in), held until the promise is gone.
    // Both are taken before anything is queued.
    let runs = chunking::cut(&over, chunks);
    let budget = &home.principal.job_bytes;
    let charge = Arc::new(
        charge_or_reclaim(
            lua,
            &core,
            budget,
            runs.len().saturating_mul(JOB_WEIGHT),
            "jobs.parallelFor",
        )
        .map_err(refuse)?,
    );
    let carried = Arc::new(
        charge_or_reclaim(lua, &core, budget, weight, "jobs.parallelFor").map_err(refuse)?,
    );
    let jobs: Vec<Arc<JobShared>> = runs
        .iter()
        .map(|_| {
            let job = JobShared::new(
                opts.name.clone(),
                module.spec.clone(),
                entry.clone(),
                home.pool.clone(),
                home.principal.id,
                None,
            );
            job.hold(Held::Shared(charge.clone()));
            job
        })
        .collect();
    let cell = core.promises.borrow_mut().make("jobs.parallelFor");
    let reply = home.reply_to(cell.id());
    let gather = Gather::new(
        jobs.clone(),
        reply,
        home.principal.clone(),
        home.pool.clone(),
    );
    cell.set_canceller(gather.clone());
    for (i, (run, job)) in runs.iter().zip(jobs).enumerate() {
        let item = Item {
            principal: home.principal.clone(),
            authority: current_or(&home.principal.authority),
            job,
            module: module.path.clone(),
            entry: entry.clone(),
            args: ItemArgs::Chunk(ChunkArgs {
                index: i + 1,
                run: *run,
                args: args.clone(),
                data: over.data(run),
            }),
            deadline: opts.deadline,
            reply: ReplyTo::Chunk {
                gather: gather.clone(),
                index: i,
            },
            queued_at: home
                .principal
                .profile
                .is_some()
                .then(std::time::Instant::now),
            charge: Some(Held::Shared(carried.clone())),
        };
        match &home.kind {
            HomeKind::Engine | HomeKind::Actor { .. } => home.pool.inject(item),
            HomeKind::Worker { outbox, .. } => outbox.borrow_mut().push(item),
        }
    }
    promise_handle(lua, cell)
}
