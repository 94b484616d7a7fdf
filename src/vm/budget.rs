//! The per-run budget: deadlines and cancellation enforced by a raw Luau interrupt.
//!
//! Luau calls its `interrupt` callback at every loop back-edge, call and return. mlua's closure
//! interrupt costs about 7 ns per back-edge (2.5x slower loops), so Skein installs a raw C callback
//! instead. It reads one atomic byte that belongs to the current thread's [`Signal`]; while the
//! byte is zero (the overwhelmingly common case) that load is the whole cost.
//!
//! One process-wide watchdog thread sets the byte when a run passes its deadline. Cancelling a
//! running item sets it too. The callback then takes the slow path: it asks the thread's current
//! [`RunGuard`] why, and raises a Luau error naming the reason. It keeps raising at every later
//! interrupt of the same run, so a script that `pcall`s the error cannot keep running: the next
//! back-edge outside the `pcall` raises again.
//!
//! This module owns the signal of each thread and the watchdog; it never touches a VM's tasks.
//!
//! # Memory ordering
//! The flag is read with `Relaxed`: it carries no data, only "look at the slow path". The slow
//! path reads the deadline and the cancel state with `Acquire`, paired with the `Release` stores
//! that set them, so a raised reason is always one that really holds.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// The flag that, once true, stops the runs of one job. Checked by the interrupt's slow path.
pub type CancelToken = AtomicBool;

use mlua::ffi;

/// No reason to interrupt.
const CLEAR: u8 = 0;
/// The watchdog saw the run pass its deadline.
const DEADLINE: u8 = 1;
/// Somebody asked the running item to stop.
const CANCEL: u8 = 2;

/// How often the watchdog looks when no deadline is nearer.
const WATCHDOG_TICK: Duration = Duration::from_millis(5);

/// The interrupt state of one thread that runs Luau.
///
/// The methods are the whole protocol between the thread's runs, the watchdog and cancellers;
/// `loom-tests/tests/budget.rs` model-checks them.
#[derive(Debug)]
pub struct Signal {
    flag: AtomicU8,
    /// Deadline of the current run, in nanoseconds since [`epoch`]; 0 while no run is timed.
    deadline_ns: AtomicU64,
    /// The deadline the current run was given, for the error message (nanoseconds).
    budget_ns: AtomicU64,
}

impl Signal {
    /// A signal with no run in progress.
    pub fn new() -> Self {
        Signal {
            flag: AtomicU8::new(CLEAR),
            deadline_ns: AtomicU64::new(0),
            budget_ns: AtomicU64::new(0),
        }
    }

    /// Asks the run in progress on this signal's thread to stop at its next interrupt. The
    /// caller stores `true` in the run's [`CancelToken`] first.
    pub fn request_cancel(&self) {
        self.flag.fetch_or(CANCEL, Ordering::Release);
    }

