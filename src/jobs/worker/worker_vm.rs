//! One VM a worker keeps for one principal ([`WorkerVm`]): how it is built, and what the worker
//! keeps beside it (the jobs running in it, the keys seen, the entries items named, its warm
//! pass).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use mlua::RegistryKey;
// Fx, not SipHash: these maps are read and written on every item (the entry's key, the
// running job's pointer), where SipHash cost about 400 instructions an item.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::warm_pass::{ParkedItem, PassContext, WarmPass};
use crate::jobs::luau::api::install;
use crate::jobs::luau::home::{HomeKind, JobsHome};
use crate::jobs::luau::service_stubs::install_stubs;
use crate::jobs::protocol::item::Item;
use crate::jobs::protocol::job::JobShared;
use crate::jobs::protocol::messages::DomainEvent;
use crate::jobs::protocol::pool_shared::PoolShared;
use crate::jobs::protocol::principal_shared::PrincipalShared;
use crate::vm::{
    close_globals, error_message, panic_message, report_to, source_epoch, with_open_globals, Owner,
    OwnerIdentity, Reporter, Spare, TaskFailure, Vm,
};

/// One `(module, entry)` pair an item named, kept per VM so an item finds its entry without
/// requiring the module or converting through mlua: the module's table and the entry's name,
/// both in the VM's registry. The worker reads `table[name]` raw on each item, so a module that
/// replaces its entry function is seen at the next item; an edit of the module's source moves
/// the source epoch, which empties the cache, and the next item requires the module anew.
pub(super) struct CachedEntry {
    pub(super) table: RegistryKey,
    pub(super) name: RegistryKey,
    /// The item's `Arc`s the entry was found for, held so their addresses (its key in
    /// [`EntryCache`]) can't be reused by other names while it is kept.
    _names: (Arc<Path>, Arc<str>),
}

/// The entries of one VM: by the addresses of an item's module path and entry name (the
/// dispatching VM interns both, so every item of one call site hits there), then by the names
/// themselves (items whose `Arc`s are their own: the host's, another VM's).
#[derive(Default)]
pub(super) struct EntryCache {
    by_address: HashMap<(usize, usize), Rc<CachedEntry>>,
    /// By the module path's bytes, then the entry name.
    by_name: HashMap<Box<[u8]>, EntriesOf>,
    len: usize,
}

/// The kept entries of one module, by name.
type EntriesOf = HashMap<Box<str>, Rc<CachedEntry>>;

/// How many `(module, entry)` pairs a worker VM keeps; one more empties the cache first.
const ENTRIES: usize = 256;

impl EntryCache {
    /// The entry of `(module, entry)`, if kept.
    #[inline]
    pub(super) fn get(&self, module: &Arc<Path>, entry: &Arc<str>) -> Option<&Rc<CachedEntry>> {
        if let Some(found) = self.by_address.get(&address_key(module, entry)) {
            return Some(found);
        }
        self.by_name
            .get(module.as_os_str().as_encoded_bytes())?
            .get(&**entry)
    }

    /// Keeps the entry of `(module, entry)`.
    pub(super) fn insert(
        &mut self,
        module: &Arc<Path>,
        entry: &Arc<str>,
        table: RegistryKey,
        name: RegistryKey,
    ) -> Rc<CachedEntry> {
        if self.len >= ENTRIES {
            self.clear();
        }
        let cached = Rc::new(CachedEntry {
            table,
            name,
            _names: (module.clone(), entry.clone()),
        });
        self.by_address
            .insert(address_key(module, entry), cached.clone());
        self.by_name
            .entry(module.as_os_str().as_encoded_bytes().into())
            .or_default()
            .insert((**entry).into(), cached.clone());
        self.len += 1;
        cached
    }

    /// Forgets every entry (an edit may have changed any module).
    pub(super) fn clear(&mut self) {
        self.by_address.clear();
        self.by_name.clear();
        self.len = 0;
    }
}

/// The first-level key of an item's `(module, entry)`: the addresses of its two `Arc`s.
fn address_key(module: &Arc<Path>, entry: &Arc<str>) -> (usize, usize) {
    (
        Arc::as_ptr(module).cast::<u8>() as usize,
        Arc::as_ptr(entry).cast::<u8>() as usize,
    )
}

/// Serials of worker VMs, process-wide.
static NEXT_VM_SERIAL: AtomicU64 = AtomicU64::new(1);

