//! A `jobs.map` chunk on its worker: started as one task of a small Luau runner
//! (`map_chunk.luau`) that calls the entry with each element in turn, and ended by reading the
//! results the runner wrote back in the elements' places ([`MapRun::outcome`]).
//!
//! Elements that do not yield all run in the chunk's first resume: one task, one owner and one
//! reply for the chunk, not for each element. An element that yields suspends the whole chunk,
//! which goes on from that element when resumed, as any task does.
//!
//! Each result is read as its own copy, under the bound of one copy, as a dispatch's result is;
//! their weight joins the call's job charge. A failure names the element it happened in: the
//! runner notes the running element in the chunk's table, and the completion reads it there.

use std::path::Path;
use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use crate::jobs::protocol::item::{name_element, MapChunk};
use crate::jobs::protocol::job::JobShared;
use crate::value::Message;
use crate::vm::{error_message, Embedded, FailureKind, JobFailure, Outcome, Resume};

/// The runner, compiled once per process and loaded once per VM.
static RUNNER: Embedded = Embedded::new("=skein map", include_str!("map_chunk.luau"));

/// Where a VM keeps its loaded runner.
const RUNNER_KEY: &str = "skein.jobs.mapRunner";

/// What the completion of a map chunk needs: the chunk's table in the VM, which holds the
/// results (and the running element) once the runner has been at it.
pub(super) struct MapRun {
    elements: Table,
    /// The list index of the chunk's first element.
    first: usize,
    count: usize,
    /// The list's length, which failures name.
    total: usize,
}

/// Builds the chunk's elements in the VM and answers the runner, its first resume and what the
/// completion reads; or why the elements could not be built.
pub(super) fn start(
    lua: &Lua,
    entry: Function,
    chunk: &MapChunk,
) -> Result<(Function, Resume, Option<MapRun>), String> {
    let built = (|| {
        let Value::Table(elements) = chunk.elements.to_lua(lua)? else {
            return Err(mlua::Error::runtime(
                "a map chunk's elements are not a list",
            ));
        };
        Ok((RUNNER.load_kept(lua, RUNNER_KEY)?, elements))
    })();
    let (runner, elements) = built.map_err(|e| {
        format!(
            "its elements could not be built in the worker's VM: {}",
            error_message(&e)
        )
    })?;
    let count = match &chunk.elements {
        Message::List(list) => list.len(),
        _ => 0,
    };
    let args = MultiValue::from_iter([
        Value::Function(entry),
        Value::Table(elements.clone()),
        Value::Number(count as f64),
    ]);
    let run = MapRun {
        elements,
        first: chunk.first,
        count,
        total: chunk.total,
    };
    Ok((runner, Resume::Args(args), Some(run)))
}

impl MapRun {
    /// The chunk's outcome: its results in element order, or its failure named by the element
    /// it happened in. `ran` is how the runner's task ended: a failure comes as the outcome a
    /// dispatch's task would have settled with (`job_outcome`'s), to be named here.
    pub(super) fn outcome(
        self,
        job: &JobShared,
        module: &Path,
        entry: &str,
        ran: Result<(), Outcome>,
    ) -> Outcome {
        if let Err(failure) = ran {
            let at = self.running();
            return self.named(at, failure);
        }
        let (results, weight) = match Message::read_slots(&self.elements, self.count, "result") {
            Ok(read) => read,
            Err((slot, e)) => {
                let failure = transfer(job, module, entry, e.to_string());
                return self.named(self.first + slot - 1, failure);
            }
        };
        match job.charge_result(weight) {
            Ok(()) => Outcome::Resolved(Message::List(results)),
            Err(_) => self.over_budget(job, module, entry, results),
        }
    }

    /// The list index of the element that was running: the runner notes it before each call.
    fn running(&self) -> usize {
        match self.elements.raw_get::<Value>("at") {
            Ok(Value::Integer(i)) if i >= 1 => self.first + i as usize - 1,
            Ok(Value::Number(n)) if n >= 1.0 => self.first + n as usize - 1,
            _ => self.first,
        }
    }

    /// Names a rejection by the element `at` (a list index); a cancel stays a cancel.
    fn named(&self, at: usize, outcome: Outcome) -> Outcome {
        match outcome {
            Outcome::Rejected(failure) => Outcome::Rejected(Arc::new(JobFailure {
                message: name_element(at, self.total, &failure.message),
                ..(*failure).clone()
            })),
            other => other,
        }
    }

    /// The chunk's results together would pass the job budget: charges them one by one to name
    /// the first that passes it (another job may have given some back meanwhile, and then all
    /// fit).
    #[cold]
    fn over_budget(
        &self,
        job: &JobShared,
        module: &Path,
        entry: &str,
        results: Vec<Message>,
    ) -> Outcome {
        for (k, result) in results.iter().enumerate() {
            if let Err(refusal) = job.charge_result(result.queue_weight()) {
                let failure = transfer(job, module, entry, format!("result: {refusal}"));
                return self.named(self.first + k, failure);
            }
        }
        Outcome::Resolved(Message::List(results))
    }
}

/// A result that could not cross, as `job_outcome` words it for a dispatch.
fn transfer(job: &JobShared, module: &Path, entry: &str, message: String) -> Outcome {
    Outcome::Rejected(Arc::new(JobFailure {
        job: job.label(),
        module: Some(module.to_path_buf()),
        entry: Some(entry.to_owned()),
        kind: FailureKind::Transfer,
        message,
        traceback: None,
    }))
}