    /// The interrupt's fast path: whether anything asks it to look closer.
    #[inline]
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed) != CLEAR
    }

    /// Starts a run that must end by `deadline_ns` (on the signal's clock) and was given
    /// `budget_ns`, for the job whose cancel token is `token`. A nested run keeps the outer
    /// deadline when that one is sooner. Answers the outer run's state for
    /// [`end_run`](Self::end_run).
    ///
    /// A job cancelled before its run begins has its bit raised here: a cancel whose bit another
    /// job's run cleared (its own token was not set) is never lost.
    pub fn begin_run(
        &self,
        deadline_ns: u64,
        budget_ns: u64,
        token: Option<&CancelToken>,
    ) -> (u64, u64) {
        let outer = (
            self.deadline_ns.load(Ordering::Relaxed),
            self.budget_ns.load(Ordering::Relaxed),
        );
        if outer.0 == 0 || deadline_ns < outer.0 {
            self.budget_ns.store(budget_ns, Ordering::Release);
            self.deadline_ns.store(deadline_ns, Ordering::Release);
        }
        if token.is_some_and(|t| t.load(Ordering::Acquire)) {
            self.request_cancel();
        }
        outer
    }

    /// Ends a run, restoring the outer run's deadline. Ending the outermost run clears the flag,
    /// so nothing raised for this run reaches the next.
    pub fn end_run(&self, outer: (u64, u64)) {
        self.budget_ns.store(outer.1, Ordering::Release);
        self.deadline_ns.store(outer.0, Ordering::Release);
        if outer.0 == 0 {
            // A read-modify-write, not a store: if it erases a cancel raised meanwhile, it
            // synchronises with that canceller, so the next run's token check sees the token.
            // (A plain store here loses the cancel; loom found it.)
            self.flag.swap(CLEAR, Ordering::AcqRel);
        }
    }

    /// The watchdog's look at this signal at `now_ns`: raises the flag when the run's deadline
    /// passed, and answers the deadline still ahead, if any.
    pub fn tick(&self, now_ns: u64) -> Option<u64> {
        let deadline = self.deadline_ns.load(Ordering::Acquire);
        if deadline == 0 {
            None
        } else if deadline <= now_ns {
            self.flag.fetch_or(DEADLINE, Ordering::Release);
            None
        } else {
            Some(deadline)
        }
    }

    /// The interrupt's slow path at `now_ns`, for the run whose cancel token is `token`: why
    /// the run must stop, if it must. A raised bit whose reason does not hold (it was meant for a
    /// run that has ended) is cleared; the watchdog and cancellers raise theirs again.
    pub fn check(&self, now_ns: u64, token: Option<&CancelToken>) -> Option<Interruption> {
        let flag = self.flag.load(Ordering::Acquire);
        if flag & CANCEL != 0 && token.is_some_and(|t| t.load(Ordering::Acquire)) {
            return Some(Interruption::Cancelled);
        }
        if flag & DEADLINE != 0 {
            let deadline = self.deadline_ns.load(Ordering::Acquire);
            if deadline != 0 && now_ns >= deadline {
                let budget = Duration::from_nanos(self.budget_ns.load(Ordering::Acquire));
                return Some(Interruption::Deadline(budget));
            }
        }
        self.flag
            .fetch_and(!(flag & (CANCEL | DEADLINE)), Ordering::AcqRel);
        None
    }
}

impl Default for Signal {
    fn default() -> Self {
        Signal::new()
    }
}

/// Why a run was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// The run took longer than its deadline.
    Deadline(Duration),
    /// The item was cancelled.
    Cancelled,
}

thread_local! {
    static SIGNAL: Arc<Signal> = {
        let signal = Arc::new(Signal::new());
        watchdog().register(&signal);
        signal
    };
    /// Raw pointer to this thread's signal, for the interrupt callback's fast path.
    static SIGNAL_PTR: Cell<*const Signal> = const { Cell::new(std::ptr::null()) };
    /// Set while a run on this thread may be cancelled: the cancel token of the running item.
    static CANCEL_TOKEN: Cell<*const CancelToken> = const { Cell::new(std::ptr::null()) };
    /// What the last interrupted run on this thread was stopped for.
    static STOPPED: Cell<Option<Interruption>> = const { Cell::new(None) };
}

