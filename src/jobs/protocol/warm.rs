//! The domain's `jobs.warm` registry: its entries, their waiting promises and each worker's
//! result. The Luau call that adds to it is `warm_api.rs`.
//!
//! A warm entry is kept per principal (one generation of one domain) for as long as the principal
//! lives: every worker VM of the principal runs each active entry once, before any item of the
//! principal starts in it (the worker side is `warm_pass`). A VM built later, after a panic
//! dropped the one before, runs the active entries before its first item too.
//!
//! The call's promise settles once every worker of the pool has reported a run. The warm builds
//! the principal's VM on every worker, so "every VM up at the call" is every worker: one result
//! slot per worker, the first report for a slot counts, and a rebuilt VM's run does not report
//! again. A second call for the same module file and entry runs nothing: it waits on (or reads)
//! the same aggregation, so its promise settles the same way.
//!
//! This file never touches a VM: it holds plain data behind a lock, and reaches promises only
//! through [`reply`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::pool_shared::PoolShared;
use super::principal_shared::PrincipalShared;
use super::reply::{reply, ReplyTo};
use crate::principal::capability::Authority;
use crate::value::Message;
use crate::vm::{FailureKind, JobFailure, Outcome};

/// The longest a warm entry may take, waits included, from its start to its end. Read between
/// runs: a run in progress when it passes goes on to its next yield (or its own deadline).
///
/// ```
/// assert_eq!(skein::DomainSpec::DEFAULT_WARM_BOUND, std::time::Duration::from_secs(60));
/// ```
pub(crate) const WARM_BOUND: Duration = Duration::from_secs(60);

/// How many times a panic outside an entry's own code may end a VM while the entry runs there
/// before the entry fails for the epoch: the first ending runs it once more in the VM built
/// next, the second fails it (counted per entry across every worker of the pool).
pub(crate) const OUTSIDE_PANICS_FORGIVEN: u32 = 1;

/// How one worker's run of an entry ended, as the aggregation keeps it.
pub(crate) type WorkerResult = Result<(), String>;

/// A principal's warm entries, in the order they were first asked for.
#[derive(Default)]
pub(crate) struct WarmRegistry {
    entries: Mutex<Vec<Arc<WarmEntry>>>,
    next_id: AtomicU64,
}

impl WarmRegistry {
    /// The entry for `module`'s `entry`, added when new (the answer's flag), to run under
    /// `authority` (the first caller's).
    pub(crate) fn find_or_add(
        &self,
        module: Arc<Path>,
        spec: Arc<str>,
        entry: &str,
        workers: usize,
        authority: Option<Arc<Authority>>,
    ) -> (Arc<WarmEntry>, bool) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = entries
            .iter()
            .find(|e| e.module == module && &*e.entry == entry)
        {
            return (found.clone(), false);
        }
        let added = Arc::new(WarmEntry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            module,
            spec,
            entry: entry.into(),
            authority,
            state: Mutex::new(WarmState::new(workers)),
        });
        entries.push(added.clone());
        (added, true)
    }

    /// The entries a new VM runs, in order: every one not failed for the epoch.
    pub(crate) fn active(&self) -> Vec<Arc<WarmEntry>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .filter(|e| e.failed().is_none())
            .cloned()
            .collect()
    }
}

/// One `jobs.warm(module, entry)` of a principal: what to run and how its runs went.
pub(crate) struct WarmEntry {
    /// Unique within the principal: how a VM remembers it ran the entry.
    pub(crate) id: u64,
    /// The module file, resolved as `require` resolves it from the first caller.
    pub(crate) module: Arc<Path>,
    /// The module as the first caller wrote it, for names in stats and messages.
    pub(crate) spec: Arc<str>,
    pub(crate) entry: Arc<str>,
    /// The authority of the task that first asked for it: every run holds it, so a warm entry
    /// never holds more than the code that asked for it (`None`: the VM's own).
    pub(crate) authority: Option<Arc<Authority>>,
    state: Mutex<WarmState>,
}

struct WarmState {
    /// Why the entry runs on no later VM (it panicked, or ran past a bound), once it does not.
    failed: Option<String>,
    /// Runs ended by a panic outside the entry's own code (its VM dropped under it), on any
    /// worker of the pool.
    outside_panics: u32,
    /// Per worker, its first run's result.
    results: Vec<Option<WorkerResult>>,
    /// The call's outcome, once every worker reported.
    settled: Option<Outcome>,
    /// The promises waiting for that outcome.
    waiters: Vec<ReplyTo>,
}

impl WarmState {
    /// No run recorded yet, for a pool of `workers`.
    fn new(workers: usize) -> WarmState {
        WarmState {
            failed: None,
            outside_panics: 0,
            results: vec![None; workers],
            settled: None,
            waiters: Vec::new(),
        }
    }
}

impl WarmEntry {
    fn state(&self) -> std::sync::MutexGuard<'_, WarmState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `module.entry`: the entry's name in stats rows.
    pub(crate) fn name(&self) -> String {
        format!("{}.{}", self.spec, self.entry)
    }

    /// `"./registry".build`: how refusals and reports name the entry.
    pub(crate) fn quoted(&self) -> String {
        format!("\"{}\".{}", self.spec, self.entry)
    }

    /// Why the entry runs on no later VM, if it failed for the epoch.
    pub(crate) fn failed(&self) -> Option<String> {
        self.state().failed.clone()
    }

    /// A panic outside the entry's own code (the VM's boot, a watcher, a task another entry left
    /// behind) ended the VM the entry was running in. Answers true when the entry runs once more,
    /// in the VM built next: the first [`OUTSIDE_PANICS_FORGIVEN`] such endings of the epoch.
    /// Past them the caller fails the entry, naming the panic.
    pub(crate) fn ended_by_outside_panic(&self) -> bool {
        let mut state = self.state();
        state.outside_panics = state.outside_panics.saturating_add(1);
        state.outside_panics <= OUTSIDE_PANICS_FORGIVEN && state.failed.is_none()
    }

