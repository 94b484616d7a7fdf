//! [`ScriptDomain`]'s methods that run the domain's code outside frames: main scripts and host
//! chunks, generations (restart, reload, what a generation owns), the pump and
//! `run_until_idle`, the event queue's drain, named events and routes, host dispatch, and the
//! interrupt handle. Each method puts the domain's parts together in a few lines; the logic is
//! the parts':
//!
//! | where | what |
//! | --- | --- |
//! | `generation/mod.rs` | `GenerationState`: building a generation's engine VM and the next generation beside it, ending a generation's work, raising engine events |
//! | `generation/load.rs` | [`Load`] and a load's task: started in a generation, waited for within the load bound |
//! | `generation/owned.rs` | `OwnedResources`: what host services own for the domain's code, released per generation |
//! | `lifecycle.rs` | `Lifecycle`: the state, generation numbers, which generation runs, the ended generations' mailboxes and the stale count |
//! | `scripts.rs` | main scripts and host chunks started in the engine VM, and the state a main script decides |
//! | `interrupt.rs` | [`InterruptHandle`] and the target it shares with the domain |
//! | `events/drain.rs` | the current generation's mailbox: each event handled under the authority that sent it |
//! | `events/handlers.rs` | `EventHandlers`: the event queue's drain, named handlers and routes |
//! | `pump.rs` | a pump round's steps and `run_until_idle`'s checks between rounds |
//! | `host_dispatch.rs` | the host's dispatch into the current generation, and its keys |
//!
//! A restart and a reload take the same steps in the same order: build the next generation
//! (its number is used from then on), run the old generation's `shutdown` handlers, end it
//! ([`end_generation`](ScriptDomain::end_generation): its work, then what it owns), install
//! the next one ([`install_generation`](ScriptDomain::install_generation), in the drop order
//! `GenerationState` documents), and, once its load has run, start it again. A restart runs
//! the load in the installed generation, the old one gone; a reload runs it before anything
//! else, with the candidate swapped in ([`swap_generation`](ScriptDomain::swap_generation))
//! so that it is pumped by the same code that pumps any generation while the running
//! generation's frames, phases, mailbox and tasks wait untouched. A candidate whose load fails
//! is ended and dropped, and the running generation never notices.

use std::path::Path;
use std::time::Instant;

use mlua::MultiValue;

use super::frame::call_reports::EventReport;
use super::generation::assemble::EngineSetup;
use super::generation::load::LoadFailure;
use super::generation::GenerationState;
use super::pump::{IdleRun, Next, Outstanding, PumpCounts, PumpReport};
use super::script_handle::ScriptHandle;
use super::{script_file, scripts};
use super::{
    DomainMailbox, DomainState, InterruptHandle, Load, Report, ReportKind, ResourceId,
    ResourceOwner, ScriptDomain,
};
#[cfg(doc)]
use crate::error::NameRefusal;
use crate::error::{Error, Result};
use crate::job::JobOptions;
use crate::jobs::Promise;
use crate::principal::profile::ProfileKind;
use crate::principal::{Generation, Phase};
use crate::shared::SharedStore;
use crate::value::Message;
use crate::vm;

