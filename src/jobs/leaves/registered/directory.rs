//! The ids, names and declared order of one generation's registered jobs, shared by the engine
//! thread and the worker VMs of the generation.
//!
//! A job registered from a worker VM reaches the engine's registry only when the engine next
//! drains its mailbox, yet its id, its name's uniqueness and whether its order closes a cycle
//! must be settled at the call, as they are on the engine: both sides reserve here, under one
//! lock, before anything is posted. The engine reads each phase's order from here too
//! (`order.rs` computes it; it is kept until the phase's jobs change).
//!
//! # References
//!
//! The directory also counts the references `JobHandle`s hold on each job, so a handle in any VM
//! drops one under the same lock that frees the job: the registration's handle holds one from
//! [`reserve`](JobDirectory::reserve), each handle `jobs.find` answers one more
//! ([`add_reference`](JobDirectory::add_reference)). A cancel drops its handle's reference
//! ([`drop_reference`](JobDirectory::drop_reference)); a collected `jobs.find` handle gives its
//! reference back ([`give_back`](JobDirectory::give_back)). The drop that takes the last
//! reference frees the job here at once (its name, its place in the order) and leaves its
//! registry entry to the thread that holds it: the cancel's caller unregisters it there and
//! then, while a collected handle, whose destructor can't reach a registry that may be borrowed,
//! queues the id for the engine's next access ([`take_collected`](JobDirectory::take_collected)).
//! A count, not a list, so a script that finds a job every frame holds only as many references
//! as it holds live handles.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::order::{self, Declared, Node, PhaseOrder, Strictness, MAX_PHASE_JOBS};
use crate::ledger::Charge;

/// Ids (from 1), live names and declared order of a generation's registered jobs. `Send +
/// Sync`; lives in the principal, so a restart starts a fresh one.
#[derive(Debug)]
pub(crate) struct JobDirectory {
    inner: Mutex<DirectoryContents>,
    /// Set after an id is queued in `DirectoryContents::collected`, so the engine's frequent
    /// check for them takes no lock while there are none.
    collected_any: AtomicBool,
}

/// What the directory holds under its lock.
#[derive(Debug)]
struct DirectoryContents {
    next_id: u64,
    /// Live names and the job holding each.
    names: HashMap<String, u64>,
    /// Live jobs by id (so in registration order).
    jobs: BTreeMap<u64, Entry>,
    /// Each phase's order, as last resolved; dropped when a job of the phase comes or goes.
    orders: HashMap<Arc<str>, Arc<PhaseOrder>>,
    /// How many live jobs each phase holds.
    held: HashMap<Arc<str>, usize>,
    /// Jobs freed when a collected handle gave back their last reference, whose registry entry
    /// the engine has yet to drop. At most one entry per job: a job is freed once.
    collected: Vec<u64>,
}

#[derive(Debug)]
struct Entry {
    name: Option<String>,
    phase: Arc<str>,
    declared: Arc<Declared>,
    /// The references handles hold on the job; the job is freed when the last one is dropped.
    references: u64,
    /// What the job holds of the domain's host memory, given back when it is released.
    _held: Charge,
}

/// What dropping a handle's reference to a job did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// The job was not registered: there was nothing to drop.
    NotRegistered,
    /// Other handles hold the job: it stays registered.
    StillHeld,
    /// It was the last reference: the job is freed here, and the caller unregisters it.
    Last,
}

impl Default for JobDirectory {
    fn default() -> Self {
        JobDirectory {
            inner: Mutex::new(DirectoryContents {
                next_id: 1,
                names: HashMap::new(),
                jobs: BTreeMap::new(),
                orders: HashMap::new(),
                held: HashMap::new(),
                collected: Vec::new(),
            }),
            collected_any: AtomicBool::new(false),
        }
    }
}

impl DirectoryContents {
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

