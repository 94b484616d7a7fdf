//! Loom models of the per-run budget: a thread's runs, the watchdog and cancellers share one
//! `Signal`. Time is a parameter here (loom has no clock): the tests pick `now` for each party.
//!
//! A VM is modelled by [`ModelVm`]: its interrupt slot is a loom atomic (the real store is a
//! single-copy-atomic pointer write, with no ordering of its own, so the model uses `Relaxed`),
//! and its memory is a loom cell that the VM's thread overwrites when it drops the VM after the
//! run ended. Every store into the slot first reads that cell, so loom reports any store not
//! ordered before the drop: a write into a VM whose run has ended.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;
use loom_tests::Branches;
use skein::__loom::{CancelToken, InterruptHook, Interruption, RunTokens, Signal};
use std::sync::atomic::Ordering;
use std::time::Duration;

const BUDGET: u64 = 100;

/// One VM as the budget protocol sees it.
struct ModelVm {
    /// The callbacks' `interrupt` slot: whether Skein's callback is installed.
    installed: AtomicBool,
    /// The VM's memory: `true` until its thread drops it.
    alive: UnsafeCell<bool>,
    /// The VM's own thread (the one that made it).
    owner: thread::ThreadId,
    /// Installs made from another thread (a raiser's), counted outside the model.
    foreign_installs: std::sync::atomic::AtomicUsize,
}

impl ModelVm {
    fn new() -> Arc<ModelVm> {
        Arc::new(ModelVm {
            installed: AtomicBool::new(false),
            alive: UnsafeCell::new(true),
            owner: thread::current().id(),
            foreign_installs: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// What the VM's next safepoint reads.
    fn installed(&self) -> bool {
        self.installed.load(Ordering::Relaxed)
    }

    /// The VM's thread drops the VM (its run has ended).
    fn drop_vm(&self) {
        // SAFETY: only this model's VM thread writes the cell; loom checks the readers.
        self.alive.with_mut(|alive| unsafe { *alive = false });
    }

    /// Whether a raiser's thread installed the interrupt itself (rather than the VM's thread).
    fn installed_by_a_raiser(&self) -> bool {
        self.foreign_installs.load(Ordering::Relaxed) > 0
    }
}

/// The hook a run registers: the model VM's slot.
struct Hook(Arc<ModelVm>);

// SAFETY: the word is the address `Arc::into_raw` gives (not 0, aligned), and `from_word` takes
// the same `Arc` back.
unsafe impl InterruptHook for Hook {
    fn set(&self, installed: bool) {
        // SAFETY: a read of the VM's memory; loom reports it if it races the drop.
        let alive = self.0.alive.with(|alive| unsafe { *alive });
        assert!(alive, "a store into a VM that was dropped");
        if installed && thread::current().id() != self.0.owner {
            self.0.foreign_installs.fetch_add(1, Ordering::Relaxed);
        }
        self.0.installed.store(installed, Ordering::Relaxed);
    }

    fn into_word(self) -> usize {
        Arc::into_raw(self.0) as usize
    }

    unsafe fn from_word(word: usize) -> Self {
        // SAFETY: the caller hands back a word from `into_word`, once.
        Hook(unsafe { Arc::from_raw(word as *const ModelVm) })
    }
}

/// The tokens of a run of a job that has `token`, on a VM with no token of its own.
fn job(token: &CancelToken) -> RunTokens<'_> {
    RunTokens {
        job: Some(token),
        vm: None,
    }
}

/// No token: a run that only its deadline stops.
const NONE: RunTokens<'static> = RunTokens {
    job: None,
    vm: None,
};

fn signal() -> Arc<Signal<Hook>> {
    Arc::new(Signal::new())
}

/// A watchdog tick for an ended run must not stop the next run, whose deadline is ahead.
#[test]
fn a_stale_deadline_never_stops_the_next_run() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let vm = ModelVm::new();
        // Run 1: deadline 100, passed at now = 150 from the watchdog's point of view.
        let outer = signal.begin_run(Hook(vm.clone()), 100, BUDGET, NONE);
        let dog = {
            let signal = signal.clone();
            thread::spawn(move || signal.tick(150))
        };
        signal.end_run(outer, NONE);
        // Run 2 starts at 150 with deadline 250: checked at 160 it must go on.
        let outer = signal.begin_run(Hook(vm.clone()), 250, BUDGET, NONE);
        let stopped = signal.check(160, NONE);
        // Side 1: the tick came before run 2's deadline was set (it raised for run 1, or saw no
        // run); side 0: it saw run 2's deadline ahead.
        BRANCHES.hit_if(dog.join().unwrap().is_none());
        assert_eq!(stopped, None, "run 2 was stopped by run 1's deadline");
        // And whatever the interleaving, a check now still does not stop run 2.
        assert_eq!(signal.check(160, NONE), None);
        signal.end_run(outer, NONE);
    });
    BRANCHES.assert_both();
}

