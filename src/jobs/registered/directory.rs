//! The ids, names and declared order of one generation's registered jobs, shared by the engine
//! thread and the worker VMs of the generation.
//!
//! A job registered from a worker VM reaches the engine's registry only when the engine next
//! drains its mailbox, yet its id, its name's uniqueness and whether its order closes a cycle
//! must be settled at the call, as they are on the engine: both sides reserve here, under one
//! lock, before anything is posted. The engine reads each phase's order from here too
//! (`order.rs` computes it; it is kept until the phase's jobs change).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::order::{self, Declared, Node, PhaseOrder, Strictness, MAX_PHASE_JOBS};
use crate::ledger::Charge;

/// Ids (from 1), live names and declared order of a generation's registered jobs. `Send +
/// Sync`; lives in the principal, so a restart starts a fresh one.
#[derive(Debug)]
pub(crate) struct JobDirectory {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    next_id: u64,
    /// Live names and the job holding each.
    names: HashMap<String, u64>,
    /// Live jobs by id (so in registration order).
    jobs: BTreeMap<u64, Entry>,
    /// Each phase's order, as last resolved; dropped when a job of the phase comes or goes.
    orders: HashMap<Arc<str>, Arc<PhaseOrder>>,
    /// How many live jobs each phase holds.
    held: HashMap<Arc<str>, usize>,
}

#[derive(Debug)]
struct Entry {
    name: Option<String>,
    phase: Arc<str>,
    declared: Arc<Declared>,
    /// What the job holds of the domain's host memory, given back when it is released.
    _held: Charge,
}

impl Default for JobDirectory {
    fn default() -> Self {
        JobDirectory {
            inner: Mutex::new(Inner {
                next_id: 1,
                names: HashMap::new(),
                jobs: BTreeMap::new(),
                orders: HashMap::new(),
                held: HashMap::new(),
            }),
        }
    }
}

impl Inner {
    /// The phase's jobs as the order sees them, with `extra` (a job registering) added.
    fn resolve(
        &self,
        phase: &str,
        extra: Option<(u64, Option<&str>, &Declared)>,
        strictness: Strictness,
    ) -> Result<PhaseOrder, order::Cycle> {
        let mut nodes: Vec<Node<'_>> = self
            .jobs
            .iter()
            .filter(|(_, e)| &*e.phase == phase)
            .map(|(id, e)| Node {
                id: *id,
                name: e.name.as_deref(),
                declared: &e.declared,
            })
            .collect();
        if let Some((id, name, declared)) = extra {
            nodes.push(Node { id, name, declared });
        }
        order::resolve(&nodes, strictness, extra.map(|(id, _, _)| id))
    }

    /// How reports and refusals name job `id`: its name, or `#<id>`.
    fn label(&self, id: u64, registering: (u64, Option<&str>)) -> String {
        let name = if id == registering.0 {
            registering.1
        } else {
            self.jobs.get(&id).and_then(|e| e.name.as_deref())
        };
        match name {
            Some(name) => name.to_owned(),
            None => format!("#{id}"),
        }
    }
}

