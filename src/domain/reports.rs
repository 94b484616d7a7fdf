//! The domain's reports, kept for [`ScriptDomain::take_reports`](super::ScriptDomain::take_reports)
//! within a bound: a script that makes failures in a loop (a spawn bomb's tasks each raising)
//! must not make the host keep every one of them.

use std::fmt;

use super::actor::Actors;
use crate::jobs::VM_RETIRED;
use crate::vm::{JobFailure, Vm, UNAWAITED_KEPT};

/// How many reports a domain keeps between two `take_reports`: 1,024. Past it each one is
/// counted, not kept, and `take_reports` ends with one report saying how many were dropped.
pub(crate) const MAX_REPORTS: usize = 1_024;

/// The source of the report that says how many were dropped.
pub(crate) const DROPPED_REPORTS: &str = "reports dropped";

/// A failure that reached no awaiting code (a main script, an `exec` chunk, a task, a handler or
/// a registered job that raised), or a note the host should see, attributed to what it ran for.
///
/// `source` and `message` are the text a log line wants; the other fields are the same
/// failure taken apart, so a host can sort, count and show it without parsing text:
///
/// ```
/// use skein::lifecycle::DomainState;
/// use skein::{DomainSpec, Pool, ReportKind, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// domain.exec("local x = 1\nerror('boom')")?;
/// assert_eq!(domain.state(), DomainState::Failed);
/// let reports = domain.take_reports();
/// let report = &reports[0];
/// assert_eq!(report.kind, ReportKind::Script);
/// assert_eq!(report.source, "script exec");
/// assert_eq!(report.module.as_deref(), Some("exec"));
/// assert_eq!(report.line, Some(2));
/// assert!(report.message.starts_with("script exec failed: exec:2: boom"));
/// assert!(report.stack.as_deref().unwrap().starts_with("stack traceback:"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Internal frames (Skein's own Luau, chunks named `=skein ...`) are left out of `message`
/// and `stack`: what the user sees starts and ends in the user's code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// What it ran for: `job 'solver'`, `script main.luau`.
    pub source: String,
    /// The error, with its Luau stack.
    pub message: String,
    /// What kind of code failed, or that this is a note.
    pub kind: ReportKind,
    /// The registered or dispatched job it ran for (its name), when it ran for one.
    pub job: Option<String>,
    /// The chunk the error was raised in, as the stack names it (`main.luau`, `exec`), when the
    /// error names one.
    pub module: Option<String>,
    /// The line the error was raised at, when the error names one.
    pub line: Option<u32>,
    /// The Luau stack where the error was raised (`stack traceback:` and its frames), when
    /// there is one.
    pub stack: Option<String>,
    /// The job's failure, structured, for a registered job or a promise nobody awaited.
    pub job_failure: Option<JobFailure>,
}

/// What kind of code a [`Report`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReportKind {
    /// A main script ([`run_file`](crate::ScriptDomain::run_file), or [`exec`](crate::ScriptDomain::exec))
    /// raised or did not compile; a script that decided the domain's state made it
    /// [`Failed`](crate::lifecycle::DomainState::Failed).
    Script,
    /// A task a script started (`task.spawn`, `task.defer`, a coroutine) raised, and no code
    /// awaited it.
    Task,
    /// A phase or event handler raised where no result carries it: after it yielded, or in
    /// a phase nobody reads the report of (`stop`'s `shutdown`). One that raises before it
    /// yields is in the result of the call that ran it
    /// ([`PhaseReport::errors`](crate::frame::PhaseReport::errors)).
    Handler,
    /// A registered job, a job's promise nobody awaited, or a warm pass failed.
    Job,
    /// A `@skein/worker` thread failed and no code received or joined the failure (every
    /// failure, observed or not, is in
    /// [`take_actor_failures`](crate::ScriptDomain::take_actor_failures)); or a task in its VM failed
    /// with no one awaiting it.
    Actor,
    /// An engine-service command or query failed, or a host scheduler call was refused.
    Service,
    /// A restart's or reload's load failed.
    Load,
    /// A capability check failed (the code may have caught it): not a failure.
    Capability,
    /// A note: a worker VM was retired, an `events.emit` was refused (the call raised), a
    /// `jobs.warm` run failed whose failure the call's promise carries, or reports were
    /// dropped past the bound.
    Note,
}

