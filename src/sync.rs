//! The synchronisation primitives Skein's lock-free protocols are written against.
//!
//! Under `cfg(loom)` these are loom's model-checked types; otherwise they are `std`'s. Code that
//! takes part in a protocol modelled in `loom-tests` imports its atomics, `Arc`, `Mutex` and thread
//! parking from here and never from `std` directly, so the model checks the code that ships.
#![allow(unused_imports)]

#[cfg(loom)]
pub(crate) use loom::{
    sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    sync::{Arc, Mutex},
    thread,
};

#[cfg(not(loom))]
pub(crate) use std::{
    sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering},
    sync::{Arc, Mutex},
    thread,
};
