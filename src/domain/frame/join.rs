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
//! or the one given to [`advance_within`](crate::ScriptDomain::advance_within)), counted from the
//! start of the advance over all its phases. A call still waiting when it runs out goes on in
//! a later frame, resumed by whichever frame's drain settles its work, and the frame names it
//! in [`AdvanceReport::still_waiting`](crate::frame::AdvanceReport::still_waiting).
//!
//! This file owns only the list of joined calls ([`PhaseJoin`]) and the wait, which works on
//! the current generation's engine VM and mailbox given to it; the phase that fills the list is
//! `phases.rs`, and the drain of the mailbox is the caller's (`events/drain.rs`).
//!
//! Its invariants: a call is joined only while one of its owner's tasks waits on pool work; the
//! wait resumes no task but the joined calls'; it ends by `until`, or at once when the domain
//! is interrupted, and names every call it left waiting.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::domain::frame::call_reports::{PhaseReport, StillWaiting};
use crate::domain::generation::GenerationState;
use crate::domain::interrupt::InterruptTarget;
use crate::executor::wake_queue::Waited;
use crate::vm::Owner;

/// One joined call: its owner (shared by the tasks it spawned; its identity is the call's
/// label) and when it began.
struct Joined {
    owner: Rc<Owner>,
    called: Instant,
}

/// The calls a phase joins, filled as its handlers are called.
#[derive(Default)]
pub(crate) struct PhaseJoin {
    joined: Vec<Joined>,
}

impl PhaseJoin {
    /// Joins the call `owner` made at `called`, when any of its tasks waits on pool work now.
    pub(crate) fn add(&mut self, owner: &Rc<Owner>, called: Instant) {
        if owner.waits_on_pool() {
            self.joined.push(Joined {
                owner: owner.clone(),
                called,
            });
        }
    }

    /// Whether no call waits on the pool.
    pub(crate) fn is_empty(&self) -> bool {
        self.joined.is_empty()
    }

    /// Ends the join of the phase `report` tells, which began at `started`: when a call waits
    /// on the pool, [`wait`](Self::wait)s for it until `until`, and the report takes how long
    /// that took, its new length and the calls still waiting.
    pub(crate) fn wait_into(
        self,
        report: &mut PhaseReport,
        started: Instant,
        until: Instant,
        current: &GenerationState,
        interrupt: &InterruptTarget,
        drain_mailbox: impl FnMut() -> bool,
    ) {
        if !self.is_empty() {
            let joining = Instant::now();
            self.wait(
                current,
                interrupt,
                until,
                &mut report.still_waiting,
                drain_mailbox,
            );
            report.joined = joining.elapsed();
            report.elapsed = started.elapsed();
        }
    }

    /// Waits for the pool work of the joined calls, serving `current`'s mailbox
    /// (`drain_mailbox`), and resumes them as it settles, until none waits on the pool, the
    /// domain is interrupted (`interrupt`) or `until` passes. Each call still waiting then is
    /// added to `still_waiting`.
    fn wait(
        mut self,
        current: &GenerationState,
        interrupt: &InterruptTarget,
        until: Instant,
        still_waiting: &mut Vec<StillWaiting>,
        mut drain_mailbox: impl FnMut() -> bool,
    ) {
        while !self.is_empty() {
            self.joined.retain(|j| j.owner.waits_on_pool());
            if self.is_empty() || interrupt.requested() {
                break;
            }
            let now = Instant::now();
            if now >= until {
                still_waiting.extend(self.joined.iter().map(|j| StillWaiting {
                    source: j.owner.identity.to_string(),
                    waited: now.saturating_duration_since(j.called),
                }));
                break;
            }
            // Parked on the mailbox: every reply, forwarded query and recorded command of the
            // joined work arrives there, and the first one wakes the engine thread.
            if current.rx.park_until(Some(until)) != Waited::TimedOut {
                drain_mailbox();
                let joined = &self.joined;
                current
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
