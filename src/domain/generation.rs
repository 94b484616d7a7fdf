//! Generations: `ScriptDomain::restart`, the end of a generation (restart or stop), the
//! mailboxes of ended generations, and engine events raised by the host.
//!
//! Each generation has its own mailbox. Everything of a generation that can post to the engine
//! thread (its items, its worker VMs, their settlements and forwarded queries) reaches it
//! through its principal, so after a restart what the old generation still sends lands in the
//! old mailbox, never in the new one. The domain keeps the old receivers and, each time it
//! drains, discards what they hold unapplied and unanswered, counting it
//! ([`ScriptDomain::stale_events`]); a receiver is let go once its last sender is gone.

use std::sync::Arc;

use crossbeam_channel::TryRecvError;

use super::{engine_vm, event_handlers, scheduler, services, DomainState, ScriptDomain};
use crate::error::{Error, Result};
use crate::jobs::{self, DomainMailbox, Generation};
use crate::value::Message;
use crate::vm::{FailureKind, JobFailure, Outcome};

impl ScriptDomain {
    /// Moves the domain to its next generation and answers it.
    ///
    /// First the old generation's `shutdown` handlers run (in its engine VM; a failure becomes a
    /// report), and every handler bound with `@skein/context` is dropped. Then the old generation ends with the reason `domain '<name>' restarted`: its queued pool
    /// items are refused unrun, its worker VMs are dropped, its shared store ends (a handle kept
    /// past this raises naming the reason), its key bindings and warm entries are forgotten,
    /// and its engine VM is dropped with its tasks and their promises. Every host
    /// [`Promise`](crate::Promise) of the old generation that is still pending rejects with the
    /// reason. None of the old generation's recorded commands is applied, and none of its
    /// forwarded queries is answered, even when they were already waiting in the mailbox:
    /// they are discarded and counted in [`stale_events`](Self::stale_events).
    ///
    /// Its registered jobs end with it: their functions lived in the old engine VM.
    ///
    /// The handlers scripts bound to contexts end with it too; the context declarations carry
    /// over, and the domain is [`Ready`](crate::DomainState::Ready) again.
    ///
    /// What carries over: the domain's id, name and plan, its engine services and kernels (they
    /// belong to the host), its contexts, its frame counter and frame time, and the reports not taken yet. The new
    /// generation has a fresh engine VM, shared store and engine-event log.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("score = 10")?;
    /// let before = domain.generation();
    /// let after = domain.restart()?;
    /// assert_eq!(after.get(), before.get() + 1);
    /// // The engine VM is new: its globals start over.
    /// assert_eq!(domain.eval("return score")?, Message::Nil);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Vm`] when the new engine VM can't be built, and [`Error::Refused`] when an
    /// engine service can't be installed in it; either way nothing has changed and the old
    /// generation runs on.
    pub fn restart(&mut self) -> Result<Generation> {
        let queue = self.event_handlers.queue().clone();
        let generation = Generation(self.generation().get() + 1);
        let (mailbox, rx) = DomainMailbox::new(queue.clone(), generation);
        let next = Arc::new(self.principal.next_generation(mailbox));
        debug_assert_eq!(next.id.generation, generation);
        let vm = engine_vm(&next, &self.pool, &self.reports)?;
        let registry = self.registry.next_generation(next.clone());
        vm.lua.set_app_data(registry.clone());
        scheduler::install_context_module(&vm.lua, &self.bindings)?;
        event_handlers::install_events_module(&vm.lua, &self.event_handlers)?;
        super::actor::install_engine(&vm.lua, &self.actors)?;
        for (name, _) in next.services.since(0) {
            let f = services::engine_function(&vm.lua, self.services.clone(), name.clone())?;
            jobs::install_at(&vm.lua, &name, f)
                .map_err(|e| Error::Refused(format!("restart: {e}")))?;
        }
        // The old generation's shutdown handlers run in its own engine VM, before it ends.
        self.shut_down();
        let ending = std::time::Instant::now();
        self.end_generation(&format!("domain '{}' restarted", self.name), true);
        // Attributed to the generation that ended: the principal is still the old one here.
        self.profiled(
            super::profile::ProfileKind::GenerationEnded,
            None,
            None,
            ending,
        );
        let old_rx = std::mem::replace(&mut self.rx, rx);
        self.stale_rx.get_mut().push(old_rx);
        self.actors.set_principal(next.clone());
        self.principal = next;
        // Dropping the old engine VM ends its tasks and the promises they awaited.
        self.vm = vm;
        self.registry = registry;
        // `shut_down` dropped the handlers (functions of the old engine VM); the contexts are the
        // host's and stay.
        // Events queued for the old generation are discarded and counted as stale; Luau
        // handlers of names went with the old VM.
        queue.advance(generation);
        self.event_handlers.next_generation(generation);
        self.state.set(DomainState::Ready);
        self.drain_stale();
        Ok(self.generation())
    }

