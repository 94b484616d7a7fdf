//! Where a domain is in its life: [`DomainState`] and the transitions between its states, and
//! the part of a domain that outlives its generations ([`Lifecycle`]): the state, the numbering
//! and load bound of new generations, the mailboxes of ended ones, what host services own for
//! its code, the interrupt target, and the hold of its VMs' limits on the pool's budget.
//! `Lifecycle`'s methods keep that bookkeeping: refusing an entry once the domain has stopped,
//! handing out generation numbers, following the generation whose code runs, and keeping and
//! draining the mailboxes of ended generations into the stale count. Its invariants are on the
//! type.
//!
//! The moves between states happen where the work is (`run_file`/`exec`, the scheduler,
//! `stop`, `restart`, `reload`).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::generation::owned::OwnedResources;
use super::interrupt::InterruptTarget;
use crate::error::{Error, Halt, Result};
use crate::jobs::{MailboxReceiver, PrincipalShared};
use crate::ledger::Charge;
use crate::principal::Generation;

/// What a domain keeps across its generations.
///
/// Its invariants: `last_generation` only grows (a discarded reload candidate's number is never
/// handed out again); a receiver in `stale_rx` belongs to an ended generation and goes once its
/// last sender is gone; `owned` and `interrupt` follow the generation whose code runs
/// ([`follow`](Self::follow)), a reload's candidate for the length of its load; `vms` is held
/// as long as any engine VM of the domain may live, so it is declared, in the domain, after the
/// current generation.
pub(crate) struct Lifecycle {
    /// Where the domain is in its life; shared with the completion of a loading script.
    pub(crate) state: Rc<Cell<DomainState>>,
    /// The highest generation number handed out: the current one, or a later reload
    /// candidate's that was discarded.
    pub(crate) last_generation: Cell<Generation>,
    /// How long a restart's or reload's load may take.
    pub(crate) load_bound: Duration,
    /// Native resources host services made for the domain's code
    /// ([`ScriptDomain::own`](crate::ScriptDomain::own)).
    pub(crate) owned: Rc<OwnedResources>,
    /// What an [`InterruptHandle`](crate::InterruptHandle) stops from another thread: kept on
    /// the current generation.
    pub(crate) interrupt: Arc<InterruptTarget>,
    /// The mailboxes of ended generations, drained into `stale` until their last sender goes.
    pub(crate) stale_rx: RefCell<Vec<MailboxReceiver>>,
    /// Events of ended generations that arrived and were discarded unapplied.
    pub(crate) stale: Cell<u64>,
    /// The memory limits of the domain's VMs, held on the pool's budget while it lives.
    pub(crate) _vms: Charge,
}

impl Lifecycle {
    /// Refuses `entry` on a stopped domain (named `domain`): its event queue is closed and its
    /// handlers gone for good, so a stopped domain is never brought back (make a new one).
    pub(crate) fn refuse_if_stopped(&self, entry: &'static str, domain: &str) -> Result<()> {
        if self.state.get() == DomainState::Stopped {
            return Err(Error::Stopped {
                entry,
                domain: domain.to_owned(),
                state: Halt::Stopped,
                new_generation: true,
            });
        }
        Ok(())
    }

    /// Hands `build` the next generation number. The number counts as handed out once `build`
    /// succeeds, even if what it built is later discarded.
    pub(crate) fn number_next<T>(&self, build: impl FnOnce(Generation) -> Result<T>) -> Result<T> {
        let generation = Generation(self.last_generation.get().get() + 1);
        let built = build(generation)?;
        self.last_generation.set(generation);
        Ok(built)
    }

    /// The code of `principal`'s generation runs from now on: what host services take is its
    /// own, and an interrupt ends it.
    pub(crate) fn follow(&self, principal: &Arc<PrincipalShared>) {
        self.owned.set_running(principal.id.generation);
        self.interrupt.follow(principal);
    }

    /// Keeps the mailbox receiver of a generation that has ended, to be drained as stale.
    pub(crate) fn keep_stale(&mut self, rx: MailboxReceiver) {
        self.stale_rx.get_mut().push(rx);
    }

    /// Counts `n` stale events.
    pub(crate) fn count_stale(&self, n: u64) {
        self.stale.set(self.stale.get() + n);
    }