impl ScriptDomain {
    /// Moves the domain to its next generation, runs `load` in it, and answers the generation.
    ///
    /// First the old generation's `shutdown` handlers run (in its engine VM; a failure becomes a
    /// report), and every handler bound with `@skein/context` is dropped. Then the old
    /// generation ends with the reason `domain '<name>' restarted`: its queued pool
    /// items are refused unrun, its workers (`@skein/worker`) are closed and joined, its worker
    /// VMs are dropped, its shared store ends (a handle kept
    /// past this raises naming the reason), its key bindings and warm entries are forgotten,
    /// what it [owns](Self::own) is released, and its engine VM is dropped with its tasks and
    /// their promises. Every host
    /// [`Promise`] of the old generation that is still pending rejects with the
    /// reason. None of the old generation's recorded commands is applied, and none of its
    /// forwarded queries is answered, even when they were already waiting in the mailbox:
    /// they are discarded and counted in [`stale_events`](Self::stale_events).
    ///
    /// Its registered jobs end with it: their functions lived in the old engine VM. The
    /// handlers scripts bound to contexts and to named events end with it too; the context
    /// declarations and the host's event handlers and routes carry over.
    ///
    /// Then `load` runs in the new engine VM (see [`Load`]). When it ends well, a domain that
    /// was [`Running`](crate::lifecycle::DomainState::Running) starts again: the `startup` phase runs (its
    /// failures become reports) and the domain is `Running`; any other domain is
    /// [`Ready`](crate::lifecycle::DomainState::Ready).
    ///
    /// A restart is destructive: the old generation is gone before the load runs. When the
    /// load fails, the domain is [`Failed`](crate::lifecycle::DomainState::Failed) in the new generation,
    /// with nothing of the old one; what the load did before it failed stays, as after a main
    /// script that fails. Another restart recovers. To keep the old generation when the new
    /// code is broken, use [`reload`](Self::reload).
    ///
    /// What carries over: the domain's id, name and plan, its engine services and kernels (they
    /// belong to the host), its contexts, its frame counter and frame time, and the reports not taken yet. The new
    /// generation has a fresh engine VM, shared store and engine-event log.
    ///
    /// ```
    /// use skein::lifecycle::{DomainState, Load};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("score = 10")?;
    /// let before = domain.generation();
    /// let after = domain.restart(Load::source("level 2", "level = 2"))?;
    /// assert_eq!(after.get(), before.get() + 1);
    /// // The engine VM is new: its globals start over, with what the load set.
    /// assert_eq!(domain.eval("return score")?, Message::Nil);
    /// assert_eq!(domain.eval("return level")?, Message::Number(2.0));
    ///
    /// // A load that fails leaves the domain failed, in a generation that has moved on.
    /// let err = domain.restart(Load::source("level 3", "error('no map')")).unwrap_err();
    /// assert!(err.to_string().contains("no map"), "{err}");
    /// assert_eq!(domain.state(), DomainState::Failed);
    /// assert_eq!(domain.generation().get(), after.get() + 1);
    /// assert_eq!(domain.eval("return level")?, Message::Nil);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Script`] with the load's error text when the load fails (the generation has
    /// moved on, see above; the failure is also a [`Report`] with source
    /// `restart`). [`Error::Vm`] when the new engine VM can't be built, and [`Error::Name`]
    /// ([`NameRefusal::ServicePath`]) when an engine service can't be installed in it; either
    /// way nothing has changed and the old generation runs on. [`Error::Stopped`] for a domain
    /// that is [`Stopped`](DomainState::Stopped): a stop is final, and nothing changes.
    pub fn restart(&mut self, load: Load) -> Result<Generation> {
        self.refuse_if_stopped("restart")?;
        let was_running = self.life.state.get() == DomainState::Running;
        let next = self.build_generation()?;
        // The old generation's shutdown handlers run in its own engine VM, before it ends.
        self.shut_down();
        self.end_generation(&format!("domain '{}' restarted", self.name), true);
        self.install_generation(next);
        self.life.state.set(DomainState::Loading);
        match self.run_load(&load) {
            Ok(()) => {
                self.start_again(was_running);
                Ok(self.generation())
            }
            Err(failure) => {
                self.life.state.set(DomainState::Failed);
                self.reporting.keep(Report::new(
                    ReportKind::Load,
                    "restart",
                    failure.message.clone(),
                ));
                Err(Error::Script(failure.message))
            }
        }
    }

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
    /// [`ResourceOwner`] is released, its events and late replies are
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
        // The candidate loads swapped in, pumped as any generation is, while the running
        // generation waits aside untouched.
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
                let error = failure.into_reload_error();
                self.reporting
                    .keep(Report::new(ReportKind::Load, "reload", error.to_string()));
                Err(error)
            }
        }
    }

    /// Refuses `entry` on a stopped domain: its event queue is closed and its handlers gone for
    /// good, so a stopped domain is never brought back (make a new one).
    pub(crate) fn refuse_if_stopped(&self, entry: &'static str) -> Result<()> {
        self.life.refuse_if_stopped(entry, &self.name)
    }

    /// Builds the next generation beside the current one, which it does not touch: a new
    /// principal and mailbox, an engine VM with the domain's modules, engine services and
    /// kernels installed, no handlers and no workers. Its number is used from here on, even
    /// if it is later discarded.
    ///
    /// # Errors
    /// As [`restart`](Self::restart) when the VM can't be built.
    pub(crate) fn build_generation(&self) -> Result<GenerationState> {
        let host = EngineSetup {
            pool: &self.pool,
            reports: self.reporting.reports(),
            event_handlers: &self.event_handlers,
            domain_name: &self.name,
            interrupt: &self.life.interrupt,
        };
        self.life
            .number_next(|generation| self.current.next(generation, &host, &self.frames.services))
    }

    /// Runs `load` in the generation installed now and pumps the domain until its task ends.
    pub(crate) fn run_load(&self, load: &Load) -> Result<(), LoadFailure> {
        let Some(task) = self.current.start_load(load)? else {
            return Ok(());
        };
        task.finish(self.life.load_bound, |until| {
            self.pump_once_until(true, false, Some(until))
        })
    }

    /// Trades the domain's current generation with `other` in one move: after it, the domain
    /// runs as the generation `other` held, and `other` holds the one it ran as.
    pub(crate) fn swap_generation(&mut self, other: &mut GenerationState) {
        std::mem::swap(&mut self.current, other);
        self.life.follow(&self.current.principal);
    }

    /// Makes `next` the current generation for good, after the current one has ended: its
    /// mailbox joins the ended ones (drained into `stale_events`), its engine VM is dropped
    /// with its tasks, and what waits in the event queue for it is discarded and counted.
    pub(crate) fn install_generation(&mut self, next: GenerationState) {
        let ended = std::mem::replace(&mut self.current, next);
        self.life.follow(&self.current.principal);
        let generation = self.generation();
        // The order below is the generation's drop order (see `GenerationState`): the
        // receiver first joins the stale ones, then the engine VM goes, ending its tasks and
        // the promises they awaited, and what that posted is drained before the rest goes.
        self.life.keep_stale(ended.rx);
        drop(ended.vm);
        self.event_handlers.queue().advance(generation);
        self.event_handlers.next_generation(generation);
        self.drain_stale();
    }

    /// A generation has loaded: a domain that was running runs `startup` and is `Running`
    /// again; any other is `Ready`.
    pub(crate) fn start_again(&self, was_running: bool) {
        self.life.state.set(DomainState::Ready);
        if was_running {
            if let Ok(_entered) = self.enter("startup") {
                self.current.started_up.set(true);
                self.broadcast_reporting(Phase::Startup);
            }
        }
    }

    /// Ends the current generation: its principal, its key bindings (their queued items are
    /// refused unrun, naming `reason`), when `reject_pending` every host promise of the
    /// generation still pending, and then the resources it owns ([`ScriptDomain::own`]). A job
    /// of the generation that is running on a worker is interrupted at its next interrupt
    /// check (its VM runs with the principal's token, and every worker's signal is raised), and
    /// a stop leaves it to settle as it ends (a worker that drops the job's VM fails it, naming
    /// the reason); a restart rejects it now.
    pub(crate) fn end_generation(&self, reason: &str, reject_pending: bool) {
        let ending = Instant::now();
        self.current.end(reason, reject_pending, self.pool.shared());
        // What the generation owns is released last, newest first, after everything that might
        // still have used it has stopped.
        for failure in self.life.owned.end_generation(self.generation()) {
            self.report_release_failure(failure);
        }
        // A stop's teardown is part of its `DomainStopped`; a restart's or reload's is its own
        // event, attributed to the generation that ended (still the principal here).
        if self.life.state.get() != DomainState::Stopping {
            let kind = ProfileKind::GenerationEnded;
            self.profiled(kind, None, None, ending);
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
        self.life.keep_stale(candidate.into_rx());
        self.drain_stale();
    }

    /// How many events of ended generations reached the domain and were discarded: replies,
    /// forwarded queries (never answered), recorded commands (never applied), reports, and
    /// raw and named events queued for an ended generation (a restart discards what waits in
    /// the event queue; a post through an old generation's mailbox is discarded too).
    pub fn stale_events(&self) -> u64 {
        self.life.stale()
    }

    /// Counts `n` stale events, and profiles each as an instant.
    pub(crate) fn count_stale(&self, n: u64) {
        self.life.count_stale(n);
        if self.current.principal.profile.is_some() {
            let now = Instant::now();
            for _ in 0..n {
                self.profiled(ProfileKind::StaleEvent, None, None, now);
            }
        }
    }

    /// Discards what reached the mailboxes of ended generations, counting it. Dropping a held
    /// settlement rejects its promise, which is how a job's host promise learns why.
    pub(crate) fn drain_stale(&self) {
        let discarded = self.event_handlers.queue().take_discarded();
        self.count_stale(discarded);
        self.life.drain_stale(|n| self.count_stale(n));
    }

    /// Raises the engine event `name` with `payload` on the current generation. Every
    /// `engine.on(name, fn)` watcher registered before this call sees it once, as a fresh Luau
    /// value, when its VM next reaches its start point: a worker VM when it starts its next
    /// item, the engine VM at its next frame or pump.
    ///
    /// The log holds the last [`EVENT_LOG_BOUND`](crate::DomainSpec::EVENT_LOG_BOUND) events; a VM that
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
    /// [`Error::Name`] ([`NameRefusal::EventName`]) when `name` is not 1 to 256 bytes.
    pub fn raise_engine_event(&self, name: &str, payload: impl Into<Message>) -> Result<()> {
        self.current.raise_engine_event(name, payload.into())
    }

    /// Takes ownership of a native resource a host service made for this domain's code:
    /// `release` runs once, when [`release`](Self::release) names it, or at the end of the
    /// current generation (a restart or a stop), newest first. `kind` is for
    /// [`owned_resources`](Self::owned_resources) and reports.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let log = Rc::new(RefCell::new(Vec::new()));
    /// for name in ["socket", "texture"] {
    ///     let log = log.clone();
    ///     domain.own(name, move || log.borrow_mut().push(name));
    /// }
    /// assert_eq!(domain.owned_resources().len(), 2);
    /// domain.stop();
    /// assert_eq!(*log.borrow(), ["texture", "socket"]); // newest first
    /// assert!(domain.owned_resources().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn own(&self, kind: impl Into<String>, release: impl FnOnce() + 'static) -> ResourceId {
        self.life.owned.own(kind.into(), Box::new(release))
    }

    /// A handle host services can keep to take resources for this domain's running code
    /// (see [`ResourceOwner`]).
    pub fn resource_owner(&self) -> ResourceOwner {
        self.life.owned.owner()
    }

    /// Releases resource `id` now. Answers false when the domain does not own it (never did,
    /// or it was released already).
    pub fn release_resource(&self, id: ResourceId) -> bool {
        let Some(failures) = self.life.owned.release(id) else {
            return false;
        };
        for failure in failures {
            self.report_release_failure(failure);
        }
        true
    }

    /// What the domain owns now, oldest first: each id with its kind. Empty after a stop.
    pub fn owned_resources(&self) -> Vec<(ResourceId, String)> {
        self.life.owned.listed()
    }

    /// How many resources [`owned_resources`](Self::owned_resources) would list, without
    /// copying their kinds.
    pub(crate) fn owned_count(&self) -> usize {
        self.life.owned.count()
    }

    pub(crate) fn report_release_failure(&self, message: String) {
        self.reporting
            .keep(Report::new(ReportKind::Service, "owned resources", message));
    }

    /// Starts the script at `path` as a task of the engine VM, with `args` as its `...`, and
    /// answers its handle: poll it from a frame loop or [`wait`](ScriptHandle::wait) on it.
    ///
    /// An error it raises, at once or after a yield, is a [`Report`] of kind
    /// [`Script`](crate::ReportKind::Script) in [`take_reports`](Self::take_reports) and in
    /// the result of the frame or advance it happened in; it makes the domain
    /// [`Failed`](DomainState::Failed) when this script decides the state (the domain was
    /// not `Running` when it started), and [`run_until_idle`](Self::run_until_idle) answers
    /// it too.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path when the file can't be read, is not a regular file or is
    /// longer than [`MAX_SOURCE_BYTES`](crate::Plan::MAX_SOURCE_BYTES); [`Error::Script`] when it
    /// does not compile.
    pub fn run_file(&self, path: impl AsRef<Path>, args: &[String]) -> Result<ScriptHandle> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.run_file_bytes(path, &args)
    }

    /// As [`run_file`](Self::run_file), with arguments as bytes: Luau strings are bytes, so an
    /// argument need not be UTF-8 (a file name from the command line, say).
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("main.luau");
    /// std::fs::write(&path, "local name = ...\nassert(#name == 4 and string.byte(name, 4) == 0xE9)")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.run_file_bytes(&path, &[b"caf\xE9"])?; // Latin-1, not UTF-8
    /// domain.run_until_idle()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`run_file`](Self::run_file).
    pub fn run_file_bytes(&self, path: impl AsRef<Path>, args: &[&[u8]]) -> Result<ScriptHandle> {
        let (path, source) = script_file::read(path.as_ref())?;
        self.run_source(&path, &source, args)
    }

    /// Starts the main script `source`, read from `path`, with `args`.
    fn run_source(&self, path: &Path, source: &[u8], args: &[&[u8]]) -> Result<ScriptHandle> {
        let (current, reporting) = (&self.current, &self.reporting);
        scripts::run_source(current, reporting, &self.life.state, path, source, args)
    }

    /// As [`run_file`](Self::run_file) for the script `relative` beneath `folder`, opened
    /// through `dir`, the folder's handle ([`script_file::read_beneath`]): a link out of the
    /// folder is refused, not followed.
    ///
    /// # Errors
    /// As [`run_file`](Self::run_file), and [`Error::Io`] for a path that leads outside the
    /// folder.
    pub(crate) fn run_file_beneath(
        &self,
        dir: &cap_std::fs::Dir,
        folder: &Path,
        relative: &str,
    ) -> Result<ScriptHandle> {
        let (path, source) = script_file::read_beneath(dir, folder, relative)?;
        self.run_source(&path, &source, &[])
    }

    /// Starts `source` as a task of the engine VM; `require` and `jobs.dispatch` in it resolve
    /// from the plan's root directory. It is a main script named `exec`: an error it raises,
    /// at once or after a yield, is a [`Report`] of kind
    /// [`Script`](crate::ReportKind::Script) and fails the domain as
    /// [`run_file`](Self::run_file) says.
    ///
    /// ```
    /// use skein::lifecycle::DomainState;
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec("error('boom')")?; // started: the failure is a report, not this call's error
    /// assert_eq!(domain.state(), DomainState::Failed);
    /// let reports = domain.take_reports();
    /// assert_eq!(reports[0].source, "script exec");
    /// assert!(reports[0].message.starts_with("script exec failed: exec:1: boom"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Script`] when it does not compile.
    pub fn exec(&self, source: &str) -> Result<()> {
        let decides = scripts::begin_load(&self.life.state).then_some(&self.life.state);
        scripts::start_chunk(
            &self.current,
            &self.reporting,
            decides,
            source.as_bytes(),
            "=exec",
            "exec",
            MultiValue::new(),
        )
        .map(|_| ())
    }

    /// Runs `source` as a task of the engine VM, pumping the domain until it returns, and
    /// answers a copy of what it returned. Meant for tests and tools; frames of other work run
    /// meanwhile. Its failure is its error, not a [`Report`]: the host
    /// awaited it.
    ///
    /// # Errors
    /// [`Error::Script`] with the error and Luau stack when it raises; [`Error::Transfer`] when
    /// its result can't be copied.
    pub fn eval(&self, source: &str) -> Result<Message> {
        let slot = scripts::start_chunk(
            &self.current,
            &self.reporting,
            None,
            source.as_bytes(),
            "=eval",
            "eval",
            MultiValue::new(),
        )?;
        scripts::await_answer(&slot, || self.pump_once(true, false))
    }

    /// A `Send` handle that stops the domain's running work from any thread: see
    /// [`InterruptHandle`].
    pub fn interrupt_handle(&self) -> InterruptHandle {
        self.life.interrupt.handle()
    }
}

