//! The synchronisation primitives Skein's lock-free protocols are written against.
//!
//! Under `cfg(loom)` these are loom's model-checked types; otherwise they are `std`'s. Code that
//! takes part in a protocol modelled in `loom-tests` imports its atomics, `Arc`, `Mutex`, thread
//! spawning and parking from here and never from `std` directly, so the model checks the code that
//! ships.
#![allow(unused_imports)]

#[cfg(loom)]
pub(crate) use loom::{
    hint,
    sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    sync::{Arc, Mutex, MutexGuard},
    thread, thread_local,
};

#[cfg(not(loom))]
pub(crate) use std::{
    hint,
    sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    sync::{Arc, Mutex, MutexGuard},
    thread, thread_local,
};

/// Parks the current thread until it is unparked or, when given, until `deadline` passes.
///
/// Loom has no clock, so under `cfg(loom)` a deadline turns the park into a yield: the caller sees
/// a (permitted) spurious wake-up and re-checks its sources, which is what a timeout would cause.
pub(crate) fn park_until(deadline: Option<std::time::Instant>) {
    match deadline {
        None => thread::park(),
        #[cfg(not(loom))]
        Some(at) => {
            let now = std::time::Instant::now();
            if at > now {
                thread::park_timeout(at - now);
            }
        }
        #[cfg(loom)]
        Some(_) => thread::yield_now(),
    }
}