/// One VM a worker keeps for one principal.
pub(super) struct WorkerVm {
    pub(super) principal: Arc<PrincipalShared>,
    /// Unique in the process: replies to this VM's promises carry it.
    pub(super) serial: u64,
    pub(super) vm: Vm,
    /// The jobs running in this VM, so a cancel can end their parked tasks.
    pub(super) running: Rc<RefCell<HashMap<*const JobShared, Rc<Owner>>>>,
    /// The source epoch this VM's module cache last checked.
    pub(super) sources_seen: u64,
    /// The entries items named (see [`CachedEntry`]): emptied when the source epoch moves.
    pub(super) entries: EntryCache,
    /// The C function that builds an item's arguments under protection, made on first use
    /// (`vm::coroutine::protected_pusher`).
    pub(super) pusher: Option<RegistryKey>,
    /// Keys that ran an item in this VM since they bound here: `jobs.context().fresh` is true
    /// for a key not in it.
    pub(super) keys_seen: HashSet<Bytes>,
    /// The `jobs.warm` entries this VM runs before its principal's items, and the items that
    /// wait for them.
    pub(super) warm: WarmPass,
    /// How many of the principal's engine-service names have their stubs in this VM.
    pub(super) services_installed: usize,
    /// The engine-event log's next sequence number when an item last delivered events here
    /// (`u64::MAX` before the first): an item skips the delivery while the log stays there.
    pub(super) events_seen: u64,
    /// The owner of a job that ended in its first run and that nothing else held: the next
    /// job's owner is made in its allocation ([`Owner::release`]).
    pub(super) spare_owner: Option<Rc<Owner>>,
    /// What a spare owner is named while it waits (it owns no task).
    pub(super) idle_identity: Arc<dyn OwnerIdentity>,
}

impl WorkerVm {
    /// Installs the stubs of engine services registered since this VM last looked.
    pub(super) fn sync_services(&mut self) {
        if self.principal.services.len() != self.services_installed {
            self.services_installed = with_open_globals(&self.vm.lua, || {
                install_stubs(
                    &self.vm.lua,
                    &self.principal.services,
                    self.services_installed,
                )
            });
        }
    }

    /// Moves the VM's warm pass on; answers the items it held back once the pass is over.
    pub(super) fn drive_warm(&mut self, pool: &PoolShared, worker: usize) -> VecDeque<ParkedItem> {
        if !self.warm.is_warming() {
            return VecDeque::new();
        }
        let cx = PassContext {
            vm: &self.vm,
            principal: &self.principal,
            pool,
            worker,
        };
        if self.warm.advance(&cx) {
            self.warm.take_parked()
        } else {
            VecDeque::new()
        }
    }
}

impl WorkerVm {
    /// Builds worker `worker`'s VM for `principal` through the principal's plan, with the
    /// `jobs` bindings homed on this worker (items it dispatches go to `outbox`) and the stubs
    /// of the principal's engine services. A panic in the plan is answered as a refusal. Its
    /// warm pass starts with every active warm entry of the principal.
    pub(super) fn build(
        principal: &Arc<PrincipalShared>,
        pool: Arc<PoolShared>,
        worker: usize,
        outbox: &Rc<RefCell<Vec<Item>>>,
        spare: Option<Spare>,
    ) -> Result<WorkerVm, String> {
        let mailbox = principal.mailbox.clone();
        let reporter: Reporter = Box::new(move |label: &str, failure: &TaskFailure| {
            mailbox.send(DomainEvent::Report {
                label: label.to_owned(),
                failure: failure.to_string(),
            });
        });
        let serial = NEXT_VM_SERIAL.fetch_add(1, Ordering::Relaxed);
        let native = pool.native.get(worker).cloned();
        let home = JobsHome::new(
            principal.clone(),
            pool,
            HomeKind::Worker {
                index: worker,
                vm: serial,
                outbox: outbox.clone(),
            },
        );
        let plan = &principal.plan;
        let built = catch_unwind(AssertUnwindSafe(|| {
            Vm::build_on(spare, plan, reporter, principal.max_deadline, |lua| {
                install(lua, home)
            })
        }));
        let vm = match built {
            Ok(Ok(vm)) => {
                if let Some(tally) = &native {
                    report_to(&vm.lua, tally);
                }
                vm.set_authority(principal.authority.clone());
                // Every run here stops once the principal ends (`PrincipalShared::end`).
                vm.set_halt(principal.halt_token());
                close_globals(&vm.lua);
                vm
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "could not build a worker VM: {}",
                    error_message(&e)
                ))
            }
            Err(panic) => {
                return Err(format!(
                    "could not build a worker VM: the plan panicked: {}",
                    panic_message(&panic)
                ))
            }
        };
        let mut wvm = WorkerVm {
            principal: principal.clone(),
            serial,
            vm,
            running: Rc::new(RefCell::new(HashMap::default())),
            sources_seen: source_epoch(),
            entries: EntryCache::default(),
            pusher: None,
            keys_seen: HashSet::default(),
            warm: WarmPass::default(),
            services_installed: 0,
            events_seen: u64::MAX,
            spare_owner: None,
            idle_identity: Arc::new("a finished job"),
        };
        wvm.sync_services();
        for entry in principal.warms.active() {
            wvm.warm.enqueue(entry);
        }
        Ok(wvm)
    }

    /// Takes the jobs running in this VM out of its table, to be ended.
    pub(super) fn take_running(&self) -> Vec<Rc<Owner>> {
        self.running.borrow_mut().drain().map(|(_, o)| o).collect()
    }
}
