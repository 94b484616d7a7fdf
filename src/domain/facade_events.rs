//! The facade of the domain's event and pump parts: the `ScriptDomain` methods that drain the
//! current generation's mailbox, pump the domain, drain its event queue and bind its named
//! events and routes, and dispatch from the host. Each coordinates parts in a few lines; the
//! logic is the parts': the mailbox's handling and the host's dispatch are the current
//! generation's (`events/drain.rs`, `host_dispatch.rs`), a pump round's steps are the current
//! generation's and the frame driver's (`pump.rs`), and the event drain, named handlers and
//! routes are the event handlers' (`events/handlers.rs`), which have the frame driver call
//! the handlers.

use std::time::Instant;

use crate::domain::events::handlers::EventReport;
use crate::domain::pump::{IdleRun, Next, Outstanding, PumpCounts, PumpReport};
use crate::domain::{DomainMailbox, ScriptDomain};
use crate::error::{Error, Result};
use crate::job::JobOptions;
use crate::jobs::Promise;
use crate::shared::SharedStore;
use crate::value::Message;
use crate::vm;

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
    /// [`Error::Interrupted`] once an [`InterruptHandle`](crate::InterruptHandle) interrupted
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
    /// handlers drains nothing and is recorded as a [`Report`](crate::Report) naming
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
    /// [`Error::Name`] ([`NameRefusal::EventName`](crate::refusal::NameRefusal::EventName)) when the
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
    /// [`Error::Name`] ([`NameRefusal::EventName`](crate::refusal::NameRefusal::EventName)) when the
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
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Module`](crate::refusal::DispatchRefusal::Module))
    /// when the module can't be resolved.
    pub fn dispatch(&self, module: &str, entry: &str, args: Message) -> Result<Promise<Message>> {
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
        args: Message,
        opts: &JobOptions,
    ) -> Result<Promise<Message>> {
        self.current
            .dispatch(self.pool.shared(), module, entry, args, opts)
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