impl ScriptDomain {
    // The current generation's mailbox (`events/drain.rs`).

    /// Drains the mailbox once, after discarding what reached the mailboxes of ended
    /// generations. Answers whether it handled anything.
    pub(crate) fn drain(&self) -> bool {
        self.drain_stale();
        let any = self.drain_mailbox();
        any | self.current.deliver_engine_events()
    }

    /// Handles every event in the current generation's mailbox, in the order sent: each take
    /// is one swap of the whole queue, repeated until one finds nothing. Settlements in a row
    /// are settled together, before the next event of another kind and at the end (settling
    /// runs no Luau, so nothing can tell them from settlements one by one). Answers whether it
    /// handled anything.
    pub(crate) fn drain_mailbox(&self) -> bool {
        self.current
            .drain_mailbox(&self.frames.services, &self.reporting, self.pool.shared())
    }

    // Pumping (`pump.rs`).

    /// One round on the engine thread: drain the mailbox, move the frame counter on (waking
    /// frame waits), then run the tasks that are ready. Never blocks. Answers what it did.
    ///
    /// It runs no registered job and no phase: a host's frame loop calls
    /// [`advance`](Self::advance) (or [`frame`](Self::frame)), which joins the pool work its
    /// handlers await, and `pump` is for a host that waits on something between frames. Since
    /// it counts a frame, pumping inside a frame loop makes `task.waitFrames` end early
    /// (docs/embedding.md, "Driving a domain", compares the calls).
    ///
    /// ```
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("m.luau"), "return { f = function() return 1 end }")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(skein::Plan::new().root(dir.path())))?;
    /// domain.exec(r#"task.spawn(function() done = jobs.dispatch("./m", "f"):await() end)"#)?;
    /// let mut report = domain.pump();
    /// while report.settled == 0 {
    ///     std::thread::yield_now();
    ///     report = domain.pump();
    /// }
    /// assert_eq!((report.settled, report.resumed), (1, 1));
    /// assert!(!domain.pump().did_anything());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pump(&self) -> PumpReport {
        vm::check_sources();
        let before = PumpCounts::of(&self.frames.services);
        let handled = self.drain();
        self.current.count_frame();
        let resumed = self.current.vm.step_counted() as u64;
        before.report(&self.frames.services, resumed, handled)
    }

    /// Pumps once; when `block` and nothing is ready, waits for the mailbox, the next timer or
    /// (with `jobs`) the next time registered jobs are due. With `jobs` the round runs the
    /// registered jobs as a frame does, when [`FRAME_INTERVAL`](super::pump::FRAME_INTERVAL)
    /// has passed since they last ran. Answers false when nothing is outstanding at all
    /// (idle): no task, no pending promise, no timer, and (with `jobs`) no registered job that
    /// is neither paused nor errored.
    pub(super) fn pump_once(&self, block: bool, jobs: bool) -> bool {
        self.pump_once_until(block, jobs, None)
    }

    /// [`pump_once`](Self::pump_once), never waiting past `until` when it is given.
    pub(super) fn pump_once_until(&self, block: bool, jobs: bool, until: Option<Instant>) -> bool {
        let drained = self.drain();
        let woke = self.current.count_frame();
        let (jobs_due, ran_jobs) = self.current.run_jobs_due(jobs, &self.frames, self);
        if drained | woke | ran_jobs | self.current.vm.step() || self.current.vm.has_ready() {
            return true;
        }
        match self.current.wait_for_work(block, jobs_due, until) {
            Outstanding::Nothing => false,
            Outstanding::Pending => true,
            Outstanding::Posted => {
                self.drain_mailbox();
                true
            }
        }
    }

    /// Pumps until every task and every promise the domain's scripts started has settled, and no
    /// registered job is left to run.
    ///
    /// Each round is a frame, and the registered jobs run in it too, at most once per frame
    /// interval (16 ms): so a job that runs every frame runs about 60 times a second here, and
    /// while only such jobs keep the domain busy it sleeps between their frames (handling the
    /// mailbox meanwhile) rather than spinning. A live registered job that is neither paused
    /// nor errored keeps the run going; cancelling the last one (say, from its own `run`) ends
    /// it.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
    /// domain.exec(r#"
    ///     runs = 0
    ///     local job
    ///     job = jobs.register({ phase = "main", executor = { kind = "luau", run = function()
    ///         runs += 1
    ///         if runs == 3 then job:cancel() end
    ///     end } })
    /// "#)?;
    /// domain.run_until_idle()?;
    /// assert_eq!(domain.eval("return runs")?, Message::Number(3.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failure of a script the host started ([`Error::Script`], with its Luau stack);
    /// it is also in [`take_reports`](Self::take_reports), as every failure is;
    /// [`Error::Interrupted`] once an [`InterruptHandle`] interrupted
    /// the domain (it returns at its next round, at most one frame interval after the
    /// interrupt when it waits).
    pub fn run_until_idle(&self) -> Result<()> {
        let mut run = IdleRun::start();
        while self.pump_once_until(true, true, IdleRun::round(&self.current)) {
            match run.after_round(&self.current, &self.life.interrupt) {
                Next::Round => {}
                Next::Over => break,
                Next::Stalled(waits) => return self.end_stalled(waits),
            }
        }
        if self.life.interrupt.requested() {
            return Err(Error::Interrupted {
                entry: "run_until_idle",
                domain: self.name.clone(),
            });
        }
        self.report_unobserved_failures();
        match self.reporting.first_failure() {
            Some(text) => Err(Error::Script(text)),
            None => Ok(()),
        }
    }

    /// The engine thread's part of a stall verdict: nothing ready in the engine VM, nothing in
    /// its mailbox, no registered job live and no `@skein/worker` thread alive.
    pub(super) fn engine_still(&self) -> bool {
        self.current.engine_still()
    }

    /// Ends a stalled `run_until_idle`: a failure already seen comes first, as it would have
    /// had the run ended; else [`Error::Stalled`] naming what the engine VM's tasks wait on.
    #[cold]
    pub(super) fn end_stalled(&self, waits: Vec<String>) -> Result<()> {
        self.report_unobserved_failures();
        if let Some(text) = self.reporting.first_failure() {
            return Err(Error::Script(text));
        }
        Err(Error::Stalled { waits })
    }

    // Named events, routes and the event drain (`events/handlers.rs`).

    /// Delivers what waits in the event queue, at most
    /// [`EventLimits::per_drain`](crate::event::EventLimits::per_drain) events, in the order they were
    /// queued. [`advance`](Self::advance) does this once, after its `lateUpdate` phase.
    ///
    /// A raw event runs the `event` phase handlers of its target context(s) with the payload;
    /// a named event runs every handler bound to its name with the payload and the name, in
    /// scheduler order (context priority, then bind order). Events queued while the drain runs
    /// wait for the next one. An event nothing handles is counted in
    /// [`EventReport::unhandled`] and dropped. A failing handler is a
    /// [`Diagnostic`](crate::diagnostic::Diagnostic) in the report, and the next one runs.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// domain.exec(r#"
    ///     local events = require("@skein/events")
    ///     events.on("hit", function(damage) hp = (hp or 100) - damage end)
    ///     events.emit("hit", 30)
    ///     events.emit("nobody listens", true)
    /// "#)?;
    /// let report = domain.drain_events();
    /// assert_eq!((report.delivered, report.unhandled, report.pending), (1, 1, 0));
    /// assert_eq!(domain.eval("return hp")?, Message::Number(70.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A stopped domain drains nothing; a drain asked for from inside one of the domain's own
    /// handlers drains nothing and is recorded as a [`Report`] naming
    /// [`Error::Reentrant`].
    pub fn drain_events(&self) -> EventReport {
        match self.enter("drain_events") {
            Ok(_entered) => self.run_event_drain(),
            Err(e) => self.event_handlers.not_drained(e, &self.reporting),
        }
    }

    /// How many events wait in the queue.
    pub fn pending_events(&self) -> usize {
        self.event_handlers.queue().pending().0
    }

    /// The bytes the waiting events weigh, as [`EventLimits`](crate::event::EventLimits) counts them.
    pub fn pending_event_bytes(&self) -> usize {
        self.event_handlers.queue().pending().1
    }

    /// Binds a host handler to the named event `name`: each delivery calls `f` with a copy of
    /// the payload. Host handlers run after Luau handlers of higher-priority contexts and in
    /// bind order with the others (their priority is 0), and they stay bound across restarts:
    /// they are the host's. An `Err` or a panic (contained) is a
    /// [`Diagnostic`](crate::diagnostic::Diagnostic) of the drain.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let seen = Rc::new(RefCell::new(Vec::new()));
    /// let sink = seen.clone();
    /// domain.bind_event_handler("saved", move |m| Ok(sink.borrow_mut().push(m)))?;
    /// domain.exec(r#"require("@skein/events").emit("saved", "slot 1")"#)?;
    /// domain.drain_events();
    /// assert_eq!(*seen.borrow(), [Message::String("slot 1".into())]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] ([`NameRefusal::EventName`]) when the
    /// name is empty or longer than [`EventLimits::name`](crate::event::EventLimits::name).
    pub fn bind_event_handler<F>(&self, name: &str, f: F) -> Result<()>
    where
        F: FnMut(Message) -> std::result::Result<(), String> + 'static,
    {
        self.event_handlers.bind_host(name, f)
    }

    /// Routes the named event `name`: every time this domain's scripts emit it, a copy is also
    /// posted to `mailbox` (another domain's), as
    /// [`post_named`](crate::DomainMailbox::post_named) would: at once for an emit of the engine
    /// VM, and for an emit of a job on a pool worker or of a `@skein/worker` worker when this
    /// domain's drain takes the event (the routes live on the engine thread; an event of an
    /// ended generation is never delivered, so never routed). Nothing crosses unless the host
    /// routes it. A recipient that is stopped or full is not the emitter's error: it becomes a
    /// warning in this domain's next [`EventReport`]. Routes are the host's and stay across
    /// restarts.
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let game = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let audio = ScriptDomain::new(&pool, DomainSpec::new("audio"))?;
    /// audio.exec(r#"require("@skein/events").on("boom", function(v) volume = v end)"#)?;
    /// game.route("boom", audio.mailbox())?;
    /// game.exec(r#"require("@skein/events").emit("boom", 11)"#)?;
    /// assert_eq!(audio.drain_events().delivered, 1);
    /// assert_eq!(audio.eval("return volume")?, Message::Number(11.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Name`] ([`NameRefusal::EventName`]) when the
    /// name is empty or longer than [`EventLimits::name`](crate::event::EventLimits::name).
    pub fn route(&self, name: &str, mailbox: DomainMailbox) -> Result<()> {
        self.event_handlers.route(name, mailbox)
    }

    /// One drain, inside a scheduler entry.
    pub(crate) fn run_event_drain(&self) -> EventReport {
        self.drain_stale();
        let (current, frames, reporting) = (&self.current, &self.frames, &self.reporting);
        self.event_handlers
            .drain(current, frames, reporting, |n| self.count_stale(n))
    }

    // Host dispatch (`host_dispatch.rs`).

    /// Hands `module.entry(args)` to the pool from host code; `module` resolves from the plan's
    /// root directory.
    ///
    /// Edited module sources are picked up when the host next pumps or runs the domain
    /// ([`pump`](Self::pump), [`eval`](Self::eval), [`exec`](Self::exec),
    /// [`run_until_idle`](Self::run_until_idle)); a host dispatch does not look at the file
    /// system, so issuing many in a row costs no system call each.
    ///
    /// `args` is anything that converts into a [`Message`]: a `Message`, a number, a string, a
    /// `Vec` of messages, ...
    ///
    /// ```
    /// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("half.luau"), "return { of = function(n) return n / 2 end }")?;
    /// let pool = Pool::new(1);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(Plan::new().root(dir.path())))?;
    /// let half = domain.dispatch("./half", "of", 21)?; // an i32: the Luau number 21
    /// assert_eq!(half.wait()?, Message::Number(10.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Module`](crate::refusal::DispatchRefusal::Module))
    /// when the module can't be resolved.
    pub fn dispatch(
        &self,
        module: &str,
        entry: &str,
        args: impl Into<Message>,
    ) -> Result<Promise<Message>> {
        self.dispatch_with(module, entry, args, &JobOptions::new())
    }

    /// [`dispatch`](Self::dispatch) with options: a name, a key, supersede and a deadline, as
    /// `jobs.dispatch`'s `opts` gives them to Luau.
    ///
    /// With a key the item runs in the worker VM the key is bound to, after every item of the
    /// key dispatched before it (from Luau or from Rust) has settled, so module state one item
    /// leaves is there for the next.
    ///
    /// ```
    /// use skein::job::JobOptions;
    /// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(
    ///     dir.path().join("counter.luau"),
    ///     "local n = 0 return { bump = function() n += 1 return n end }",
    /// )?;
    /// let pool = Pool::new(2);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(Plan::new().root(dir.path())))?;
    /// let bump = || domain.dispatch_with("./counter", "bump", Message::Nil, &JobOptions::new().key("a"));
    /// let (first, second) = (bump()?, bump()?);
    /// // One VM holds the key, so the second item sees the count the first one left.
    /// assert_eq!(first.wait()?, Message::Number(1.0));
    /// assert_eq!(second.wait()?, Message::Number(2.0));
    /// assert!(domain.release("a")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Dispatch`] naming the [`DispatchRefusal`](crate::refusal::DispatchRefusal):
    /// when the module can't be resolved, when an option breaks its rule (a key of 0 or more than 256 bytes, `supersede` without a
    /// key, a deadline of zero or past the domain's cap), or when the key is new and the pool
    /// holds 65,536 keys already. A refused dispatch queues nothing.
    pub fn dispatch_with(
        &self,
        module: &str,
        entry: &str,
        args: impl Into<Message>,
        opts: &JobOptions,
    ) -> Result<Promise<Message>> {
        self.current
            .dispatch(self.pool.shared(), module, entry, args.into(), opts)
    }

    /// Ends the binding of `key` after the items of the key dispatched before this call have
    /// settled, as `jobs.release` does. Answers whether the pool held the key; when it did not,
    /// nothing is done.
    ///
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Key`](crate::refusal::DispatchRefusal::Key)) when
    /// the key is not 1 to 256 bytes.
    pub fn release(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.current.release_key(self.pool.shared(), key.as_ref())
    }

    /// The domain's shared store: the tables and queues its scripts reach as `jobs.shared`.
    /// The store belongs to this generation of the domain and ends with it.
    pub fn shared(&self) -> SharedStore {
        SharedStore::new(self.current.principal.shared.clone())
    }
}