impl ReportKind {
    /// The kind's name, as `Display` writes it.
    pub fn name(self) -> &'static str {
        match self {
            ReportKind::Script => "script",
            ReportKind::Task => "task",
            ReportKind::Handler => "handler",
            ReportKind::Job => "job",
            ReportKind::Actor => "worker",
            ReportKind::Service => "service",
            ReportKind::Load => "load",
            ReportKind::Capability => "capability",
            ReportKind::Note => "note",
        }
    }
}

impl ReportKind {
    /// The kind of a report that reached the domain as a label and a text (a task's failure
    /// from a VM's reporter, a worker VM's note, a `@skein/worker` thread's failure).
    pub(crate) fn of_label(label: &str) -> ReportKind {
        if label == VM_RETIRED || label == DROPPED_REPORTS {
            ReportKind::Note
        } else if label == "capability" {
            ReportKind::Capability
        } else if label.starts_with("worker '") {
            ReportKind::Actor
        } else if label.starts_with("jobs.warm") {
            ReportKind::Job
        } else if label == "engine services" {
            ReportKind::Service
        } else {
            ReportKind::Task
        }
    }
}

impl fmt::Display for ReportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reports waiting to be taken, at most [`MAX_REPORTS`] of them.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    kept: Vec<Report>,
    dropped: u64,
    /// How many reports were kept before the oldest one in `kept`: `kept[i]` is report number
    /// `taken + i`, which [`since`](Self::since) reads.
    taken: u64,
}

impl Reports {
    /// Keeps `report`, or counts it when [`MAX_REPORTS`] already wait.
    pub(crate) fn push(&mut self, report: Report) {
        if self.kept.len() < MAX_REPORTS {
            self.kept.push(report);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    /// A mark to read the reports kept after it with [`since`](Self::since).
    pub(crate) fn mark(&self) -> u64 {
        self.taken + self.kept.len() as u64
    }

    /// Copies of the reports kept since `mark` that are still waiting (a report taken since is
    /// gone; one dropped past the bound was never kept): at most [`MAX_REPORTS`].
    pub(crate) fn since(&self, mark: u64) -> Vec<Report> {
        let from = usize::try_from(mark.saturating_sub(self.taken)).unwrap_or(usize::MAX);
        self.kept
            .get(from..)
            .map(<[Report]>::to_vec)
            .unwrap_or_default()
    }

    /// How many wait (the dropped ones not counted).
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }

    /// Takes every report, oldest first, and one more naming how many were dropped, if any were.
    pub(crate) fn take(&mut self) -> Vec<Report> {
        let mut reports = std::mem::take(&mut self.kept);
        self.taken += reports.len() as u64;
        let dropped = std::mem::take(&mut self.dropped);
        if dropped > 0 {
            reports.push(Report::new(
                ReportKind::Note,
                DROPPED_REPORTS,
                format!(
                    "{dropped} more reports were dropped: a domain keeps {MAX_REPORTS} between two \
                     take_reports"
                ),
            ));
        }
        reports
    }
}

impl Report {
    /// The source of a report that a worker VM was retired (it reached its memory limit); a note, not a failure.
    pub const VM_RETIRED: &'static str = VM_RETIRED;

    /// How many failures of promises nobody awaited one VM keeps in full until the end of `run_until_idle`; the rest are counted: 64.
    pub const UNAWAITED_KEPT: usize = UNAWAITED_KEPT;

    /// The source of the report that says how many were dropped.
    pub const DROPPED_SOURCE: &'static str = DROPPED_REPORTS;

    /// How many reports a domain keeps between two `take_reports`: 1,024. Past it each one is counted, not kept, and `take_reports` ends with one report (of source [`DROPPED_SOURCE`](Self::DROPPED_SOURCE)) saying how many were dropped.
    pub const MAX_KEPT: usize = MAX_REPORTS;

