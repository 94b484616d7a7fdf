//! The worker side of a kernel job: a native function of the host run over copied data, with
//! no VM involved. A kernel is an item like any other (stolen, counted, refused once its
//! principal ended); only its body is Rust.

use std::sync::Arc;

use super::item_clock::{count_wait, ItemClock};
use crate::jobs::protocol::item::{Item, ItemArgs};
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::reply::reply;
use crate::principal::capability::install;
use crate::vm::{panic_message, FailureKind, JobFailure, Outcome};

/// Runs a kernel item on this thread and replies with its result. A panic in the kernel is
/// contained: the item is rejected naming it, and the worker thread goes on serving.
pub(super) fn run(item: Item, pool: &Arc<PoolShared>) {
    if !item.job.handoff.try_start() {
        return; // cancelled while queued: the canceller settled the promise
    }
    count_wait(&item);
    let clock = ItemClock::start(&item);
    let Item {
        principal,
        job,
        args,
        reply: reply_to,
        authority,
        ..
    } = item;
    let entry = job.target.entry.clone();
    let ItemArgs::Kernel(call) = args else {
        unreachable!("kernel::run is given kernel items only");
    };
    let failure = |kind, message| {
        Outcome::Rejected(Arc::new(JobFailure {
            job: job.label(),
            module: None,
            entry: Some(entry.to_string()),
            kind,
            message,
            traceback: None,
        }))
    };
    let outcome = if !principal.is_alive() {
        failure(FailureKind::Refused, principal.end_reason())
    } else {
        let kernel = call.kernel;
        let input = call.input;
        // A kernel is native work of its dispatcher: it runs under the item's authority.
        let installed = install(Some(&authority));
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || kernel(input)));
        drop(installed);
        match ran {
            Ok(Ok(message)) => Outcome::Resolved(message),
            Ok(Err(e)) => failure(FailureKind::Raised, format!("kernel '{entry}' failed: {e}")),
            Err(payload) => failure(
                FailureKind::Panicked,
                format!("kernel '{entry}' panicked: {}", panic_message(&payload)),
            ),
        }
    };
    job.handoff.finish();
    if let Some(clock) = clock {
        clock.finish(&principal, &job);
    }
    reply(&principal, reply_to, outcome, pool);
}
