//! What happens when an item's root task ends on its worker: the outcome its promise settles
//! with ([`job_outcome`]), and either the reply or, for a job that recorded engine-service
//! commands, a [`Settlement`] the engine thread delivers once it has applied them.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Lua, Value};
use rustc_hash::FxHashMap as HashMap;

use super::item_clock::ItemClock;
use super::map_chunk::MapRun;
use crate::jobs::protocol::job::JobShared;
use crate::jobs::protocol::keys::LaneTurn;
use crate::jobs::protocol::messages::DomainEvent;
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::jobs::protocol::reply::{reply, ReplyTo, Settlement};
use crate::principal::capability::Authority;
use crate::value::{Message, TransferError};
use crate::vm::{Completion, FailureKind, JobFailure, Outcome, Owner, ServiceCall, TaskFailure};

/// The jobs running in one worker VM, by their shared state's address.
pub(super) type Running = Rc<RefCell<HashMap<*const JobShared, Rc<Owner>>>>;

/// What an item's end needs once its entry has started: who it ran for, how to name it,
/// where its outcome goes, and what it holds until it replies.
pub(super) struct Finish {
    pub(super) principal: Arc<PrincipalShared>,
    /// The job, which also names what ran ([`JobShared::target`]).
    pub(super) job: Arc<JobShared>,
    pub(super) reply_to: ReplyTo,
    /// The authority its recorded commands apply under: the one it ran with.
    pub(super) command_authority: Arc<Authority>,
    pub(super) clock: Option<ItemClock>,
    pub(super) turn: Option<LaneTurn>,
    pub(super) pool: Arc<PoolShared>,
    /// A `jobs.map` chunk's results and running element, read when it ends.
    pub(super) map: Option<MapRun>,
}

/// How a job's root task ended, its first value already read: the copy of what it returned
/// (or why that could not be copied), or why it failed.
pub(super) type JobResult = Result<Result<(Message, usize), TransferError>, TaskFailure>;

impl Finish {
    /// The item's end: finishes its hand-off, sends its profile event, and replies (or settles
    /// after the commands its tasks recorded).
    #[inline(always)]
    pub(super) fn end(self, result: JobResult, commands: Vec<ServiceCall>) {
        let Finish {
            principal,
            job,
            reply_to,
            command_authority,
            clock,
            turn,
            pool,
            map,
        } = self;
        job.handoff.finish();
        let (module, entry) = (&*job.target.path, &*job.target.entry);
        let outcome = match map {
            None => job_outcome(&job, module, entry, result),
            Some(map) => {
                // The runner answers nothing: the results are in the chunk's table.
                let ran = result
                    .map(drop)
                    .map_err(|failure| job_outcome(&job, module, entry, Err(failure)));
                map.outcome(&job, module, entry, ran)
            }
        };
        if let Some(clock) = clock {
            clock.finish(&principal, &job);
        }
        if commands.is_empty() {
            reply(&principal, reply_to, outcome, &pool);
            drop(turn);
        } else {
            let settlement = (reply_to, outcome, turn);
            settle_after_commands(
                &principal,
                job,
                (commands, command_authority),
                settlement,
                &pool,
            );
        }
    }
}

/// The completion of an item whose root task stayed suspended after its first run: forgets the
/// job in `running` and ends the item ([`Finish::end`]) with the first value it returns.
pub(super) fn completion(finish: Finish, running: Running) -> Completion {
    let key = Arc::as_ptr(&finish.job);
    Box::new(move |_lua: &Lua, result, commands| {
        running.borrow_mut().remove(&key);
        let result = result.map(|values| {
            let first = values.into_iter().next().unwrap_or(Value::Nil);
            Message::read_weighed(&first, "result")
        });
        finish.end(result, commands);
    })
}

/// Turns a finished job's result into the outcome its promise settles with.
#[inline]
pub(super) fn job_outcome(
    job: &JobShared,
    module: &Path,
    entry: &str,
    result: JobResult,
) -> Outcome {
    let failure = |kind, message, traceback| {
        Outcome::Rejected(Arc::new(JobFailure {
            job: job.label(),
            module: Some(module.to_path_buf()),
            entry: Some(entry.to_owned()),
            kind,
            message,
            traceback,
        }))
    };
    match result {
        Ok(Ok((message, weight))) => match job.charge_result(weight) {
            Ok(()) => Outcome::Resolved(message),
            Err(refusal) => failure(FailureKind::Transfer, format!("result: {refusal}"), None),
        },
        Ok(Err(e)) => failure(FailureKind::Transfer, e.to_string(), None),
        Err(TaskFailure::Cancelled) => Outcome::Cancelled,
        Err(TaskFailure::Raised { message, traceback }) => {
            failure(FailureKind::Raised, message, Some(traceback))
        }
        Err(f @ (TaskFailure::Deadline(_) | TaskFailure::Bound(_))) => {
            failure(FailureKind::Deadline, f.to_string(), None)
        }
        Err(f @ TaskFailure::Panicked(_)) => failure(FailureKind::Panicked, f.to_string(), None),
    }
}

/// Sends a job that recorded commands to its engine thread, which applies them and only then
/// delivers the outcome. When the domain is gone nothing is applied, and the settlement, dropped
/// undelivered, rejects the promise.
fn settle_after_commands(
    principal: &Arc<PrincipalShared>,
    job: Arc<JobShared>,
    (commands, authority): (Vec<ServiceCall>, Arc<Authority>),
    settlement: (ReplyTo, Outcome, Option<LaneTurn>),
    pool: &Arc<PoolShared>,
) {
    let (reply_to, outcome, turn) = settlement;
    let then = Settlement::new(
        reply_to,
        outcome,
        job,
        principal.clone(),
        pool.clone(),
        turn,
    );
    if !principal.is_alive() {
        // The generation has ended: its commands are never applied, and the settlement,
        // dropped here, rejects the promise saying so.
        return drop(then);
    }
    // A refused post hands the event back; dropping it rejects the promise.
    drop(principal.mailbox.post_or_return(DomainEvent::Apply {
        commands,
        then: Some(Box::new(then)),
        authority: Some(authority),
    }));
}
