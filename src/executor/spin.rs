//! The short spin a thread spends re-checking its sources before it parks: a worker between
//! items, and the engine thread waiting on its mailbox.
//!
//! A reply often lands within microseconds (a dispatch and await of a short job), and a park and
//! unpark round trip costs more than that on both sides. Under loom each round and each hint is
//! more states to explore, so the models keep one round of one hint: enough to check the spin
//! path, small enough to finish.

use crate::sync::{hint, thread};

/// Idle rounds spent re-checking before sleeping.
#[cfg(not(loom))]
pub(crate) const SPIN_ROUNDS: u32 = 12;
#[cfg(loom)]
pub(crate) const SPIN_ROUNDS: u32 = 1;
/// Of the spin rounds, the first ones only pause the core; later ones give the CPU away.
const PAUSE_ROUNDS: u32 = 6;
/// `spin_loop` hints per pausing round.
#[cfg(not(loom))]
const PAUSES_PER_ROUND: u32 = 32;
#[cfg(loom)]
const PAUSES_PER_ROUND: u32 = 1;

/// One idle round's pause (`round` counts from 1): first a few `spin_loop` bursts, then yields to
/// other threads.
pub(crate) fn spin(round: u32) {
    if round <= PAUSE_ROUNDS {
        for _ in 0..PAUSES_PER_ROUND {
            hint::spin_loop();
        }
    } else {
        thread::yield_now();
    }
}
