//! `SIGINT` and `SIGTERM`: the first cancels the run, a second exits at once.
//!
//! [`block`] runs first in `main`, before any other thread exists, and blocks both signals, so
//! every thread the runner and the library start inherits the mask and none of them is ever
//! interrupted by one. A thread of its own then takes them with `sigwait`, as plain values, so
//! no code runs in a signal handler. On the first it interrupts the domain
//! ([`InterruptHandle::interrupt`]): every run of its Luau stops at its next interrupt check,
//! on the pool's workers and on the engine thread, and the main thread ends the run as it would
//! after a failure (the domain stops, the pool joins its threads, a `--trace` is written) and
//! exits `128 + signal` (130, 143). Output needs no flushing: `print` writes each line through
//! (`print.rs`). A second signal, or a first one before the domain exists, exits at once with
//! the same code.
//!
//! `skein serve` hands the thread its own action instead ([`on_first`]): the first signal asks
//! the console to shut the resources down, and the runner exits 0 as after `quit`; when the
//! console has not taken it within 50 ms (a resource's code is running), the action interrupts
//! every resource's code ([`skein::resource::HostInterrupt`]), so the server ends within 100 ms.
//!
//! This file owns the signal mask and the signal thread; the cancel itself is the library's.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use skein::InterruptHandle;

/// The first signal taken, 0 until one is.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// What the first signal does, once the run has something to cancel.
type FirstSignal = Arc<dyn Fn() + Send + Sync>;

/// The first signal's action: interrupt the run's domain, or end the serve console.
static FIRST: OnceLock<Mutex<Option<FirstSignal>>> = OnceLock::new();

fn first() -> &'static Mutex<Option<FirstSignal>> {
    FIRST.get_or_init(|| Mutex::new(None))
}

/// The signals taken here.
fn set() -> libc::sigset_t {
    // SAFETY: `sigemptyset` initialises the set we pass by pointer; `sigaddset` adds valid
    // signal numbers to the initialised set.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Blocks `SIGINT` and `SIGTERM` in this thread (and so in every thread it starts), and starts
/// the thread that takes them. Call before any other thread starts.
pub(crate) fn block() {
    let set = set();
    // SAFETY: `set` is an initialised signal set; the old mask is not asked for.
    let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if blocked != 0 {
        return; // the signals keep their default action: the run dies of them
    }
    let spawned = std::thread::Builder::new()
        .name("skein-signals".into())
        .spawn(move || take(set));
    if spawned.is_err() {
        // Nobody would take them: let them act as they would have.
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

/// The signal thread: the first signal takes its action (interrupts the domain), the next
/// exits.
fn take(set: libc::sigset_t) {
    loop {
        let mut signal: libc::c_int = 0;
        // SAFETY: `set` is initialised and blocked in every thread; `signal` is written by
        // `sigwait` before it returns 0.
        if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
            continue;
        }
        let is_first = RECEIVED
            .compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        let action = first().lock().unwrap_or_else(|e| e.into_inner()).clone();
        match action {
            Some(action) if is_first => action(),
            _ => exit_now(signal),
        }
    }
}

/// Exits with `128 + signal` without running anything more: no destructor, no lock.
fn exit_now(signal: libc::c_int) -> ! {
    // SAFETY: `_exit` ends the process at once; every line `print` wrote is already with the
    // OS, so nothing is lost.
    unsafe { libc::_exit(128 + signal) }
}

/// Hands the signal thread the running domain's handle: from now on a first signal cancels
/// the run instead of exiting at once.
pub(crate) fn watch(handle: InterruptHandle) {
    on_first(move || handle.interrupt());
}

/// From now on a first signal runs `action` (on the signal thread) instead of exiting at once;
/// a second still exits at once.
pub(crate) fn on_first(action: impl Fn() + Send + Sync + 'static) {
    *first().lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(action));
}

/// The first signal taken, if one was: the run ends with `128 + signal`.
pub(crate) fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::Acquire) {
        0 => None,
        signal => Some(signal),
    }
}