/// This thread's signal.
pub(crate) fn current_signal() -> Arc<Signal> {
    SIGNAL.with(Arc::clone)
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// Installs Skein's interrupt callback on a VM. Call once, on the VM's own thread, at build time.
pub(crate) fn install(lua: &mlua::Lua) {
    SIGNAL.with(|signal| SIGNAL_PTR.with(|ptr| ptr.set(Arc::as_ptr(signal))));
    // SAFETY: `lua_callbacks` returns the callbacks of the VM's global state, valid for the VM's
    // life; we only replace the `interrupt` slot, which mlua leaves alone unless its own
    // `set_interrupt` is used (Skein never uses it). The VM lives on this thread.
    unsafe {
        let state = lua.state();
        (*ffi::lua_callbacks(state)).interrupt = Some(interrupt);
    }
}

/// The raw interrupt. The fast path is one thread-local load and one relaxed atomic load.
unsafe extern "C-unwind" fn interrupt(state: *mut ffi::lua_State, gc: c_int) {
    if gc >= 0 {
        // GC-step interrupts can't raise errors safely.
        return;
    }
    let signal = SIGNAL_PTR.with(Cell::get);
    if signal.is_null() {
        return;
    }
    // SAFETY: the pointer comes from this thread's `SIGNAL`, an `Arc` the thread-local keeps alive
    // for the thread's life, and VMs only run on the thread that installed the callback.
    if !unsafe { (*signal).raised() } {
        return;
    }
    // SAFETY: as above; `state` is the running Luau thread handed to us by the VM.
    unsafe { interrupt_slow(state, &*signal) }
}

#[cold]
unsafe fn interrupt_slow(state: *mut ffi::lua_State, signal: &Signal) {
    let reason = match stop_reason(signal) {
        Some(reason) => reason,
        None => return,
    };
    STOPPED.with(|s| s.set(Some(reason)));
    let message = match reason {
        Interruption::Deadline(d) => format!("{}", DeadlineMessage(d)),
        Interruption::Cancelled => "cancelled".to_owned(),
    };
    // SAFETY: we are inside a Luau interrupt with a valid `state`; we make room for one value,
    // push the message and raise it. `message` is dropped before the raise so no Rust value with a
    // destructor is live across the non-local exit.
    unsafe {
        ffi::lua_checkstack(state, 2);
        ffi::lua_pushlstring(state, message.as_ptr().cast(), message.len());
        drop(message);
        ffi::lua_error(state);
    }
}

/// Decides whether the run must stop; clears a stale flag otherwise.
fn stop_reason(signal: &Signal) -> Option<Interruption> {
    let token = CANCEL_TOKEN.with(Cell::get);
    // SAFETY: the token pointer is set by a live `RunGuard`, which borrows the token for its
    // whole life, and is restored when the guard drops.
    let token = unsafe { token.as_ref() };
    signal.check(now_ns(), token)
}

/// Formats a deadline as the rejection text names it.
pub(crate) struct DeadlineMessage(pub(crate) Duration);

impl std::fmt::Display for DeadlineMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "deadline exceeded: one run took longer than {} s",
            format_seconds(self.0)
        )
    }
}

/// Seconds without trailing zeros: `2`, `0.5`, `0.001`.
pub(crate) fn format_seconds(d: Duration) -> String {
    let s = format!("{:.6}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

/// Times one run (a resume up to the next yield) on this thread.
///
/// Dropping the guard ends the run: the deadline is withdrawn and a flag raised for this run is
/// cleared so it cannot hit the next one.
pub(crate) struct RunGuard<'a> {
    signal: Arc<Signal>,
    outer_token: *const CancelToken,
    outer: (u64, u64),
    /// The token is read by the interrupt through a raw pointer while the guard lives.
    _token: std::marker::PhantomData<&'a CancelToken>,
}

impl<'a> RunGuard<'a> {
    /// Starts a run with `deadline`; `cancel` is the token that, once true, stops the run.
    pub(crate) fn start(deadline: Duration, cancel: Option<&'a CancelToken>) -> RunGuard<'a> {
        let signal = current_signal();
        let budget = deadline.as_nanos() as u64;
        let outer = signal.begin_run(now_ns().saturating_add(budget), budget, cancel);
        let token_ptr = cancel.map_or(std::ptr::null(), |t| t as *const CancelToken);
        let outer_token = CANCEL_TOKEN.with(|t| t.replace(token_ptr));
        if outer.0 == 0 {
            STOPPED.with(|s| s.set(None));
        }
        RunGuard {
            signal,
            outer_token,
            outer,
            _token: std::marker::PhantomData,
        }
    }

    /// Why the run was stopped, if the interrupt stopped it.
    pub(crate) fn stopped(&self) -> Option<Interruption> {
        STOPPED.with(Cell::get)
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        CANCEL_TOKEN.with(|t| t.set(self.outer_token));
        self.signal.end_run(self.outer);
    }
}

/// The one thread that turns passed deadlines into interrupt flags.
struct Watchdog {
    signals: Mutex<Vec<Weak<Signal>>>,
    started: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static WATCHDOG: OnceLock<&'static Watchdog> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            signals: Mutex::new(Vec::new()),
            started: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("skein-watchdog".into())
            .spawn(move || dog.run())
            .expect("failed to start the skein watchdog thread");
        dog
    })
}

