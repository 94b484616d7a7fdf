//! The domain's reports, kept for [`ScriptDomain::take_reports`](super::ScriptDomain::take_reports)
//! within a bound: a script that makes failures in a loop (a spawn bomb's tasks each raising)
//! must not make the host keep every one of them.

use super::ScriptDomain;
use crate::jobs::VM_RETIRED;
use crate::vm::UNAWAITED_KEPT;

/// How many reports a domain keeps between two `take_reports`: 1,024. Past it each one is
/// counted, not kept, and `take_reports` ends with one report saying how many were dropped.
pub(crate) const MAX_REPORTS: usize = 1_024;

/// The source of the report that says how many were dropped.
pub(crate) const DROPPED_REPORTS: &str = "reports dropped";

/// A failure that reached no awaiting code: a task that raised, attributed to its job or script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// What it ran for: `job 'solver'`, `script main.luau`.
    pub source: String,
    /// The error, with its Luau stack.
    pub message: String,
}

/// Reports waiting to be taken, at most [`MAX_REPORTS`] of them.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    kept: Vec<Report>,
    dropped: u64,
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

    /// How many wait (the dropped ones not counted).
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }

    /// Takes every report, oldest first, and one more naming how many were dropped, if any were.
    pub(crate) fn take(&mut self) -> Vec<Report> {
        let mut reports = std::mem::take(&mut self.kept);
        let dropped = std::mem::take(&mut self.dropped);
        if dropped > 0 {
            reports.push(Report {
                source: DROPPED_REPORTS.to_owned(),
                message: format!(
                    "{dropped} more reports were dropped: a domain keeps {MAX_REPORTS} between two \
                     take_reports"
                ),
            });
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

    /// Whether this report is a failure nobody handled. Capability denials (source
    /// `capability`; the code may have caught them) and notes that a worker VM was retired
    /// (source [`Report::VM_RETIRED`]; its failed jobs are reported or answered on their own) are not.
    ///
    /// ```
    /// use skein::Report;
    /// let denial = Report { source: "capability".into(), message: "permission denied: ...".into() };
    /// assert!(!denial.is_failure());
    /// let raised = Report { source: "script main.luau".into(), message: "main.luau:1: boom".into() };
    /// assert!(raised.is_failure());
    /// ```
    pub fn is_failure(&self) -> bool {
        self.source != "capability" && self.source != VM_RETIRED
    }
}

impl ScriptDomain {
    /// Reports the engine VM's promises that were rejected with no code observing them: at the
    /// end of a run no task is left that could still await them, so each is a failure nobody
    /// handled (a `jobs.dispatch` whose promise was dropped, say).
    pub(super) fn report_unhandled_rejections(&self) {
        let unhandled = self.current.vm.core.promises.borrow_mut().take_unhandled();
        let mut reports = self.reports.borrow_mut();
        for (what, failure) in unhandled.kept {
            reports.push(Report {
                source: format!("{what} promise nobody awaited"),
                message: failure.to_string(),
            });
        }
        if unhandled.past_bound > 0 {
            reports.push(Report {
                source: "promises nobody awaited".to_owned(),
                message: format!(
                    "{} more rejected promises nobody awaited (the first {UNAWAITED_KEPT} are \
                     reported in full)",
                    unhandled.past_bound
                ),
            });
        }
    }

    /// Takes the failures no code awaited (tasks that raised) and the capability denials
    /// (source `capability`), oldest first within each.
    pub fn take_reports(&self) -> Vec<Report> {
        let mut reports = self.reports.borrow_mut().take();
        let denials = self.current.principal.authority.denials().take();
        reports.extend(denials.into_iter().map(|message| Report {
            source: "capability".to_owned(),
            message,
        }));
        reports
    }

    /// How many capability checks the domain's code failed, in every VM and generation.
    pub fn denials(&self) -> u64 {
        self.current.principal.authority.denials().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(i: usize) -> Report {
        Report {
            source: "script main.luau".to_owned(),
            message: format!("failure {i}"),
        }
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
}
