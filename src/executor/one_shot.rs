//! A one-shot cell: one value settled once by any thread, taken once, and waited on by at most
//! one thread at a time, which parks. What a `Promise` waits on (`jobs/leaves/outcome_slot.rs`).
//!
//! Generic, with no Luau in it, so the loom model in `loom-tests/tests/one_shot.rs` runs this
//! code.
//!
//! # Protocol
//!
//! One state byte holds where the cell stands and a `WAITER` bit:
//!
//! ```text
//! PENDING --settle claims--> WRITING --settle publishes--> SETTLED(kind) --take--> TAKEN
//! ```
//!
//! A settle claims the cell with a compare-and-swap from `PENDING` (a second settle, say a late
//! reply after a cancel, finds it claimed and gives its value back), writes the value, and
//! publishes the value's `kind` with a `swap` that also clears `WAITER`: when the swap finds
//! the bit, somebody parks on the cell, and the settle unparks the thread recorded beside it.
//! A settle that finds no waiter costs two atomic operations and no system call.
//!
//! A waiter records its thread, then sets `WAITER` with a compare-and-swap on a state that is
//! still `PENDING` or `WRITING`, and parks. Either the waiter's compare-and-swap comes first (the
//! settle's swap then sees the bit and unparks it) or the settle's swap does (the waiter's
//! compare-and-swap then fails on the changed state, and it reads the value instead of
//! parking): no wake is lost. A waiter that times out clears its bit; an unpark that raced it
//! leaves a token, which costs the thread one spurious wake-up later (every park here loops).
//!
//! # Memory ordering
//!
//! The value is written before the `swap` (`AcqRel`) that publishes its kind, and read after the
//! `Acquire` compare-and-swap that moves the cell to `TAKEN`, so the read sees the write. Only
//! the settle that won the claim writes and only the take that won `TAKEN` reads: no two
//! threads touch the value at once.

use std::cell::UnsafeCell;
use std::time::Instant;

use super::wake_queue::Waited;
use crate::sync::{park_until, thread, AtomicU8, Mutex, Ordering};

/// Not settled.
const PENDING: u8 = 0;
/// A settle has claimed the cell and is writing the value.
const WRITING: u8 = 1;
/// The value was taken out.
const TAKEN: u8 = 2;
/// The first settled state: `SETTLED + kind`.
const SETTLED: u8 = 3;
/// The most kinds a value may be settled as.
pub const MAX_KIND: u8 = 7;
/// Where the cell stands, without the waiter bit.
const STANDING: u8 = 0x0f;
/// A thread parks on the cell (or is about to): the settle wakes it.
const WAITER: u8 = 0x10;

/// Where a [`OneShot`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Not settled yet.
    Pending,
    /// Settled as `kind`, not taken.
    Settled(u8),
    /// Its value was taken out.
    Taken,
}

/// What [`OneShot::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Took<T> {
    /// Not settled yet.
    Pending,
    /// The value, now taken out.
    Value(T),
    /// Taken before.
    Taken,
}

/// A value settled once and taken once; see the module's protocol.
pub struct OneShot<T> {
    state: AtomicU8,
    value: UnsafeCell<Option<T>>,
    /// The thread that parks on the cell, read by a settle that found `WAITER`.
    waiter: Mutex<Option<thread::Thread>>,
}

// SAFETY: `value` is written only by the settle that won the `PENDING -> WRITING` claim and read
// only by the take that won `SETTLED -> TAKEN`, which the state byte orders (module docs);
// everything else is atomics and a mutex. A `T: Send` may therefore cross to whichever thread
// takes it.
unsafe impl<T: Send> Sync for OneShot<T> {}

impl<T> Default for OneShot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> OneShot<T> {
    /// An empty, pending cell.
    pub fn new() -> Self {
        OneShot {
            state: AtomicU8::new(PENDING),
            value: UnsafeCell::new(None),
            waiter: Mutex::new(None),
        }
    }

