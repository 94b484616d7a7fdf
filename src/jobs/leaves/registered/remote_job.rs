//! What crosses threads for a job registered from a worker VM: the engine's [`RemoteOp`] to the
//! worker, a handle's [`Control`] to the engine, the job's `Send + Sync` part ([`RemoteJob`]) and
//! its registration on its way to the engine's registry. The worker side that uses them is
//! `remote.rs`; the engine side is the registry (`mod.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::info::JobInfo;
use super::order::Declared;
use crate::value::Message;

/// What the engine asks of a job's worker VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteOp {
    /// Start this frame's call.
    Run,
    /// The job was cancelled on the engine: forget its functions and end a call still running.
    Forget,
}

/// What a handle in a worker VM asks of the engine's registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Pause,
    Resume,
    /// A cancel in the VM dropped the job's last reference (the directory has freed it): drop
    /// its registry entry.
    Unregister,
}

/// The `Send + Sync` part of a job registered from a worker VM.
pub(crate) struct RemoteJob {
    pub(crate) id: u64,
    /// Set once the job is cancelled, from either side.
    pub(crate) cancelled: AtomicBool,
    /// The job's info as the engine last published it.
    snapshot: Mutex<JobInfo>,
}

impl RemoteJob {
    /// A job not cancelled, whose first snapshot is `info`.
    pub(crate) fn new(id: u64, info: JobInfo) -> RemoteJob {
        RemoteJob {
            id,
            cancelled: AtomicBool::new(false),
            snapshot: Mutex::new(info),
        }
    }

    /// The engine's view changed: publish it for handles in the worker VM.
    pub(crate) fn publish(&self, info: JobInfo) {
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = info;
    }

    pub(crate) fn snapshot(&self) -> JobInfo {
        self.snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

/// A job a worker VM registered, on its way to the engine's registry.
pub(crate) struct RemoteRegistration {
    pub(crate) shared: Arc<RemoteJob>,
    pub(crate) name: Option<String>,
    pub(crate) phase: Arc<str>,
    pub(crate) origin: String,
    pub(crate) metadata: Option<Message>,
    pub(crate) declared: Arc<Declared>,
    pub(crate) kind: &'static str,
    pub(crate) worker: usize,
    pub(crate) vm: u64,
}
