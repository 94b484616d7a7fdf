//! Skein runs Luau in parallel inside a Rust process.
//!
//! A host embeds Skein as its parallel compute backend: a work-stealing [`pool`](Pool) of worker
//! threads, each owning isolated Luau VMs, runs the work that script domains hand it through
//! `jobs.dispatch` and friends. Values cross between VMs as [`Message`]s, copied once each way.
#![warn(missing_docs)]

mod pool;
mod sync;
mod value;
mod vm;

pub use value::{
    DecodeError, DecodeErrorKind, Limits, MapKey, Message, ResourceHandle, TransferError,
    TransferErrorKind,
};