    /// Settles the cell with `value` of `kind` (at most [`MAX_KIND`]), waking its waiter;
    /// hands the value back when the cell was settled before.
    pub fn settle(&self, value: T, kind: u8) -> Result<(), T> {
        debug_assert!(kind <= MAX_KIND);
        let mut now = self.state.load(Ordering::Relaxed);
        loop {
            if now & STANDING != PENDING {
                return Err(value);
            }
            match self.state.compare_exchange_weak(
                now,
                (now & WAITER) | WRITING,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        // SAFETY: the claim above is won once; until the swap below publishes, no take reads.
        unsafe { *self.value.get() = Some(value) };
        // The mutant publishes with a store that keeps the bit as it was read before the
        // write: a waiter that set it meanwhile is never woken (loom-tests/README.md).
        #[cfg(loom_mutant = "one_shot_blind_publish")]
        let before = {
            let before = now;
            self.state.store(SETTLED + kind, Ordering::Release);
            before
        };
        #[cfg(not(loom_mutant = "one_shot_blind_publish"))]
        let before = self.state.swap(SETTLED + kind, Ordering::AcqRel);
        if before & WAITER != 0 {
            self.wake();
        }
        Ok(())
    }

    #[cold]
    fn wake(&self) {
        let waiter = self
            .waiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(thread) = waiter {
            thread.unpark();
        }
    }

    /// Where the cell stands.
    pub fn standing(&self) -> Standing {
        match self.state.load(Ordering::Acquire) & STANDING {
            PENDING | WRITING => Standing::Pending,
            TAKEN => Standing::Taken,
            settled => Standing::Settled(settled - SETTLED),
        }
    }

    /// Takes the value out of a settled cell; a pending cell stays pending.
    pub fn take(&self) -> Took<T> {
        let mut now = self.state.load(Ordering::Acquire);
        loop {
            match now & STANDING {
                PENDING | WRITING => return Took::Pending,
                TAKEN => return Took::Taken,
                _ => {}
            }
            match self
                .state
                .compare_exchange_weak(now, TAKEN, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        // SAFETY: this take won `SETTLED -> TAKEN` once, after the settle's publishing swap
        // (acquired above); no settle writes again and no other take reads.
        match unsafe { (*self.value.get()).take() } {
            Some(value) => Took::Value(value),
            None => Took::Taken,
        }
    }

    /// Parks the calling thread until the cell is settled (or taken) or `deadline` passes.
    /// One thread waits at a time.
    pub fn wait_until(&self, deadline: Option<Instant>) -> Waited {
        let mut registered = false;
        let mut parked = false;
        loop {
            let now = self.state.load(Ordering::Acquire);
            if !matches!(now & STANDING, PENDING | WRITING) {
                return if parked { Waited::Woken } else { Waited::Ready };
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                let before = self.state.fetch_and(!WAITER, Ordering::Acquire);
                if matches!(before & STANDING, PENDING | WRITING) {
                    return Waited::TimedOut;
                }
                continue;
            }
            if !registered {
                *self.waiter.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
                registered = true;
            }
            if now & WAITER == 0
                && self
                    .state
                    .compare_exchange(now, now | WAITER, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                // Settled (or claimed) meanwhile: look again.
                continue;
            }
            park_until(deadline);
            parked = true;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn settles_once_is_taken_once_and_a_second_settle_comes_back() {
        let cell = OneShot::new();
        assert_eq!(cell.standing(), Standing::Pending);
        assert_eq!(cell.take(), Took::Pending);
        assert_eq!(cell.settle("a", 2), Ok(()));
        assert_eq!(cell.settle("b", 1), Err("b"));
        assert_eq!(cell.standing(), Standing::Settled(2));
        assert_eq!(cell.wait_until(None), Waited::Ready);
        assert_eq!(cell.take(), Took::Value("a"));
        assert_eq!(cell.take(), Took::Taken);
        assert_eq!(cell.standing(), Standing::Taken);
        assert_eq!(cell.settle("c", 0), Err("c"));
    }

    #[test]
    fn a_wait_times_out_at_its_deadline_and_a_later_settle_still_lands() {
        let cell = OneShot::new();
        let at = Instant::now() + Duration::from_millis(20);
        assert_eq!(cell.wait_until(Some(at)), Waited::TimedOut);
        assert!(Instant::now() >= at);
        cell.settle(7, 0).unwrap();
        assert_eq!(cell.take(), Took::Value(7));
    }

    #[test]
    fn a_parked_waiter_is_woken_by_the_settle_from_another_thread() {
        for _ in 0..200 {
            let cell = Arc::new(OneShot::new());
            let settler = {
                let cell = cell.clone();
                std::thread::spawn(move || cell.settle(1u32, 0).unwrap())
            };
            assert_ne!(cell.wait_until(None), Waited::TimedOut);
            settler.join().unwrap();
            assert_eq!(cell.take(), Took::Value(1));
        }
    }

    #[test]
    fn a_value_never_taken_is_dropped_with_the_cell() {
        let value = Arc::new(());
        let cell = OneShot::new();
        cell.settle(value.clone(), 0).unwrap();
        drop(cell);
        assert_eq!(Arc::strong_count(&value), 1);
    }
}
