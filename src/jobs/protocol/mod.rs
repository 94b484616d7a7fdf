//! The protocol between threads, above `leaves`: a job's shared state and budget (`job.rs`),
//! items (`item.rs`), the messages between threads (`messages.rs`), replies and `reply()`, the
//! one function every settle path ends in (`reply.rs`), the `parallelFor` and `map` collector
//! (`gather.rs`), the executor's queues (`pool_shared.rs`), key lanes (`keys.rs`), the warm
//! registry (`warm.rs`), and a principal's cross-thread state with the sending end of its
//! mailbox (`principal_shared.rs`).
//!
//! The files of this row import each other in one cycle on purpose: their types hold each other
//! (`docs/architecture.md`, "Inside `jobs`"). Nothing here names a VM's bindings (`luau`), the
//! worker or the host's handles.

pub(super) mod gather;
pub(super) mod item;
pub(super) mod job;
pub(super) mod keys;
pub(super) mod messages;
pub(super) mod pool_shared;
pub(super) mod principal_shared;
pub(super) mod reply;
pub(super) mod warm;