    /// Frees job `id`: its name, so a new job may take it, and its place in its phase's order.
    /// Answers whether it was here.
    fn forget(&mut self, id: u64) -> bool {
        let Some(entry) = self.jobs.remove(&id) else {
            return false;
        };
        if let Some(name) = &entry.name {
            if self.names.get(name) == Some(&id) {
                self.names.remove(name);
            }
        }
        self.orders.remove(&entry.phase);
        if let Some(held) = self.held.get_mut(&entry.phase) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(&entry.phase);
            }
        }
        true
    }

    /// Drops one reference to job `id`; the last one frees it.
    fn drop_reference(&mut self, id: u64) -> Dropped {
        let Some(entry) = self.jobs.get_mut(&id) else {
            return Dropped::NotRegistered;
        };
        entry.references = entry.references.saturating_sub(1);
        if entry.references > 0 {
            return Dropped::StillHeld;
        }
        self.forget(id);
        Dropped::Last
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
    /// charge on the domain's host memory) is kept until the job is released. The job starts
    /// with one reference, its registration's handle's. Refused, taking
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
        let mut inner = self.lock();
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
                references: 1,
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

    /// Frees job `id` whatever references remain: its registration failed after the reserve,
    /// or the job was unregistered.
    pub(crate) fn release(&self, id: u64) {
        self.lock().forget(id);
    }

    /// The live job named `name`, whether or not it has reached the engine's registry.
    pub(crate) fn named(&self, name: &str) -> Option<u64> {
        self.lock().names.get(name).copied()
    }

    /// Whether job `id` is registered (not freed).
    #[cfg(test)]
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.lock().jobs.contains_key(&id)
    }

    /// Adds a reference to job `id`, for a handle `jobs.find` answers. Answers false, adding
    /// nothing, when the job is not registered.
    pub(crate) fn add_reference(&self, id: u64) -> bool {
        match self.lock().jobs.get_mut(&id) {
            Some(entry) => {
                // A reference is a live handle, so the count is bounded by what the VMs can hold;
                // saturating keeps even an impossible overflow from wrapping to a free.
                entry.references = entry.references.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// Drops one reference to job `id`, for a handle's cancel. The last one frees the job here;
    /// the caller then unregisters it from the registry that runs it.
    pub(crate) fn drop_reference(&self, id: u64) -> Dropped {
        self.lock().drop_reference(id)
    }

    /// Gives back the reference of a collected `jobs.find` handle. The last one frees the job
    /// here and queues it for the engine ([`take_collected`](Self::take_collected)), which drops
    /// its registry entry at its next access. Runs no Lua: it is called from a handle's
    /// destructor, during a collection.
    pub(crate) fn give_back(&self, id: u64) {
        let mut inner = self.lock();
        if inner.drop_reference(id) == Dropped::Last {
            inner.collected.push(id);
            self.collected_any.store(true, Ordering::Release);
        }
    }

    /// The jobs freed by a collected handle since the last call, for the engine to drop from its
    /// registry. Takes no lock when there are none.
    pub(crate) fn take_collected(&self) -> Vec<u64> {
        // A plain load first: this runs before every job's turn, and there is rarely anything.
        // Cleared before the drain: an id queued after it sets the flag again, so the next call
        // takes it.
        if !self.collected_any.load(Ordering::Acquire)
            || !self.collected_any.swap(false, Ordering::Acquire)
        {
            return Vec::new();
        }
        std::mem::take(&mut self.lock().collected)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DirectoryContents> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The order of `phase`'s live jobs (reserved ones included, whether or not they reached
    /// the engine yet).
    pub(crate) fn order(&self, phase: &Arc<str>) -> Arc<PhaseOrder> {
        let mut inner = self.lock();
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
        // Another job's release does not free the name; its own does.
        dir.release(2);
        assert!(reserve(Some("a")).is_err());
        dir.release(1);
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
        // The refused call took neither the id nor the name, and left the order unchanged.
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
        dir.release(1);
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn the_last_dropped_reference_frees_the_job_and_only_the_last() {
        let dir = JobDirectory::default();
        let phase: Arc<str> = Arc::from("main");
        let none = Arc::new(Declared::default());
        let id = dir.reserve(Some("a"), &phase, &none, nothing()).unwrap();
        // The registration's reference and two found ones.
        assert!(dir.add_reference(id) && dir.add_reference(id));
        assert_eq!(dir.drop_reference(id), Dropped::StillHeld);
        assert_eq!(dir.drop_reference(id), Dropped::StillHeld);
        assert_eq!(dir.named("a"), Some(id));
        assert_eq!(dir.drop_reference(id), Dropped::Last);
        // Freed: its name is free, no reference can be added or dropped, nothing was queued.
        assert!(!dir.holds(id) && dir.named("a").is_none());
        assert!(!dir.add_reference(id));
        assert_eq!(dir.drop_reference(id), Dropped::NotRegistered);
        assert!(dir.take_collected().is_empty());
    }

    #[test]
    fn a_collected_handle_queues_the_job_it_frees_once() {
        let dir = JobDirectory::default();
        let phase: Arc<str> = Arc::from("main");
        let none = Arc::new(Declared::default());
        let id = dir.reserve(Some("a"), &phase, &none, nothing()).unwrap();
        // A script finding the job every frame and dropping the handle: the count comes back.
        for _ in 0..1000 {
            assert!(dir.add_reference(id));
            dir.give_back(id);
        }
        assert!(dir.holds(id) && dir.take_collected().is_empty());
        // The registration's reference is cancelled while a found one is live; collecting that
        // one frees the job and queues it, once.
        assert!(dir.add_reference(id));
        assert_eq!(dir.drop_reference(id), Dropped::StillHeld);
        dir.give_back(id);
        assert!(!dir.holds(id));
        dir.give_back(id);
        assert_eq!(dir.take_collected(), vec![id]);
        assert!(dir.take_collected().is_empty());
    }
}