    /// A report of `kind` for `source` with `message` (the error and its stack): the chunk,
    /// line and stack are read from the message, the job from a source `job '<name>'`, and
    /// Skein's internal stack frames are left out of both.
    ///
    /// ```
    /// use skein::{Report, ReportKind};
    /// let report = Report::new(
    ///     ReportKind::Job,
    ///     "job 'solver'",
    ///     "job 'solver' failed: solve.luau:12: no solution\nstack traceback:\n\tsolve.luau:12: in function 'solve'",
    /// );
    /// assert_eq!(report.job.as_deref(), Some("solver"));
    /// assert_eq!(report.module.as_deref(), Some("solve.luau"));
    /// assert_eq!(report.line, Some(12));
    /// assert_eq!(report.stack.as_deref(), Some("stack traceback:\n\tsolve.luau:12: in function 'solve'"));
    /// ```
    pub fn new(kind: ReportKind, source: impl Into<String>, message: impl Into<String>) -> Report {
        let source = source.into();
        let message = without_internal_frames(&message.into());
        let (module, line) = location(&message);
        let stack = message
            .find("stack traceback:")
            .map(|at| message[at..].trim_end().to_owned());
        let job = source
            .strip_prefix("job '")
            .and_then(|rest| rest.strip_suffix('\''))
            .map(str::to_owned);
        Report {
            source,
            message,
            kind,
            job,
            module,
            line,
            stack,
            job_failure: None,
        }
    }

    /// This report with `failure` as its structured job failure (and its job's name), its
    /// stack without Skein's internal frames.
    pub fn with_job_failure(mut self, mut failure: JobFailure) -> Report {
        failure.traceback = failure.traceback.map(|tb| without_internal_frames(&tb));
        self.job = Some(failure.job.clone());
        self.job_failure = Some(failure);
        self
    }

