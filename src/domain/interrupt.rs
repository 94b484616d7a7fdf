//! [`InterruptHandle`]: stopping a domain's work from another thread, and the
//! [`InterruptTarget`] it shares with the domain (part of the domain's `Lifecycle`).
//!
//! A domain is `!Send`, so a thread that learns the work must stop (the runner's signal
//! thread, a host's own watchdog) can't call
//! [`ScriptDomain::stop`](crate::ScriptDomain::stop). The handle does from there what a stop
//! does to running work, and no more: it ends the current generation's principal (its queued
//! items are refused, its worker VMs' runs see their token set), raises every pool worker's
//! signal, sets the engine VMs' token and raises the engine thread's signal, so every run of
//! the domain stops at its next interrupt check, and wakes the engine thread so that a
//! [`run_until_idle`](crate::ScriptDomain::run_until_idle) waiting there returns. The stop
//! itself (the shutdown phase, actors, owned resources) stays the engine thread's, when it
//! stops or drops the domain.
//!
//! Its invariants: the target follows the domain's current generation (the domain tells it,
//! on every swap or install of a generation); an interrupt acts once; this file never touches
//! a VM.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::jobs::{DomainEvent, PoolShared, PrincipalShared};
use crate::sync::Ordering;
use crate::vm::{current_signal, CancelToken, Signal};

/// Stops a [`ScriptDomain`](crate::ScriptDomain)'s running work from any thread.
///
/// [`interrupt`](Self::interrupt) stops every run of the domain, on the pool's workers and on
/// its engine thread, at the run's next interrupt check (a loop's back-edge, a call or a
/// return: microseconds, even in `while true do end`); a run inside host code stops when that
/// code returns to Luau. Queued items of the domain are refused unrun, and a
/// [`run_until_idle`](crate::ScriptDomain::run_until_idle) in progress returns
/// [`Error::Interrupted`](crate::Error::Interrupted). From then on every run of the domain's
/// Luau stops at its first check: the domain is good only for
/// [`stop`](crate::ScriptDomain::stop) or drop, on its engine thread, which the host should do
/// next.
///
/// The handle is `Send + Sync` and follows the domain's current generation across restarts
/// and reloads.
///
/// ```
/// use skein::{DomainSpec, Error, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// domain.exec("task.spawn(function() while true do task.wait(10) end end)")?;
/// let handle = domain.interrupt_handle();
/// std::thread::spawn(move || handle.interrupt()).join().unwrap();
/// let err = domain.run_until_idle().unwrap_err();
/// assert!(matches!(err, Error::Interrupted { .. }));
/// assert_eq!(err.to_string(), "run_until_idle: domain 'game' was interrupted");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct InterruptHandle {
    target: Arc<InterruptTarget>,
}

/// What the domain and its handles share.
pub(crate) struct InterruptTarget {
    domain: String,
    requested: AtomicBool,
    /// The token of every engine VM of the domain: set once, by the first interrupt.
    engine: Arc<CancelToken>,
    /// The engine thread's interrupt signal (the domain lives on the thread that made it).
    engine_signal: Arc<Signal>,
    pool: Arc<PoolShared>,
    /// The current generation's principal, kept current by the domain.
    principal: Mutex<Arc<PrincipalShared>>,
}

impl InterruptTarget {
    /// The target of the domain `domain` being made on this thread, whose first generation
    /// is `principal`.
    pub(crate) fn new(
        domain: &str,
        pool: Arc<PoolShared>,
        principal: Arc<PrincipalShared>,
    ) -> Arc<InterruptTarget> {
        Arc::new(InterruptTarget {
            domain: domain.to_owned(),
            requested: AtomicBool::new(false),
            engine: Arc::new(CancelToken::new(false)),
            engine_signal: current_signal(),
            pool,
            principal: Mutex::new(principal),
        })
    }

    /// The domain's generation is now `principal`'s.
    pub(crate) fn follow(&self, principal: &Arc<PrincipalShared>) {
        *self.principal.lock().unwrap_or_else(|e| e.into_inner()) = principal.clone();
    }

    /// The token every engine VM of the domain runs with.
    pub(crate) fn engine_token(&self) -> Arc<CancelToken> {
        self.engine.clone()
    }

    /// Whether the domain was interrupted.
    pub(crate) fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// A handle that interrupts the domain from any thread.
    pub(crate) fn handle(self: &Arc<Self>) -> InterruptHandle {
        InterruptHandle {
            target: self.clone(),
        }
    }
}

impl InterruptHandle {
    /// Stops every run of the domain at its next interrupt check, refuses its queued items and
    /// wakes its engine thread (see the type's docs). Calling it again does nothing more.
    pub fn interrupt(&self) {
        let target = &self.target;
        if target.requested.swap(true, Ordering::AcqRel) {
            return;
        }
        let principal = target
            .principal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let reason = format!("domain '{}' was interrupted", target.domain);
        // As `end_generation` does: the token first, then the raise, so every run of the
        // principal's worker VMs that the raise reaches reads it set.
        principal.end(&reason);
        target.pool.interrupt_runs();
        target.engine.store(true, Ordering::Release);
        target.engine_signal.request_cancel();
        // Wakes a `run_until_idle` that waits on the mailbox; the report says why it ended.
        principal.mailbox.send(DomainEvent::Report {
            label: "interrupt".to_owned(),
            failure: reason,
        });
    }
}

impl fmt::Debug for InterruptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterruptHandle")
            .field("domain", &self.target.domain)
            .finish_non_exhaustive()
    }
}