impl JobDirectory {
    /// Takes the next id for a job of `phase`, and `name` for it when given; `charge` (the job's
    /// charge on the domain's host memory) is kept until the job is released. Refused, taking
    /// nothing, when a live job holds the name or when the job's declared order would close a
    /// cycle among the phase's jobs (the refusal names the cycle, each job running before the
    /// next).
    pub(crate) fn reserve(
        &self,
        name: Option<&str>,
        phase: &Arc<str>,
        declared: &Arc<Declared>,
        charge: Charge,
    ) -> Result<u64, String> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = name {
            if inner.names.contains_key(name) {
                return Err(format!(
                    "jobs.register: a job named '{name}' is registered already"
                ));
            }
        }
        let held = inner.held.get(phase).copied().unwrap_or(0);
        if held >= MAX_PHASE_JOBS {
            return Err(format!(
                "jobs.register: phase '{phase}' holds {held} jobs, the most one phase may hold; \
                 cancel one or register in another phase"
            ));
        }
        let id = inner.next_id;
        // An anonymous job that declares nothing has no edge, so it can close no cycle: its
        // phase is resolved at its next frame instead of at every such call.
        let edgeless = name.is_none() && **declared == Declared::default();
        let resolved = if edgeless {
            Ok(None)
        } else {
            inner
                .resolve(phase, Some((id, name, declared)), Strictness::Strict)
                .map(Some)
        };
        let resolved = match resolved {
            Ok(resolved) => resolved,
            Err(cycle) => {
                let names: Vec<String> = cycle
                    .0
                    .iter()
                    .map(|&at| inner.label(at, (id, name)))
                    .collect();
                return Err(format!(
                    "jobs.register: the order would have a cycle: {} (each runs before the \
                     next); job '{}' is not registered",
                    names.join(" -> "),
                    inner.label(id, (id, name))
                ));
            }
        };
        inner.next_id += 1;
        if let Some(name) = name {
            inner.names.insert(name.to_owned(), id);
        }
        inner.jobs.insert(
            id,
            Entry {
                name: name.map(str::to_owned),
                phase: phase.clone(),
                declared: declared.clone(),
                _held: charge,
            },
        );
        *inner.held.entry(phase.clone()).or_default() += 1;
        match resolved {
            Some(resolved) => inner.orders.insert(phase.clone(), Arc::new(resolved)),
            None => inner.orders.remove(phase),
        };
        Ok(id)
    }

    /// Frees job `id` (it was cancelled): its name, so a new job may take it, and its place in
    /// its phase's order.
    pub(crate) fn release(&self, id: u64, name: Option<&str>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = name {
            if inner.names.get(name) == Some(&id) {
                inner.names.remove(name);
            }
        }
        if let Some(entry) = inner.jobs.remove(&id) {
            inner.orders.remove(&entry.phase);
            if let Some(held) = inner.held.get_mut(&entry.phase) {
                *held -= 1;
                if *held == 0 {
                    inner.held.remove(&entry.phase);
                }
            }
        }
    }

    /// The order of `phase`'s live jobs (reserved ones included, whether or not they reached
    /// the engine yet).
    pub(crate) fn order(&self, phase: &Arc<str>) -> Arc<PhaseOrder> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(order) = inner.orders.get(phase) {
            return order.clone();
        }
        // Each job fitted when it registered; only a cancellation since can leave a write→read
        // edge that closes a cycle, and leniently that edge is left out.
        let order = Arc::new(
            inner
                .resolve(phase, None, Strictness::Lenient)
                .unwrap_or_default(),
        );
        inner.orders.insert(phase.clone(), order.clone());
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ledger::Ledger;

    /// A charge of `n` bytes on `ledger`.
    fn held(ledger: &Arc<Ledger>, n: usize) -> Charge {
        Charge::take(ledger, n).unwrap()
    }

    /// A charge of nothing, for tests of names and order.
    fn nothing() -> Charge {
        held(&Arc::new(Ledger::new(0)), 0)
    }

    #[test]
    fn a_name_is_held_until_its_job_releases_it() {
        let dir = JobDirectory::default();
        let phase: Arc<str> = Arc::from("main");
        let none = Arc::new(Declared::default());
        let reserve = |name: Option<&str>| dir.reserve(name, &phase, &none, nothing());
        assert_eq!(reserve(Some("a")), Ok(1));
        assert_eq!(reserve(None), Ok(2));
        assert_eq!(
            reserve(Some("a")),
            Err("jobs.register: a job named 'a' is registered already".to_owned())
        );
        // Another job's id does not free the name; its own does.
        dir.release(2, Some("a"));
        assert!(reserve(Some("a")).is_err());
        dir.release(1, Some("a"));
        assert_eq!(reserve(Some("a")), Ok(3));
    }

    #[test]
    fn a_refused_cycle_takes_nothing_and_names_the_jobs_in_run_order() {
        let dir = JobDirectory::default();
        let phase: Arc<str> = Arc::from("main");
        let after = |names: &[&str]| {
            Arc::new(Declared {
                after: names.iter().map(|n| n.to_string()).collect(),
                ..Declared::default()
            })
        };
        assert_eq!(
            dir.reserve(Some("a"), &phase, &after(&["b"]), nothing()),
            Ok(1)
        );
        assert_eq!(
            dir.reserve(Some("b"), &phase, &after(&["a"]), nothing()),
            Err(
                "jobs.register: the order would have a cycle: b -> a -> b (each runs before \
                 the next); job 'b' is not registered"
                    .to_owned()
            )
        );
        // The id and the name were not taken; the order is as before.
        assert_eq!(
            dir.reserve(Some("b"), &phase, &after(&[]), nothing()),
            Ok(2)
        );
        let order: Vec<u64> = dir.order(&phase).placed.iter().map(|p| p.id).collect();
        assert_eq!(order, [2, 1]);
        // Another phase is apart: the same names order nothing there.
        let other: Arc<str> = Arc::from("other");
        assert_eq!(
            dir.reserve(None, &other, &after(&["a", "b"]), nothing()),
            Ok(3)
        );
    }

    #[test]
    fn a_job_holds_its_charge_until_it_is_released_and_a_refusal_gives_it_back() {
        let dir = JobDirectory::default();
        let memory = Arc::new(Ledger::new(1000));
        let phase: Arc<str> = Arc::from("main");
        let none = Arc::new(Declared::default());
        assert_eq!(
            dir.reserve(Some("a"), &phase, &none, held(&memory, 300)),
            Ok(1)
        );
        assert_eq!(memory.held(), 300);
        // Refused for its name: the charge it brought is given back at once.
        assert!(dir
            .reserve(Some("a"), &phase, &none, held(&memory, 300))
            .is_err());
        assert_eq!(memory.held(), 300);
        dir.release(1, Some("a"));
        assert_eq!(memory.held(), 0);
    }
}
