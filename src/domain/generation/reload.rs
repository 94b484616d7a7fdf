//! `ScriptDomain::reload`: the next generation is built beside the running one, loaded and
//! checked there, and swapped in only when its load succeeds; a candidate that fails is
//! discarded whole and the running generation never notices.
//!
//! The candidate runs by being swapped into the domain for the length of its load
//! (`swap_generation`), so it is pumped by the same code that pumps any generation, and the
//! running generation's frames, phases, mailbox and tasks wait untouched meanwhile.

use crate::domain::generation::load::LoadFailure;
use crate::domain::generation::GenerationState;
use crate::domain::{DomainState, Load, Report, ReportKind, ScriptDomain};
use crate::error::{Error, Result};
use crate::principal::Generation;

impl ScriptDomain {
    /// Builds the domain's next generation beside the running one, runs `load` in it, and
    /// swaps it in only if the load succeeds; answers the generation running afterwards.
    ///
    /// The candidate has everything a generation has of its own: a principal and mailbox, a
    /// shared store, an engine VM with the host's engine services and kernels, and its own
    /// context bindings, named-event handlers and workers. Its load is pumped as
    /// [`restart`](Self::restart)'s is, with the running generation held aside: no frame,
    /// phase, task or mailbox event of the running generation is touched while it loads.
    ///
    /// **Success** (the load compiled and its task returned): the running generation's
    /// `shutdown` handlers run and it ends exactly as a restart ends it, with the reason
    /// `domain '<name>' reloaded` (its queued items refused, its workers joined, what it owns
    /// released, its stale events discarded and counted); the candidate becomes the current
    /// generation, keeping what its load bound, spawned, owned and emitted. A domain that was
    /// [`Running`](DomainState::Running) runs `startup` and is `Running`; any other is
    /// [`Ready`](DomainState::Ready).
    ///
    /// **Failure** (see [`LoadStage`](crate::lifecycle::LoadStage)): nothing of the running generation
    /// changes: its state, globals, handlers, generation number, workers, owned resources,
    /// key bindings and pending work. The candidate is discarded whole: its queued pool items
    /// are refused unrun, its workers are closed and joined, what it took through a
    /// [`ResourceOwner`](crate::lifecycle::ResourceOwner) is released, its events and late replies are
    /// discarded and counted in [`stale_events`](Self::stale_events), and none of its handlers
    /// ever runs. The failure is also a [`Report`] with source `reload`, so a host that ignores
    /// the error still sees it.
    ///
    /// A failed candidate still used its generation number (its events were stamped with it):
    /// the next generation built gets the number after it, while
    /// [`generation`](Self::generation) stays the running one's.
    ///
    /// ```
    /// use skein::lifecycle::{Load, LoadStage};
    /// use skein::{DomainSpec, Error, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("ui"))?;
    /// domain.exec("theme = 'dark'")?;
    ///
    /// // Broken code: the running generation is kept as it was.
    /// let err = domain.reload(Load::source("ui v2", "theme = ")).unwrap_err();
    /// assert!(matches!(err, Error::ReloadFailed { stage: LoadStage::Compile, .. }), "{err}");
    /// assert!(err.to_string().starts_with("reload: the new generation failed to compile"));
    /// assert_eq!(domain.generation().get(), 1);
    /// assert_eq!(domain.eval("return theme")?, Message::String("dark".into()));
    /// assert_eq!(domain.take_reports()[0].source, "reload");
    ///
    /// // Good code: it replaces the running generation. The failed candidate used number 2.
    /// let now = domain.reload(Load::source("ui v3", "theme = 'light'"))?;
    /// assert_eq!(now.get(), 3);
    /// assert_eq!(domain.eval("return theme")?, Message::String("light".into()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ReloadFailed`] naming the stage the load failed at and its error text.
    /// [`Error::Vm`] or [`Error::Name`] when the candidate's engine VM can't be built, as for
    /// `restart`; nothing has changed then either. [`Error::Stopped`] for a stopped domain, as
    /// for `restart`.
    pub fn reload(&mut self, load: Load) -> Result<Generation> {
        self.refuse_if_stopped("reload")?;
        let was_running = self.life.state.get() == DomainState::Running;
        let mut candidate = self.build_generation()?;
        let generation = candidate.generation();
        self.event_handlers.queue().begin_candidate(generation);
        self.swap_generation(&mut candidate);
        let loaded = self.run_load(&load);
        self.swap_generation(&mut candidate);
        match loaded {
            Ok(()) => {
                self.shut_down();
                self.end_generation(&format!("domain '{}' reloaded", self.name), true);
                self.install_generation(candidate);
                self.start_again(was_running);
                Ok(self.generation())
            }
            Err(failure) => {
                self.discard_candidate(candidate, &failure);
                let error = Error::ReloadFailed {
                    stage: failure.stage,
                    message: failure.message,
                };
                self.reporting
                    .keep(Report::new(ReportKind::Load, "reload", error.to_string()));
                Err(error)
            }
        }
    }

    /// Ends a candidate whose load failed, leaving the running generation as it was: the
    /// candidate is swapped in only to be ended as a generation ends (without its shutdown
    /// handlers, and without touching the host's promises, which are the running
    /// generation's), then dropped.
    fn discard_candidate(&mut self, mut candidate: GenerationState, failure: &LoadFailure) {
        let generation = candidate.generation();
        let reason = format!(
            "domain '{}' discarded generation {}: its reload failed to {}",
            self.name,
            generation.get(),
            failure.stage
        );
        self.swap_generation(&mut candidate);
        self.end_generation(&reason, false);
        self.swap_generation(&mut candidate);
        self.event_handlers.discard_generation(generation);
        self.event_handlers.queue().drop_candidate(generation);
        // What its work still sends lands in its mailbox, which is drained as stale.
        self.life.stale_rx.get_mut().push(candidate.into_rx());
        self.drain_stale();
    }
}
