//! `jobs.map(module, entry, list, opts?)`: `entry(element)` once per element of a list, on the
//! pool, answering one promise of the results in list order.
//!
//! The list is copied once at the call, under the bound of one copy, as a dispatch's arguments
//! are; a list past it (or a table that is not a list) is refused before anything is queued. Its
//! elements are then cut into chunks exactly as `parallelFor` cuts a range (`chunking.rs`: the
//! same `opts.chunks`, the same default) and moved, not copied again, into one item per chunk,
//! queued by `parallelFor`'s [`queue_chunks`]. On the worker a chunk runs all its elements in
//! one task (`worker/map_chunk.rs`), and the collector joins the chunks' result lists in order.
//!
//! A map has no `opts.key`: its chunks run on every worker, and a key binds items to one.

use mlua::{Lua, Value};

use super::home::{home, refuse};
use super::parallel_for::{queue_chunks, ChunkTarget, ChunkedCall};
use crate::jobs::leaves::chunking::{self, Over};
use crate::jobs::leaves::options::{read_target, MapOptions};
use crate::jobs::protocol::gather::Gathered;
use crate::jobs::protocol::item::{ItemArgs, MapChunk};
use crate::value::Message;
use crate::vm::{a_type, promise_handle, Outcome, VmCore};

pub(super) fn map(
    lua: &Lua,
    (module, entry, list, opts): (Value, Value, Value, Value),
) -> mlua::Result<Value> {
    let home = home(lua)?;
    let core = VmCore::of(lua)?;
    let (module, entry) = read_target("jobs.map", module, entry).map_err(refuse)?;
    let opts = MapOptions::read(&opts, home.principal.max_deadline).map_err(refuse)?;
    let target = ChunkTarget::resolve(lua, &home, &core, "jobs.map", &module, &entry)?;
    let (elements, weight) = read_list(&list).map_err(refuse)?;
    let total = elements.len();
    if total == 0 {
        // Nothing to run: the promise is settled before it is handed out.
        let cell = core.promises.borrow_mut().make("jobs.map");
        let answer = Outcome::Resolved(Message::List(Vec::new()));
        let _none_waits = core.promises.borrow_mut().settle(cell.id(), answer);
        return promise_handle(lua, cell);
    }
    let chunks = chunking::chunk_count(
        "jobs.map",
        opts.chunks,
        total as u64,
        home.pool.exec.threads(),
    )
    .map_err(refuse)?;
    let over = Over::Range {
        first: 1,
        last: total as i64,
    };
    let mut elements = elements.into_iter();
    let chunks = chunking::cut(&over, chunks)
        .iter()
        .map(|run| {
            let part = elements.by_ref().take(run.count() as usize).collect();
            ItemArgs::Map(Box::new(MapChunk {
                first: run.first as usize,
                total,
                elements: Message::List(part),
            }))
        })
        .collect();
    let call = ChunkedCall {
        call: "jobs.map",
        kind: Gathered::Elements,
        target,
        name: opts.name,
        deadline: opts.deadline,
    };
    queue_chunks(lua, &home, &core, call, chunks, weight)
}

/// Copies `list` (a table whose keys are exactly `1..n`, or the empty table) and answers its
/// elements with the copy's weight; refuses anything else, and a list past the bound of one
/// copy, naming the path where it ran out.
fn read_list(list: &Value) -> Result<(Vec<Message>, usize), String> {
    if !matches!(list, Value::Table(_)) {
        return Err(format!(
            "jobs.map: list must be a table whose keys are 1 to n, got {}",
            a_type(list)
        ));
    }
    let (copy, weight) =
        Message::read_weighed(list, "list").map_err(|e| format!("jobs.map: {e}"))?;
    match copy {
        Message::List(elements) => Ok((elements, weight)),
        Message::Map(entries) if entries.is_empty() => Ok((Vec::new(), weight)),
        _ => Err(
            "jobs.map: list must be a table whose keys are 1 to n, got a table with other keys \
             (a hole, or a key that is not a whole number from 1)"
                .to_owned(),
        ),
    }
}
