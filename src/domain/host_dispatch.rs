//! Work the host hands to the pool for the domain: [`ScriptDomain::dispatch`] and its options,
//! key release, and the domain's shared store as the host sees it. Host promises are tracked by
//! the current generation, which rejects them when it ends.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::domain::ScriptDomain;
use crate::error::{DispatchRefusal, Error, Result};
use crate::jobs::{self, Item, ItemArgs, JobOptions, JobShared, Promise, ReplyTo};
use crate::shared::SharedStore;
use crate::value::Message;
use crate::vm;

/// How many `(module, entry)` pairs a generation keeps resolved for host dispatch.
const HOST_TARGETS_KEPT: usize = 8;

/// A `(module, entry)` pair the host dispatched to, resolved: what an item names.
struct HostTarget {
    /// The module as the host wrote it, shared with the items' job names.
    spec: Arc<str>,
    path: Arc<Path>,
    entry: Arc<str>,
}

/// The pairs the host dispatched to lately, so issuing many items to one entry resolves the
/// module and allocates the entry's name once, not once per item. Trusted while the source
/// epoch is the one they were resolved in, as the engine VM's own resolutions are.
#[derive(Default)]
pub(crate) struct HostTargets {
    epoch: u64,
    /// Most recently added last; at most [`HOST_TARGETS_KEPT`].
    kept: Vec<HostTarget>,
}

impl HostTargets {
    fn find(&mut self, module: &str, entry: &str) -> Option<&HostTarget> {
        let epoch = vm::source_epoch();
        if self.epoch != epoch {
            self.epoch = epoch;
            self.kept.clear();
        }
        self.kept
            .iter()
            .rev()
            .find(|t| &*t.spec == module && &*t.entry == entry)
    }

    fn keep(&mut self, target: HostTarget) {
        if self.kept.len() == HOST_TARGETS_KEPT {
            self.kept.remove(0);
        }
        self.kept.push(target);
    }
}

impl ScriptDomain {
    /// Hands `module.entry(args)` to the pool from host code; `module` resolves from the plan's
    /// root directory.
    ///
    /// Edited module sources are picked up when the host next pumps or runs the domain
    /// ([`pump`](Self::pump), [`eval`](Self::eval), [`exec`](Self::exec),
    /// [`run_until_idle`](Self::run_until_idle)); a host dispatch does not look at the file
    /// system, so issuing many in a row costs no system call each.
    ///
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Module`]) when the module can't be resolved.
    pub fn dispatch(&self, module: &str, entry: &str, args: Message) -> Result<Promise<Message>> {
        self.dispatch_with(module, entry, args, &JobOptions::new())
    }

    /// [`dispatch`](Self::dispatch) with options: a name, a key, supersede and a deadline, as
    /// `jobs.dispatch`'s `opts` gives them to Luau.
    ///
    /// With a key the item runs in the worker VM the key is bound to, after every item of the
    /// key dispatched before it (from Luau or from Rust) has settled, so module state one item
    /// leaves is there for the next.
    ///
    /// ```
    /// use skein::job::JobOptions;
    /// use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};
    ///
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(
    ///     dir.path().join("counter.luau"),
    ///     "local n = 0 return { bump = function() n += 1 return n end }",
    /// )?;
    /// let pool = Pool::new(2);
    /// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").plan(Plan::new().root(dir.path())))?;
    /// let bump = || domain.dispatch_with("./counter", "bump", Message::Nil, &JobOptions::new().key("a"));
    /// let (first, second) = (bump()?, bump()?);
    /// // One VM holds the key, so the second item sees the count the first one left.
    /// assert_eq!(first.wait()?, Message::Number(1.0));
    /// assert_eq!(second.wait()?, Message::Number(2.0));
    /// assert!(domain.release("a")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Dispatch`] naming the [`DispatchRefusal`]: when the module can't be resolved,
    /// when an option breaks its rule (a key of 0 or more than 256 bytes, `supersede` without a
    /// key, a deadline of zero or past the domain's cap), or when the key is new and the pool
    /// holds 65,536 keys already. A refused dispatch queues nothing.
    pub fn dispatch_with(
        &self,
        module: &str,
        entry: &str,
        args: Message,
        opts: &JobOptions,
    ) -> Result<Promise<Message>> {
        let opts = opts.check(self.current.principal.max_deadline)?;
        let (spec, path, entry) = self.host_target(module, entry)?;
        let job = JobShared::new(
            opts.name.map(Arc::from),
            spec,
            entry.clone(),
            self.pool.shared().clone(),
            self.current.principal.id,
            opts.key.clone(),
            None,
        );
        let item = Item {
            principal: self.current.principal.clone(),
            authority: self.current.principal.authority.clone(),
            job: job.clone(),
            module: path,
            entry,
            args: ItemArgs::Plain(args),
            deadline: opts.deadline,
            reply: ReplyTo::HostJob(job.clone()),
            queued_at: (opts.key.is_some() || self.current.principal.profile.is_some())
                .then(Instant::now),
            charge: None,
        };
        match opts.key {
            Some(key) => self
                .pool
                .shared()
                .dispatch_keyed(
                    (self.current.principal.id, key),
                    item,
                    opts.supersede,
                    "dispatch: key",
                )
                .map_err(|message| Error::Dispatch {
                    refusal: DispatchRefusal::KeyLimit,
                    message,
                })?,
            None => self.pool.shared().inject(item),
        }
        self.current.host_promises.borrow_mut().track(&job);
        Ok(Promise::of_job(job))
    }

    /// The resolved module and the shared entry name of `module.entry`: kept from an earlier
    /// dispatch to the same pair, or resolved from the plan's root now.
    fn host_target(&self, module: &str, entry: &str) -> Result<(Arc<str>, Arc<Path>, Arc<str>)> {
        let mut targets = self.current.host_targets.borrow_mut();
        if let Some(t) = targets.find(module, entry) {
            return Ok((t.spec.clone(), t.path.clone(), t.entry.clone()));
        }
        let resolved = self
            .current
            .vm
            .core
            .modules
            .resolve(None, module)
            .map_err(|e| Error::Dispatch {
                refusal: DispatchRefusal::Module,
                message: format!("dispatch: {e}"),
            })?;
        let target = HostTarget {
            spec: resolved.spec,
            path: resolved.path,
            entry: Arc::from(entry),
        };
        let found = (
            target.spec.clone(),
            target.path.clone(),
            target.entry.clone(),
        );
        targets.keep(target);
        Ok(found)
    }

    /// Ends the binding of `key` after the items of the key dispatched before this call have
    /// settled, as `jobs.release` does. Answers whether the pool held the key; when it did not,
    /// nothing is done.
    ///
    /// # Errors
    /// [`Error::Dispatch`] ([`DispatchRefusal::Key`]) when the key is not 1 to 256 bytes.
    pub fn release(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        jobs::check_key(key, "release: key")?;
        let key = bytes::Bytes::copy_from_slice(key);
        Ok(self
            .pool
            .shared()
            .release_key((self.current.principal.id, key)))
    }

    /// The domain's shared store: the tables and queues its scripts reach as `jobs.shared`.
    /// The store belongs to this generation of the domain and ends with it.
    pub fn shared(&self) -> SharedStore {
        SharedStore::new(self.current.principal.shared.clone())
    }
}