/// A deadline that really passed is never lost: the run is stopped by a check after the tick.
#[test]
fn a_passed_deadline_stops_the_run() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let vm = ModelVm::new();
        let outer = signal.begin_run(Hook(vm.clone()), 100, BUDGET, NONE);
        let dog = {
            let signal = signal.clone();
            thread::spawn(move || {
                signal.tick(150);
            })
        };
        // The running thread checks (as the interrupt would) at 150, concurrently with the tick.
        let during = signal.check(150, NONE);
        dog.join().unwrap();
        // Side 1: the check racing the tick already saw the raise.
        BRANCHES.hit_if(during.is_some());
        let after = if during.is_none() {
            // A check racing the tick may clear nothing or see nothing; the next tick raises again.
            signal.tick(160);
            signal.check(160, NONE)
        } else {
            during
        };
        assert_eq!(
            after,
            Some(Interruption::Deadline(Duration::from_nanos(BUDGET)))
        );
        signal.end_run(outer, NONE);
    });
    BRANCHES.assert_both();
}

/// A cancel is never lost: not when another job's run on the same thread clears the bit (its own
/// token is not set), and not when it lands while the cancelled job runs. And a cancel never
/// stops a run whose own token is not set.
#[test]
fn a_cancel_reaches_its_run_and_only_its_run() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let vm = ModelVm::new();
        let token = Arc::new(CancelToken::new(false));
        let other = CancelToken::new(false);
        let canceller = {
            let (signal, token) = (signal.clone(), token.clone());
            thread::spawn(move || {
                token.store(true, Ordering::Release);
                signal.request_cancel();
            })
        };
        // Another job's run on the thread: its interrupt must not stop it.
        let outer = signal.begin_run(Hook(vm.clone()), 1_000, BUDGET, job(&other));
        assert_eq!(signal.check(10, job(&other)), None);
        signal.end_run(outer, NONE);
        // The cancelled job's run: stopped by a check once the canceller is done.
        let outer = signal.begin_run(Hook(vm.clone()), 1_000, BUDGET, job(&token));
        let during = signal.check(20, job(&token));
        canceller.join().unwrap();
        // Side 1: the check racing the canceller already saw the cancel.
        BRANCHES.hit_if(during.is_some());
        let after = during.or_else(|| signal.check(20, job(&token)));
        assert_eq!(after, Some(Interruption::Cancelled), "the cancel was lost");
        signal.end_run(outer, NONE);
    });
    BRANCHES.assert_both();
}

/// A raise while a run is registered always installs the interrupt on that run's VM, whether it
/// lands before, during or after `begin_run`; and ending the run removes it.
#[test]
fn a_raise_during_a_run_installs_on_its_vm() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let vm = ModelVm::new();
        let token = Arc::new(CancelToken::new(false));
        let canceller = {
            let (signal, token) = (signal.clone(), token.clone());
            thread::spawn(move || {
                token.store(true, Ordering::Release);
                signal.request_cancel();
            })
        };
        let outer = signal.begin_run(Hook(vm.clone()), 1_000, BUDGET, job(&token));
        canceller.join().unwrap();
        assert!(vm.installed(), "a cancel during the run was not installed");
        // Side 1: the canceller found the run registered and installed on its VM itself; side 0:
        // it raised before the registration and `begin_run` installed.
        BRANCHES.hit_if(vm.installed_by_a_raiser());
        assert_eq!(signal.check(20, job(&token)), Some(Interruption::Cancelled));
        assert!(vm.installed(), "a raising interrupt must stay installed");
        signal.end_run(outer, NONE);
        assert!(!vm.installed(), "the ended run's VM kept the interrupt");
        vm.drop_vm();
    });
    BRANCHES.assert_both();
}

/// A watchdog tick racing the end of a run and the drop of its VM never stores into the dropped
/// VM; if it lands on the next run's VM, that run's interrupt finds the raise stale, goes on, and
/// removes the interrupt again.
#[test]
fn a_raise_racing_the_end_of_a_run_never_writes_into_its_vm() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let first = ModelVm::new();
        let outer = signal.begin_run(Hook(first.clone()), 100, BUDGET, NONE);
        let dog = {
            let signal = signal.clone();
            thread::spawn(move || {
                signal.tick(150);
            })
        };
        signal.end_run(outer, NONE);
        first.drop_vm();
        let second = ModelVm::new();
        let outer = signal.begin_run(Hook(second.clone()), 250, BUDGET, NONE);
        dog.join().unwrap();
        // Side 1: the stale raise reached the next run's VM.
        BRANCHES.hit_if(second.installed());
        if second.installed() {
            assert_eq!(
                signal.check(160, NONE),
                None,
                "a stale raise stopped the run"
            );
            assert!(
                !second.installed(),
                "a stale raise left the interrupt installed"
            );
        }
        assert!(
            !signal.raised() || second.installed(),
            "a raised flag with no interrupt"
        );
        signal.end_run(outer, NONE);
        assert!(!second.installed());
        second.drop_vm();
    });
    BRANCHES.assert_both();
}