    /// How many stale events were counted.
    pub(crate) fn stale(&self) -> u64 {
        self.stale.get()
    }

    /// Discards what reached the mailboxes of ended generations, calling `count` with 1 for
    /// each event before it drops, and lets a receiver go once its last sender is gone.
    /// Dropping a held settlement rejects its promise, which is how a job's host promise
    /// learns why.
    #[inline]
    pub(crate) fn drain_stale(&self, mut count: impl FnMut(u64)) {
        let mut receivers = self.stale_rx.borrow_mut();
        receivers.retain(|rx| {
            let mut events = Vec::new();
            let connected = rx.take_into(&mut events);
            for event in events {
                count(1);
                drop(event);
            }
            connected
        });
    }
}

/// Where a [`ScriptDomain`](crate::ScriptDomain) is in its life.
///
/// The transitions:
///
/// | from | to | when |
/// | --- | --- | --- |
/// | `Created` | `Ready` | [`ScriptDomain::new`](crate::ScriptDomain::new) has built the engine VM (`Created` is never seen after `new` returns) |
/// | `Ready`, `Failed` | `Loading` | [`run_file`](crate::ScriptDomain::run_file) or [`exec`](crate::ScriptDomain::exec) starts a main script |
/// | `Loading` | `Ready` | that script's task returns |
/// | `Loading` | `Failed` | that script does not compile, or its task raises |
/// | `Ready`, `Loading` | `Running` | the first [`run_phase`](crate::ScriptDomain::run_phase), [`advance`](crate::ScriptDomain::advance) or [`frame`](crate::ScriptDomain::frame) |
/// | `Running` | `Failed` | the main script that made the domain `Loading` raises after frames began (it had yielded) |
/// | any but `Stopped` | `Stopping` | [`stop`](crate::ScriptDomain::stop) (or `Drop`) begins: the `shutdown` phase runs |
/// | `Stopping` | `Stopped` | the generation has ended and the handlers are dropped |
/// | any but `Stopped` | `Loading` | [`restart`](crate::ScriptDomain::restart): the old generation has ended, the new one's load runs (a stopped domain refuses a restart or reload: a stop is final) |
/// | `Loading` | `Running` | that load ended well and the domain was `Running` before the restart (the `startup` phase has run) |
/// | `Loading` | `Ready` | that load ended well and the domain was not `Running` |
/// | `Loading` | `Failed` | that load failed |
/// | any but `Stopped` | as after a restart | [`reload`](crate::ScriptDomain::reload) whose load ended well; a failed reload changes nothing |
///
/// A script started while the domain is `Running` (more code for a live domain) leaves the
/// state alone. `Failed` is sticky until another main script loads or the domain restarts or
/// reloads:
/// handlers bound before the failure still run in their phases. Every main script's failure,
/// whether it decides the state or not, is a [`Report`](crate::Report) of kind
/// [`Script`](crate::ReportKind::Script).
///
/// ```
/// use skein::lifecycle::DomainState;
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// assert_eq!(domain.state(), DomainState::Ready);
/// domain.exec("x = 1")?;
/// assert_eq!(domain.state(), DomainState::Ready);
/// domain.stop();
/// assert_eq!(domain.state(), DomainState::Stopped);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DomainState {
    /// Being built.
    Created,
    /// A main script is running its first part (until it returns or raises).
    Loading,
    /// Built (and loaded, if a script was given); no phase has run yet.
    Ready,
    /// Phases or frames are running.
    Running,
    /// `stop` is running the shutdown handlers and ending the generation.
    Stopping,
    /// Ended: phases, advances and frames are refused.
    Stopped,
    /// The main script failed to compile or raised.
    Failed,
}

impl DomainState {
    /// The state's name, as `Display` writes it.
    pub fn name(self) -> &'static str {
        match self {
            DomainState::Created => "created",
            DomainState::Loading => "loading",
            DomainState::Ready => "ready",
            DomainState::Running => "running",
            DomainState::Stopping => "stopping",
            DomainState::Stopped => "stopped",
            DomainState::Failed => "failed",
        }
    }
}

impl fmt::Display for DomainState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