    /// Fails the entry for the epoch; answers true the first time, so it is reported once.
    pub(crate) fn fail(&self, reason: &str) -> bool {
        let mut state = self.state();
        if state.failed.is_some() {
            return false;
        }
        state.failed = Some(reason.to_owned());
        true
    }

    /// Whether worker `worker`'s run is one the call's promise waits for: its outcome then
    /// carries the run's failure, and whoever awaits it sees it.
    pub(crate) fn awaited_run(&self, worker: usize) -> bool {
        let state = self.state();
        state.settled.is_none() && matches!(state.results.get(worker), Some(None))
    }

    /// Records worker `worker`'s run; when it was the last one missing, settles every waiting
    /// promise. A worker's later runs (a rebuilt VM) change nothing.
    pub(crate) fn record(
        &self,
        principal: &PrincipalShared,
        pool: &PoolShared,
        worker: usize,
        result: WorkerResult,
    ) {
        let (outcome, waiters) = {
            let mut state = self.state();
            match state.results.get_mut(worker) {
                Some(slot @ None) => *slot = Some(result),
                _ => return,
            }
            if state.settled.is_some() || state.results.iter().any(Option::is_none) {
                return;
            }
            let outcome = self.outcome(&state.results);
            state.settled = Some(outcome.clone());
            (outcome, std::mem::take(&mut state.waiters))
        };
        for to in waiters {
            reply(principal, to, outcome.clone(), pool);
        }
    }

    /// Resolved with nil when every run ended well; otherwise rejected naming each failed
    /// worker and its error.
    fn outcome(&self, results: &[Option<WorkerResult>]) -> Outcome {
        let failures: Vec<String> = results
            .iter()
            .enumerate()
            .filter_map(|(worker, r)| match r {
                // Each run's error without its stack: the reports of the runs carry those.
                Some(Err(e)) => Some(format!(
                    "worker {worker}: {}",
                    e.split("\nstack traceback:").next().unwrap_or(e)
                )),
                _ => None,
            })
            .collect();
        if failures.is_empty() {
            return Outcome::Resolved(Message::Nil);
        }
        Outcome::Rejected(Arc::new(JobFailure {
            job: format!("jobs.warm {}", self.quoted()),
            module: Some(self.module.to_path_buf()),
            entry: Some(self.entry.to_string()),
            kind: FailureKind::Raised,
            message: failures.join("; "),
            traceback: None,
        }))
    }

    /// Adds a promise to settle with the call's outcome; answers the outcome instead when it is
    /// known already.
    pub(crate) fn wait(&self, to: ReplyTo) -> Result<(), (Outcome, ReplyTo)> {
        let mut state = self.state();
        match &state.settled {
            Some(outcome) => Err((outcome.clone(), to)),
            None => {
                state.waiters.push(to);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(workers: usize) -> WarmEntry {
        WarmEntry {
            id: 0,
            module: Path::new("/m/registry.luau").into(),
            spec: "./registry".into(),
            entry: "build".into(),
            authority: None,
            state: Mutex::new(WarmState::new(workers)),
        }
    }

    #[test]
    fn the_first_outside_panic_runs_the_entry_again_and_the_second_does_not() {
        let e = entry(2);
        assert!(e.ended_by_outside_panic(), "the first: once more");
        assert!(!e.ended_by_outside_panic(), "the second: it fails");
        assert!(!e.ended_by_outside_panic());
        let failed = entry(1);
        failed.fail("bound");
        assert!(
            !failed.ended_by_outside_panic(),
            "failed already: nothing reruns"
        );
    }

    #[test]
    fn the_outcome_names_each_failed_worker_in_order() {
        let e = entry(3);
        let results = [
            Some(Err("boom".to_owned())),
            Some(Ok(())),
            Some(Err("bang".to_owned())),
        ];
        let Outcome::Rejected(failure) = e.outcome(&results) else {
            panic!("expected a rejection");
        };
        assert_eq!(failure.message, "worker 0: boom; worker 2: bang");
        assert_eq!(
            failure.to_string(),
            "job 'jobs.warm \"./registry\".build' failed: worker 0: boom; worker 2: bang"
        );
        assert_eq!(
            e.outcome(&[Some(Ok(())), Some(Ok(())), Some(Ok(()))]),
            Outcome::Resolved(Message::Nil)
        );
    }

    #[test]
    fn failing_is_reported_once_and_hides_the_entry_from_new_vms() {
        let registry = WarmRegistry::default();
        let (a, added) = registry.find_or_add(
            Path::new("/m/a.luau").into(),
            "./a".into(),
            "build",
            2,
            None,
        );
        assert!(added);
        let (again, added) =
            registry.find_or_add(Path::new("/m/a.luau").into(), "a".into(), "build", 2, None);
        assert!(
            !added,
            "the same file and entry, however the caller spelled it"
        );
        assert_eq!(again.id, a.id);
        let (b, _) = registry.find_or_add(
            Path::new("/m/a.luau").into(),
            "./a".into(),
            "other",
            2,
            None,
        );
        assert_ne!(b.id, a.id);
        assert_eq!(registry.active().len(), 2);
        assert!(a.fail("host code panicked: x"));
        assert!(!a.fail("again"), "reported once");
        assert_eq!(a.failed().as_deref(), Some("host code panicked: x"));
        let active: Vec<u64> = registry.active().iter().map(|e| e.id).collect();
        assert_eq!(active, [b.id]);
    }
}
