//! Driving a domain as a host's frame loop does: [`ScriptDomain::run_frames`] advances it at a
//! fixed step while anything can still run, serves its mailbox between frames, and ends it by
//! the same rules as [`run_until_idle`](ScriptDomain::run_until_idle): idle (nothing left), or
//! stalled (nothing can ever move again, under [`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls)).
//!
//! It owns the loop and its end; what a frame does is `advance`'s (`frame/`), and the stall
//! verdict is `stall_watch.rs`'s, with one more thing the engine thread knows here: events
//! still queued, which the next frame's drain hands to their handlers.

use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::domain::frame::handler_label::HandlerLabel;
use crate::domain::{stall_watch, AdvanceReport, Report, ReportKind, ScriptDomain};
use crate::error::{Error, Result};
use crate::executor::wake_queue::Waited;
use crate::principal::diagnostic::DiagnosticKind;
use crate::vm;

impl ScriptDomain {
    /// Runs the domain as a frame loop: [`advance`](Self::advance)`(step)` once every `step` of
    /// wall time (events drained, fixed steps, `update`, `lateUpdate`, registered jobs, tasks),
    /// serving the mailbox between frames (settled promises resume their tasks at once, not at
    /// the next frame), until nothing can run any more. Timers follow frame time, so a frame
    /// that runs late makes them late too, never fire in a burst.
    ///
    /// The run goes on while any of these is live: a task of the engine VM (a handler call
    /// that yielded is one), a pending promise (pool work), a registered job that is neither
    /// paused nor errored, or an event still queued for its handlers (a `@skein/worker` worker
    /// alone does not count, as for `run_until_idle`). Handlers bound to `fixedUpdate`, `update` or `lateUpdate` run in every frame
    /// the run makes but do not by themselves keep it going: code that runs until it is
    /// interrupted keeps a task or a registered job alive. With
    /// [`DomainSpec::detect_stalls`](crate::DomainSpec::detect_stalls) it also ends when what is
    /// left can never move: every task waits on what nothing can settle or raise (see
    /// [`Error::Stalled`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let spec = DomainSpec::new("game").context(ContextSpec::new("main").phases(Phase::ALL))?;
    /// let domain = ScriptDomain::new(&pool, spec)?;
    /// domain.exec(r#"
    ///     local events = require("@skein/events")
    ///     events.on("scored", function(points) total = points end)
    ///     task.spawn(function()
    ///         task.wait(0.05) -- frame time: the fourth frame of 16 ms
    ///         events.emit("scored", 10)
    ///     end)
    /// "#)?;
    /// // Ends once the event is delivered: nothing is left that could run.
    /// domain.run_frames(Duration::from_millis(16))?;
    /// assert_eq!(domain.eval("return total")?, Message::Number(10.0));
    /// assert!(domain.frames() >= 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failure of a script the host started ([`Error::Script`]), as for
    /// `run_until_idle`; [`Error::Stalled`] naming what the tasks wait on;
    /// [`Error::Interrupted`] after an [`InterruptHandle`](crate::InterruptHandle) interrupted
    /// the domain; what [`advance`](Self::advance) refuses (a stopped domain).
    pub fn run_frames(&self, step: Duration) -> Result<()> {
        let step = step.max(Duration::from_micros(100));
        let mut stall = stall_watch::StallWatch::default();
        let mut tick = Instant::now();
        loop {
            if self.life.interrupt.requested() {
                return Err(Error::Interrupted {
                    entry: "run_frames",
                    domain: self.name.clone(),
                });
            }
            vm::check_sources();
            let frame = self.advance(step)?;
            self.keep_handler_failures(&frame);
            tick = (tick + step).max(Instant::now());
            self.serve_until(tick);
            if !self.frames_live() {
                break;
            }
            if let Some(live) = &self.current.principal.liveness {
                let still = self.engine_still() && self.pending_events() == 0;
                if stall.stalled(live, still) {
                    let waits = stall_watch::describe(&self.current.vm);
                    if waits.is_empty() {
                        break;
                    }
                    return self.end_stalled(waits);
                }
            }
        }
        self.report_unobserved_failures();
        match self.reporting.first_failure() {
            Some(text) => Err(Error::Script(text)),
            None => Ok(()),
        }
    }

    /// Keeps `report` for the next [`take_reports`](Self::take_reports).
    pub(crate) fn keep_report(&self, report: Report) {
        self.reporting.keep(report);
    }

    /// Keeps the handler failures of a frame as [`Report`]s, for a frame loop that reads no
    /// frame's report (this one, `skein serve`'s): a phase handler's labelled by its context and
    /// phase, an event handler's by the event.
    pub(crate) fn keep_handler_failures(&self, frame: &AdvanceReport) {
        let mut reports = self.reporting.reports().borrow_mut();
        for phase in &frame.phases {
            for error in &phase.errors {
                let source = HandlerLabel::Phase {
                    context: Arc::from(error.attribution.context.as_deref().unwrap_or("")),
                    phase: phase.phase,
                };
                reports.push(Report::new(
                    ReportKind::Handler,
                    source.to_string(),
                    error.message.clone(),
                ));
            }
        }
        for error in &frame.events.errors {
            let source = match &error.event {
                Some(name) => format!("event '{name}'"),
                None => "events".to_owned(),
            };
            // A refused emit raised in the code that emitted: a note, whether or not it was
            // caught (uncaught, it failed that code, which is reported on its own).
            let kind = match error.kind {
                DiagnosticKind::QueueFull => ReportKind::Note,
                _ => ReportKind::Handler,
            };
            reports.push(Report::new(kind, source, error.message.clone()));
        }
    }

    /// Between two frames: until `tick`, whatever arrives in the mailbox is handled at once
    /// and the tasks it readies run (no frame is counted, and the clock does not move).
    fn serve_until(&self, tick: Instant) {
        loop {
            // A stream of messages does not hold the next frame back.
            if self.life.interrupt.requested() || Instant::now() >= tick {
                return;
            }
            if self.current.rx.wait_until(Some(tick)) == Waited::TimedOut {
                return;
            }
            self.drain();
            while self.current.vm.step() {
                if Instant::now() >= tick {
                    return;
                }
            }
        }
    }

    /// Whether anything can still run: a task, a pending promise, a live registered job, or an
    /// event still queued.
    fn frames_live(&self) -> bool {
        self.current.vm.tasks() > 0
            || self.current.vm.core.promises.borrow().pending() > 0
            || self.current.registry.has_work()
            || self.pending_events() > 0
    }
}