impl Watchdog {
    fn register(&self, signal: &Arc<Signal>) {
        let mut signals = self.signals.lock().unwrap_or_else(|e| e.into_inner());
        signals.retain(|s| s.strong_count() > 0);
        signals.push(Arc::downgrade(signal));
        self.started.notify_one();
    }

    fn run(&self) {
        let mut signals = self.signals.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = now_ns();
            let mut next = now + WATCHDOG_TICK.as_nanos() as u64;
            for signal in signals.iter().filter_map(Weak::upgrade) {
                if let Some(deadline) = signal.tick(now) {
                    next = next.min(deadline);
                }
            }
            let wait = Duration::from_nanos(next.saturating_sub(now_ns()).max(200_000));
            signals = self
                .started
                .wait_timeout(signals, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm() -> mlua::Lua {
        let lua = mlua::Lua::new();
        install(&lua);
        lua
    }

    #[test]
    fn a_loop_past_its_deadline_is_stopped_with_the_deadline_named() {
        let lua = vm();
        let f: mlua::Function = lua.load("while true do end").into_function().unwrap();
        let guard = RunGuard::start(Duration::from_millis(30), None);
        let started = Instant::now();
        let err = f.call::<()>(()).unwrap_err().to_string();
        assert!(
            err.contains("deadline exceeded: one run took longer than 0.03 s"),
            "{err}"
        );
        assert_eq!(
            guard.stopped(),
            Some(Interruption::Deadline(Duration::from_millis(30)))
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        drop(guard);
        // The next run on the thread is not hit by the old flag.
        let g2 = RunGuard::start(Duration::from_secs(5), None);
        let n: i64 = lua
            .load("local n = 0 for i = 1, 100000 do n += 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 100000);
        assert_eq!(g2.stopped(), None);
    }

    #[test]
    fn pcall_cannot_swallow_the_deadline() {
        let lua = vm();
        let f: mlua::Function = lua
            .load("while true do pcall(function() while true do end end) end")
            .into_function()
            .unwrap();
        let _guard = RunGuard::start(Duration::from_millis(20), None);
        let err = f.call::<()>(()).unwrap_err().to_string();
        assert!(err.contains("deadline exceeded"), "{err}");
    }

    #[test]
    fn a_cancel_token_stops_the_run() {
        let lua = vm();
        let token = Arc::new(AtomicBool::new(false));
        let signal = current_signal();
        let t2 = token.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t2.store(true, Ordering::Release);
            signal.request_cancel();
        });
        let f: mlua::Function = lua.load("while true do end").into_function().unwrap();
        let guard = RunGuard::start(Duration::from_secs(10), Some(&token));
        let err = f.call::<()>(()).unwrap_err().to_string();
        stopper.join().unwrap();
        assert!(err.contains("cancelled"), "{err}");
        assert_eq!(guard.stopped(), Some(Interruption::Cancelled));
    }

    #[test]
    fn a_stale_cancel_flag_without_a_token_is_ignored() {
        let lua = vm();
        current_signal().request_cancel();
        let _guard = RunGuard::start(Duration::from_secs(10), None);
        let n: i64 = lua
            .load("local n = 0 for i = 1, 1000 do n += 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 1000);
    }

    #[test]
    fn seconds_format_without_trailing_zeros() {
        assert_eq!(format_seconds(Duration::from_secs(60)), "60");
        assert_eq!(format_seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(format_seconds(Duration::from_millis(1)), "0.001");
    }
}
