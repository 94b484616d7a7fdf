//! What a domain keeps for its host to read back, as one part with its own fields: the reports
//! waiting for [`ScriptDomain::take_reports`](super::ScriptDomain::take_reports), the failures
//! of the scripts the host started (a `run_until_idle` answers the first), where diagnostics
//! go, and the running totals behind [`ScriptDomain::stats`](super::ScriptDomain::stats).
//!
//! Its invariants: a report is kept or counted, never lost, within the bound of [`Reports`];
//! every diagnostic is counted by severity whether or not a sink takes it; a script failure is
//! answered once, by the first entry point that ends after it.

use std::cell::RefCell;
use std::rc::Rc;

use super::domain_stats::Counters;
use super::reports::{Report, Reports};
use crate::principal::diagnostic::{Diagnostic, Diagnostics, Severity};

/// The reports, script failures, diagnostic sink and counters of one domain.
pub(crate) struct Reporting {
    /// Shared with completions that outlive a call (a suspended handler's, a registered job's).
    reports: Rc<RefCell<Reports>>,
    /// Failures of scripts the host started: `run_until_idle` answers the first.
    failures: Rc<RefCell<Vec<String>>>,
    /// Where every diagnostic goes as it is made, if anywhere.
    diagnostics: Diagnostics,
    /// Running totals for `stats`.
    pub(crate) counters: Counters,
}

impl Reporting {
    pub(crate) fn new(diagnostics: Diagnostics) -> Reporting {
        Reporting {
            reports: Rc::new(RefCell::new(Reports::default())),
            failures: Rc::new(RefCell::new(Vec::new())),
            diagnostics,
            counters: Counters::default(),
        }
    }

    /// Keeps `report` for the next `take_reports` (or counts it past the bound).
    pub(crate) fn keep(&self, report: Report) {
        self.reports.borrow_mut().push(report);
    }

    /// A mark to read the reports kept after it with [`since`](Self::since).
    pub(crate) fn mark(&self) -> u64 {
        self.reports.borrow().mark()
    }

    /// Copies of the reports kept since `mark` that still wait.
    pub(crate) fn since(&self, mark: u64) -> Vec<Report> {
        self.reports.borrow().since(mark)
    }

    /// How many reports wait.
    pub(crate) fn waiting(&self) -> usize {
        self.reports.borrow().len()
    }

    /// Takes every report waiting, oldest first.
    pub(crate) fn take(&self) -> Vec<Report> {
        self.reports.borrow_mut().take()
    }

    /// The reports, for a completion that reports after the call that made it returned.
    pub(crate) fn reports(&self) -> &Rc<RefCell<Reports>> {
        &self.reports
    }

    /// The script failures, for a completion that records one after its call returned.
    pub(crate) fn failures(&self) -> &Rc<RefCell<Vec<String>>> {
        &self.failures
    }

    /// The first script failure recorded, the others dropped: an entry point answers one.
    pub(crate) fn first_failure(&self) -> Option<String> {
        self.failures.borrow_mut().drain(..).next()
    }

    /// Counts `d` and sends it to the domain's diagnostic sink, if it has one.
    pub(crate) fn diagnose(&self, severity: Severity, d: &Diagnostic) {
        self.counters.diagnosed(severity);
        if let Some(sink) = &self.diagnostics {
            sink.diagnostic(severity, d);
        }
    }
}
