//! The frame's join: the handler calls of a phase that wait on pool work are resumed in the
//! same frame, in their phase, before the phases after it run.
//!
//! A phase calls its handlers one after another. A call that parks on a promise of pool work
//! (`jobs.dispatch`, `jobs.parallelFor`, `jobs.map`, `jobs.warm`), itself or through a task it
//! spawned (they share its [`Owner`]), is *joined*: the engine thread parks on its mailbox,
//! handles what arrives (settlements, the forwarded queries and recorded commands of that
//! work), resumes the joined calls' tasks a settlement made ready (no other task: those resume in
//! the frame's drain, as they would without a join), and goes on until no joined call waits on
//! the pool any more. A call that then waits on something else (a timer, a frame, an event)
//! has left the join: it goes on in a later frame as any task does.
//!
//! The wait is bounded by the frame's budget ([`DomainSpec::frame_budget`](crate::DomainSpec::frame_budget),
//! or the one given to [`advance_within`](ScriptDomain::advance_within)), counted from the
//! start of the advance over all its phases. A call still waiting when it runs out goes on in
//! a later frame, resumed by whichever frame's drain settles its work, and the frame names it
//! in [`AdvanceReport::still_waiting`](crate::frame::AdvanceReport::still_waiting).
//!
//! This file owns only the list of joined calls and the wait; the phase that fills the list is
//! `phases.rs`, and the mailbox it drains is `events/drain.rs`.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::frame::handler_label::HandlerLabel;
use crate::domain::ScriptDomain;
use crate::executor::wake_queue::Waited;
use crate::vm::Owner;

/// A handler call that still waited on pool work when its frame's budget ran out: it goes on
/// in a later frame, resumed when its work settles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StillWaiting {
    /// Which handler: `context 'game' update handler`.
    pub source: String,
    /// How long it had waited on the pool when the frame went on without it, from its call.
    pub waited: Duration,
}

/// One joined call: its owner (shared by the tasks it spawned), its label and when it began.
struct Joined {
    owner: Rc<Owner>,
    label: Arc<HandlerLabel>,
    called: Instant,
}

/// The calls a phase joins, filled as its handlers are called.
#[derive(Default)]
pub(crate) struct PhaseJoin {
    joined: Vec<Joined>,
}

impl PhaseJoin {
    /// Joins the call of `label` that `owner` made at `called`, when any of its tasks waits on
    /// pool work now.
    pub(crate) fn add(&mut self, owner: &Rc<Owner>, label: &Arc<HandlerLabel>, called: Instant) {
        if owner.waits_on_pool() {
            self.joined.push(Joined {
                owner: owner.clone(),
                label: label.clone(),
                called,
            });
        }
    }

    /// Whether no call waits on the pool.
    pub(crate) fn is_empty(&self) -> bool {
        self.joined.is_empty()
    }
}

impl ScriptDomain {
    /// Waits for the pool work of the calls in `join`, serving the mailbox, and resumes them
    /// as it settles, until none waits on the pool or `until` passes. Each call still waiting
    /// then is added to `still_waiting`.
    pub(crate) fn join(
        &self,
        mut join: PhaseJoin,
        until: Instant,
        still_waiting: &mut Vec<StillWaiting>,
    ) {
        while !join.is_empty() {
            join.joined.retain(|j| j.owner.waits_on_pool());
            if join.is_empty() || self.life.interrupt.requested() {
                break;
            }
            let now = Instant::now();
            if now >= until {
                still_waiting.extend(join.joined.iter().map(|j| StillWaiting {
                    source: j.label.to_string(),
                    waited: now.saturating_duration_since(j.called),
                }));
                break;
            }
            // Parked on the mailbox: every reply, forwarded query and recorded command of the
            // joined work arrives there, and the first one wakes the engine thread.
            if self.current.rx.park_until(Some(until)) != Waited::TimedOut {
                self.drain_mailbox();
                let joined = &join.joined;
                self.current
                    .vm
                    .resume_ready_of(|owner| joined.iter().any(|j| Rc::ptr_eq(&j.owner, owner)));
            }
        }
    }
}

/// Marks a phase that joins, from its first handler call to the end of its join: workers hold
/// off new items after a chunk's query while it is set (`PrincipalShared::joining`). Set before
/// the handlers run, since their chunks start, and ask, before the join begins. A relaxed flag:
/// it tunes where items run, never whether they do. Cleared when dropped, however the phase
/// ends.
pub(crate) struct Joining<'a>(&'a AtomicBool);

impl<'a> Joining<'a> {
    pub(crate) fn begin(flag: &'a AtomicBool) -> Joining<'a> {
        flag.store(true, Ordering::Relaxed);
        Joining(flag)
    }
}

impl Drop for Joining<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}