    /// Whether this report is a failure nobody handled. Capability denials (source
    /// `capability`; the code may have caught them) and notes are not: a worker VM that was
    /// retired (source [`Report::VM_RETIRED`]; its failed jobs are reported or answered on
    /// their own), or an `events.emit` refused because the queue was full (the call raised, and
    /// the code may have caught it). The note that reports were dropped is: the dropped ones
    /// may have been failures.
    ///
    /// ```
    /// use skein::Report;
    /// use skein::ReportKind;
    /// let denial = Report::new(ReportKind::Capability, "capability", "permission denied: ...");
    /// assert!(!denial.is_failure());
    /// let raised = Report::new(ReportKind::Script, "script main.luau", "main.luau:1: boom");
    /// assert!(raised.is_failure());
    /// ```
    pub fn is_failure(&self) -> bool {
        match self.kind {
            ReportKind::Capability => false,
            ReportKind::Note => self.source == DROPPED_REPORTS,
            _ => self.source != "capability" && self.source != VM_RETIRED,
        }
    }
}

/// Whether a stack line is a frame of Skein's own Luau (a chunk named `=skein ...`, which
/// Luau writes without the `=`, or quoted as `[string "skein ..."]`).
fn is_internal_frame(line: &str) -> bool {
    let frame = line.trim_start();
    let frame = frame.strip_prefix("[string \"").unwrap_or(frame);
    frame.starts_with("skein ") || frame.starts_with("skein.")
}

/// `message` without the stack frames of Skein's own Luau.
fn without_internal_frames(message: &str) -> String {
    if !message.lines().any(is_internal_frame) {
        return message.to_owned();
    }
    message
        .lines()
        .filter(|line| !is_internal_frame(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The chunk and line an error names, read from the first `<chunk>:<line>: ` of its first
/// line, past any `... failed: ` prefix: `main.luau:3: boom` names `main.luau`, line 3.
fn location(message: &str) -> (Option<String>, Option<u32>) {
    let error = message.lines().next().unwrap_or_default();
    let mut from = 0;
    while let Some(colon) = error[from..].find(':').map(|c| c + from) {
        let rest = &error[colon + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with(':') {
            let chunk = error[..colon].trim();
            let chunk = chunk.rsplit(": ").next().unwrap_or(chunk);
            if let Ok(line) = rest[..digits].parse() {
                return (Some(chunk.to_owned()), Some(line));
            }
        }
        from = colon + 1;
    }
    (None, None)
}

/// Keeps, in `reports`, the failures no code observed: the engine VM's promises that were
/// rejected with no code awaiting them or reading their status (a `jobs.dispatch` whose promise
/// was dropped, say), and the `@skein/worker` failures no code received or joined. At the end
/// of a run no task is left that could still observe them, so each is a failure nobody handled.
pub(crate) fn keep_unobserved(vm: &Vm, actors: &Actors, reports: &mut Reports) {
    let unhandled = vm.core.promises.borrow_mut().take_unhandled();
    for (label, failure) in actors.take_unobserved() {
        reports.push(Report::new(ReportKind::Actor, label, failure));
    }
    for (what, failure) in unhandled.kept {
        reports.push(
            Report::new(
                ReportKind::Job,
                format!("{what} promise nobody awaited"),
                failure.to_string(),
            )
            .with_job_failure(JobFailure::clone(&failure)),
        );
    }
    if unhandled.past_bound > 0 {
        reports.push(Report::new(
            ReportKind::Job,
            "promises nobody awaited",
            format!(
                "{} more rejected promises nobody awaited (the first {UNAWAITED_KEPT} are \
                 reported in full)",
                unhandled.past_bound
            ),
        ));
    }
}

/// `reports` followed by one report per capability denial in `denials` (source `capability`),
/// oldest first.
pub(crate) fn with_denials(mut reports: Vec<Report>, denials: Vec<String>) -> Vec<Report> {
    reports.extend(
        denials
            .into_iter()
            .map(|message| Report::new(ReportKind::Capability, "capability", message)),
    );
    reports
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(i: usize) -> Report {
        Report::new(
            ReportKind::Script,
            "script main.luau",
            format!("failure {i}"),
        )
    }

    #[test]
    fn reports_are_kept_up_to_the_bound_and_the_rest_counted() {
        let mut reports = Reports::default();
        for i in 0..MAX_REPORTS {
            reports.push(report(i));
        }
        assert_eq!(reports.len(), MAX_REPORTS);
        let taken = reports.take();
        assert_eq!(taken.len(), MAX_REPORTS, "none dropped at the bound");
        for i in 0..MAX_REPORTS + 5 {
            reports.push(report(i));
        }
        let taken = reports.take();
        assert_eq!(taken.len(), MAX_REPORTS + 1);
        let last = taken.last().unwrap();
        assert_eq!(last.source, DROPPED_REPORTS);
        assert_eq!(
            last.message,
            "5 more reports were dropped: a domain keeps 1024 between two take_reports"
        );
        assert!(last.is_failure());
        assert!(reports.take().is_empty(), "the count starts again");
    }

    #[test]
    fn internal_frames_are_left_out_and_the_location_is_read_from_the_first_line() {
        let report = Report::new(
            ReportKind::Job,
            "job 'j'",
            "job 'j' failed: exec:3: broke\nstack traceback:\n\t[C]: in function 'error'\n\t\
             skein prelude:57: in function 'await'\n\t[string \"skein.shared\"]:2: in function \
             'f'\n\texec:3: in function 'run'",
        );
        assert_eq!(
            report.message,
            "job 'j' failed: exec:3: broke\nstack traceback:\n\t[C]: in function 'error'\n\t\
             exec:3: in function 'run'"
        );
        assert_eq!(
            (report.module.as_deref(), report.line),
            (Some("exec"), Some(3))
        );
        assert_eq!(report.job.as_deref(), Some("j"));
        let plain = Report::new(ReportKind::Note, "note", "no location: here 12:");
        assert_eq!((plain.module, plain.line, plain.stack), (None, None, None));
    }

    #[test]
    fn since_a_mark_copies_the_reports_kept_after_it_and_still_waiting() {
        let mut reports = Reports::default();
        reports.push(report(0));
        let mark = reports.mark();
        reports.push(report(1));
        reports.push(report(2));
        let since: Vec<_> = reports.since(mark).into_iter().map(|r| r.message).collect();
        assert_eq!(since, ["failure 1", "failure 2"]);
        assert_eq!(reports.len(), 3, "copies: they still wait to be taken");
        reports.take();
        assert!(reports.since(mark).is_empty(), "taken reports are gone");
        let mark = reports.mark();
        reports.push(report(3));
        assert_eq!(reports.since(mark).len(), 1);
    }
}
