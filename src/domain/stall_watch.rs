//! The stall check of [`run_until_idle`](super::ScriptDomain::run_until_idle): the verdict
//! that a domain whose host asked for it ([`DomainSpec::detect_stalls`](super::DomainSpec::detect_stalls))
//! can never progress again, and the words that name what its tasks wait on.
//!
//! The verdict is [`Liveness`]'s (see `vm/liveness.rs` for why it is sound in a closed world)
//! plus what only the engine thread knows: nothing ready in the engine VM, its mailbox empty,
//! no registered job live, no `@skein/worker` thread alive. All of it must hold, unchanged,
//! for a whole [`STALL_QUIET`] interval.

use std::time::{Duration, Instant};

use mlua::Lua;

use crate::shared::parked_pop_queue;
use crate::vm::{Liveness, Still, Vm, VmWaits, WaitOn, STALL_HORIZON, STALL_QUIET};

/// Where a stall check stands between two rounds of `run_until_idle`.
#[derive(Default)]
pub(super) struct StallWatch {
    /// Since when everything has been still, and the liveness seen then.
    since: Option<(Instant, Still)>,
}

impl StallWatch {
    /// Takes one more look; answers true once everything has stayed still for
    /// [`STALL_QUIET`]. `engine_still` is the engine thread's own part of the verdict.
    pub(super) fn stalled(&mut self, live: &Liveness, engine_still: bool) -> bool {
        let now = Instant::now();
        let seen = if engine_still { live.still(now) } else { None };
        let Some(seen) = seen else {
            self.since = None;
            return false;
        };
        match self.since {
            Some((since, earlier)) if earlier == seen => now.duration_since(since) >= STALL_QUIET,
            _ => {
                self.since = Some((now, seen));
                false
            }
        }
    }
}

/// How long a `run_until_idle` round waits at most while a stall check is on: short enough
/// that a stall is seen within about [`STALL_QUIET`] and a quarter.
pub(super) const STALL_ROUND: Duration = Duration::from_millis(STALL_QUIET.as_millis() as u64 / 4);

/// Each wait of the engine VM in words: `path:line waits on ...`, oldest task first, then the
/// pending promises no task awaits.
pub(super) fn describe(vm: &Vm) -> Vec<String> {
    let VmWaits { tasks, unawaited } = vm.waits();
    let mut out: Vec<String> = tasks
        .into_iter()
        .map(|wait| {
            let at = wait.at.unwrap_or_else(|| "a task".to_owned());
            format!("{at} waits on {}", wait_on(&vm.lua, &wait.on))
        })
        .collect();
    out.extend(
        unawaited
            .into_iter()
            .map(|(_, what)| format!("a {what} promise no task awaits is pending")),
    );
    out
}

fn wait_on(lua: &Lua, on: &WaitOn) -> String {
    match on {
        WaitOn::Promise(Some((id, "SharedQueue:pop"))) => match parked_pop_queue(lua, *id) {
            Some(name) => format!("SharedQueue:pop of queue '{name}' (no task can push it)"),
            None => "SharedQueue:pop (no task can push its queue)".to_owned(),
        },
        WaitOn::Promise(Some((_, what))) if what.starts_with("jobs.") => {
            format!("a {what} promise (its work waits on something nothing can settle)")
        }
        WaitOn::Promise(Some((_, what))) => format!("a {what} promise nothing can settle"),
        WaitOn::Promise(None) => "a promise nothing can settle".to_owned(),
        WaitOn::Frames => "task.waitFrames".to_owned(),
        WaitOn::Signal { call, name } => format!("{call} of event '{name}' (nothing can raise it)"),
        // A stalled run has no timer within the horizon: each one left is past it.
        WaitOn::Timer { delay } => format!(
            "{}, due more than {} s from now (past the stall horizon: counted as never)",
            if *delay { "task.delay" } else { "task.wait" },
            STALL_HORIZON.as_secs()
        ),
    }
}