/// A nested run of another job on another VM: a cancel of the outer job raised at any point
/// reaches the outer VM once the nested run ends, even when the nested run's interrupt saw it
/// and cleared it as stale for its own job; and the nested VM, dropped after its run, is never
/// written afterwards.
#[test]
fn a_nested_run_hands_a_raise_back_to_the_outer_vm() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let outer_vm = ModelVm::new();
        let token = Arc::new(CancelToken::new(false));
        let outer = signal.begin_run(Hook(outer_vm.clone()), 1_000, BUDGET, job(&token));
        let canceller = {
            let (signal, token) = (signal.clone(), token.clone());
            thread::spawn(move || {
                token.store(true, Ordering::Release);
                signal.request_cancel();
            })
        };
        let inner_vm = ModelVm::new();
        let other = CancelToken::new(false);
        let inner = signal.begin_run(Hook(inner_vm.clone()), 2_000, BUDGET, job(&other));
        // The nested job's interrupt, if the raise reached it: not its cancel, so it goes on
        // (and clears the bit as stale for its job). Side 1: the raise reached the nested VM.
        let reached = inner_vm.installed();
        BRANCHES.hit_if(reached);
        if reached {
            assert_eq!(
                signal.check(15, job(&other)),
                None,
                "the nested job was stopped"
            );
        }
        signal.end_run(inner, job(&token));
        assert!(!inner_vm.installed(), "the nested VM kept the interrupt");
        inner_vm.drop_vm();
        canceller.join().unwrap();
        assert!(
            outer_vm.installed(),
            "the cancel did not reach the outer VM"
        );
        assert_eq!(signal.check(20, job(&token)), Some(Interruption::Cancelled));
        signal.end_run(outer, NONE);
        assert!(!outer_vm.installed());
        outer_vm.drop_vm();
    });
    BRANCHES.assert_both();
}

/// A nested run on the outer run's own VM (a `task.spawn` inside a run): a watchdog raise at any
/// point is installed on that VM when the nested run ends, and ending the outer run removes it.
#[test]
fn a_nested_run_on_the_same_vm_keeps_a_raise() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let vm = ModelVm::new();
        let outer = signal.begin_run(Hook(vm.clone()), 100, BUDGET, NONE);
        let dog = {
            let signal = signal.clone();
            thread::spawn(move || {
                signal.tick(150);
            })
        };
        let inner = signal.begin_run(Hook(vm.clone()), 300, BUDGET, NONE);
        signal.end_run(inner, NONE);
        // Side 1: the raise came before the nested run ended; side 0: after.
        BRANCHES.hit_if(vm.installed());
        dog.join().unwrap();
        assert!(vm.installed(), "the deadline's raise did not reach the VM");
        assert_eq!(
            signal.check(150, NONE),
            Some(Interruption::Deadline(Duration::from_nanos(BUDGET)))
        );
        signal.end_run(outer, NONE);
        assert!(!vm.installed(), "the ended run's VM kept the interrupt");
        vm.drop_vm();
    });
    BRANCHES.assert_both();
}

/// A generation's end stops every run of its worker VMs: the ender sets the VM's token (the
/// principal's, which every run of the VM carries beside its job's) and raises the worker's
/// signal once. A cancel raised for a job that has since ended is still on the flag when the run
/// begins, so the run's interrupt may find that bit stale and clear it at the moment the ender
/// raises: the clear must not lose the end. (The mutant `budget_check_job_token_only` re-checks
/// only the job's token after the clear, and the end is lost.)
#[test]
fn a_generation_end_reaches_the_run_through_its_vm_token() {
    static BRANCHES: Branches = Branches::new();
    loom::model(|| {
        let signal = signal();
        let vm = ModelVm::new();
        let halt = Arc::new(CancelToken::new(false));
        // A cancel of a job that is no longer running: stale for the run below.
        signal.request_cancel();
        let tokens = RunTokens {
            job: None,
            vm: Some(&halt),
        };
        let outer = signal.begin_run(Hook(vm.clone()), 1_000, BUDGET, tokens);
        let ender = {
            let (signal, halt) = (signal.clone(), halt.clone());
            thread::spawn(move || {
                halt.store(true, Ordering::Release);
                signal.request_cancel();
            })
        };
        // The run's interrupt looks once, while the end may land.
        let first = signal.check(20, tokens);
        ender.join().unwrap();
        // Side 1: the end was seen at the first look; side 0: the look found only the stale
        // bit, and the end reaches the run's next interrupt.
        BRANCHES.hit_if(first.is_some());
        let stopped = first.or_else(|| {
            assert!(
                vm.installed(),
                "the generation's end was lost: no interrupt installed"
            );
            signal.check(30, tokens)
        });
        assert_eq!(
            stopped,
            Some(Interruption::Cancelled),
            "the generation's end was lost"
        );
        signal.end_run(outer, NONE);
        assert!(!vm.installed(), "the ended run's VM kept the interrupt");
        vm.drop_vm();
    });
    BRANCHES.assert_both();
}