    /// How many events of ended generations reached the domain and were discarded: replies,
    /// forwarded queries (never answered), recorded commands (never applied), reports, and
    /// raw and named events queued for an ended generation (a restart discards what waits in
    /// the event queue; a post through an old generation's mailbox is discarded too).
    pub fn stale_events(&self) -> u64 {
        self.stale.get()
    }

    /// Raises the engine event `name` with `payload` on the current generation. Every
    /// `engine.on(name, fn)` watcher registered before this call sees it once, as a fresh Luau
    /// value, when its VM next reaches its start point: a worker VM when it starts its next
    /// item, the engine VM at its next frame or pump.
    ///
    /// The log holds the last [`EVENT_LOG_BOUND`](crate::EVENT_LOG_BOUND) events; a VM that
    /// reaches its start point later than that delivers the ones still held and reports
    /// (source `engine events`) how many it missed.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("seen = {} engine.on('spawned', function(name) table.insert(seen, name) end)")?;
    /// domain.raise_engine_event("spawned", Message::String("orc".into()))?;
    /// // The engine VM delivers at its next frame.
    /// domain.frame(std::time::Duration::from_millis(16));
    /// assert_eq!(domain.eval("return seen[1]")?, Message::String("orc".into()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Refused`] when `name` is not 1 to 256 bytes.
    pub fn raise_engine_event(&self, name: &str, payload: Message) -> Result<()> {
        jobs::check_event_name(name.as_bytes(), "raise_engine_event").map_err(Error::Refused)?;
        self.principal.events.raise(name, payload);
        Ok(())
    }

    /// Ends the current generation: its principal, its key bindings (their queued items are
    /// refused unrun, naming `reason`), when `reject_pending` every host promise of the
    /// generation still pending, and then the resources it owns ([`ScriptDomain::own`]). A stop leaves a job that is running to settle as it ends (a
    /// worker that drops the job's VM fails it, naming the reason); a restart rejects it now.
    pub(super) fn end_generation(&self, reason: &str, reject_pending: bool) {
        self.principal.end(reason);
        // No worker outlives its generation: each is closed, interrupted and joined.
        self.actors.teardown();
        let id = self.principal.id;
        let pool = self.pool.shared();
        for item in pool.lanes.forget(|(principal, _)| *principal == id) {
            let failure = JobFailure {
                job: item.job.label(),
                module: Some(item.module.to_path_buf()),
                entry: Some(item.entry.to_string()),
                kind: FailureKind::Refused,
                message: reason.to_owned(),
                traceback: None,
            };
            let outcome = Outcome::Rejected(Arc::new(failure));
            jobs::reply(&item.principal, item.reply, outcome, pool);
        }
        if reject_pending {
            self.host_promises.borrow_mut().reject_all(reason);
        }
        // What the generation owns is released last, newest first, after everything that might
        // still have used it has stopped.
        for failure in self.owned.end_generation(id.generation) {
            self.report_release_failure(failure);
        }
    }

    /// Counts `n` stale events, and profiles each as an instant.
    pub(super) fn count_stale(&self, n: u64) {
        self.stale.set(self.stale.get() + n);
        if self.principal.profile.is_some() {
            let now = std::time::Instant::now();
            for _ in 0..n {
                self.profiled(super::profile::ProfileKind::StaleEvent, None, None, now);
            }
        }
    }

    /// Discards what reached the mailboxes of ended generations, counting it. Dropping a held
    /// settlement rejects its promise, which is how a job's host promise learns why.
    pub(super) fn drain_stale(&self) {
        let discarded = self.event_handlers.queue().take_discarded();
        self.count_stale(discarded);
        let mut receivers = self.stale_rx.borrow_mut();
        receivers.retain(|rx| loop {
            match rx.try_recv() {
                Ok(event) => {
                    self.count_stale(1);
                    drop(event);
                }
                Err(TryRecvError::Empty) => break true,
                Err(TryRecvError::Disconnected) => break false,
            }
        });
    }
}
