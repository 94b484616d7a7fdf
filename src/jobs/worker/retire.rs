//! How a worker lets go of a VM: when its principal ended ([`end_of_principal`]), or when it
//! is retired ([`retire`]) after a panic escaped into the worker or after it reached its memory
//! limit. Whatever lived in the VM is answered, and what the VM held back is handed to the VM
//! built next.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashSet as HashSet;

use super::warm_pass::{ParkedItem, PassContext};
use super::worker_vm::WorkerVm;
use crate::jobs::luau::registered::remote::vm_lost;
use crate::jobs::protocol::messages::{DomainEvent, WorkerMsg};
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::vm::TaskFailure;

/// The source of a report that a worker VM was retired (it reached its memory limit): what
/// failed there is answered or reported on its own, so the note is not a failure
/// ([`Report::is_failure`](crate::Report::is_failure)).
pub(crate) const VM_RETIRED: &str = "worker VM retired";

/// Why a worker drops one of its VMs and builds it anew.
pub(super) enum VmEnd<'a> {
    /// Host code panicked outside the scheduler's containment (the panic's message).
    Panicked(&'a str),
    /// The VM reached its memory limit (the out-of-memory text naming the VM and the limit).
    OutOfMemory(&'a str),
}

impl VmEnd<'_> {
    /// How a job that was running in the VM fails.
    fn failure(&self) -> TaskFailure {
        match self {
            VmEnd::Panicked(message) => TaskFailure::Panicked((*message).to_owned()),
            VmEnd::OutOfMemory(text) => {
                TaskFailure::raised(format!("its worker VM was retired: {text}"), String::new())
            }
        }
    }

    /// The end of "the worker VM that registered it was ...".
    fn replaced(&self) -> String {
        match self {
            VmEnd::Panicked(message) => format!("replaced after host code panicked: {message}"),
            VmEnd::OutOfMemory(text) => format!("retired: {text}"),
        }
    }

    /// What the domain's report says happened.
    fn report(&self) -> String {
        match self {
            VmEnd::Panicked(message) => format!("host code panicked: {message}"),
            VmEnd::OutOfMemory(text) => text.to_string(),
        }
    }
}

/// The principal of `wvm` has ended: its running jobs fail now, naming why, so whoever awaits
/// them is answered. Answers the items its warm pass held back, to be refused unrun like any
/// other queued item of an ended principal.
pub(super) fn end_of_principal(wvm: &mut WorkerVm) -> VecDeque<ParkedItem> {
    let parked = wvm.warm.take_parked();
    let reason = wvm.principal.end_reason();
    for owner in wvm.take_running() {
        wvm.vm.drop_owner(&owner);
        let failure = TaskFailure::raised(reason.clone(), String::new());
        owner.complete(&wvm.vm.lua, Err(failure));
    }
    parked
}

/// Drops worker `worker`'s VM `wvm`, taken out of its list, answering everything that lived in
/// it: its running jobs and its registered jobs fail naming `why`; a warm entry running in it
/// fails too (or, the first time a panic ends a VM under it, runs again), and the entries it had
/// yet to run are posted to the worker again. Answers the
/// items the pass held back, for the VM built next. The keys bound here stay bound to this
/// worker: the next VM has seen none of them, so each key's next item runs with
/// `jobs.context().fresh` true.
pub(super) fn retire(
    mut wvm: WorkerVm,
    why: &VmEnd<'_>,
    worker: usize,
    pool: &Arc<PoolShared>,
) -> VecDeque<ParkedItem> {
    let pass = PassContext {
        vm: &wvm.vm,
        principal: &wvm.principal,
        pool,
        worker,
    };
    let outside_panic = matches!(why, VmEnd::Panicked(_));
    let (parked, unrun) = wvm.warm.abandon(&pass, why.failure(), outside_panic);
    for entry in unrun {
        pool.exec.post(
            worker,
            WorkerMsg::Warm {
                principal: wvm.principal.clone(),
                entry,
            },
        );
    }
    // The report goes first: the mailbox keeps each sender's order, so an engine that sees a
    // job of this VM rejected (and may stop pumping then) has the report already.
    let keys = dropped_keys(&wvm.keys_seen);
    wvm.principal.mailbox.send(DomainEvent::Report {
        label: VM_RETIRED.to_owned(),
        failure: format!(
            "worker {worker}: {}; the worker's VM was replaced{keys}",
            why.report()
        ),
    });
    for owner in wvm.take_running() {
        owner.complete(&wvm.vm.lua, Err(why.failure()));
    }
    // Jobs registered from this VM lived in it: each is errored, naming why.
    let lost = format!("the worker VM that registered it was {}", why.replaced());
    vm_lost(&wvm.vm.lua, &wvm.principal, &lost);
    parked
}

/// How many keys a retirement report names; the rest it counts.
const REPORTED_KEYS: usize = 8;

/// `; the state of keys 'a', 'b' and 3 more was dropped with it`, or nothing without keys.
fn dropped_keys(keys: &HashSet<Bytes>) -> String {
    if keys.is_empty() {
        return String::new();
    }
    let mut names: Vec<String> = keys
        .iter()
        .map(|k| format!("'{}'", String::from_utf8_lossy(k)))
        .collect();
    names.sort();
    let more = names.len().saturating_sub(REPORTED_KEYS);
    names.truncate(REPORTED_KEYS);
    let mut list = names.join(", ");
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    format!("; the state of keys {list} was dropped with it")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> HashSet<Bytes> {
        names
            .iter()
            .map(|n| Bytes::copy_from_slice(n.as_bytes()))
            .collect()
    }

    #[test]
    fn a_retirement_names_up_to_eight_keys_sorted_and_counts_the_rest() {
        assert_eq!(dropped_keys(&keys(&[])), "");
        assert_eq!(
            dropped_keys(&keys(&["b", "a"])),
            "; the state of keys 'a', 'b' was dropped with it"
        );
        let eight: Vec<String> = (1..=8).map(|i| format!("k{i}")).collect();
        let eight: Vec<&str> = eight.iter().map(String::as_str).collect();
        assert_eq!(
            dropped_keys(&keys(&eight)),
            "; the state of keys 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8' was dropped with it"
        );
        let nine: Vec<String> = (1..=9).map(|i| format!("k{i}")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_eq!(
            dropped_keys(&keys(&nine)),
            "; the state of keys 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8' and 1 more was \
             dropped with it"
        );
    }
}
