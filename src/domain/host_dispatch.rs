//! Work the host hands to the pool for the domain, as the current generation's part
//! ([`GenerationState`]) issues it: [`ScriptDomain::dispatch`](crate::ScriptDomain::dispatch)
//! and its options, and key release, each given the pool it goes to.
//!
//! The invariants: an item the host dispatches runs as the generation's principal under its
//! whole grant, and its host promise is tracked by the generation, which rejects it when it
//! ends; a refused dispatch queues and tracks nothing; a kept `(module, entry)` resolution is
//! trusted only in the source epoch it was made in.

use std::sync::Arc;
use std::time::Instant;

use crate::domain::generation::GenerationState;
use crate::error::{DispatchRefusal, Error, Result};
use crate::jobs::{
    self, Item, ItemArgs, JobOptions, JobShared, JobTarget, PoolShared, Promise, ReplyTo,
};
use crate::value::Message;

impl GenerationState {
    /// Hands `module.entry(args)` to `pool` with `opts`, as the generation's principal, and
    /// tracks the host promise it answers.
    pub(crate) fn dispatch(
        &self,
        pool: &Arc<PoolShared>,
        module: &str,
        entry: &str,
        args: Message,
        opts: &JobOptions,
    ) -> Result<Promise<Message>> {
        let opts = opts.check(self.principal.max_deadline)?;
        let target = self.host_target(module, entry)?;
        let job = JobShared::dispatched(
            opts.name.map(Arc::from),
            target,
            pool.clone(),
            self.principal.id,
            opts.key.clone(),
            None,
        );
        let item = Item {
            principal: self.principal.clone(),
            authority: self.principal.authority.clone(),
            job: job.clone(),
            args: ItemArgs::Plain(args),
            deadline: opts.deadline,
            reply: ReplyTo::HostJob(job.clone()),
            queued_at: (opts.key.is_some() || self.principal.profile.is_some()).then(Instant::now),
            charge: None,
        };
        match opts.key {
            Some(key) => pool
                .dispatch_keyed(
                    (self.principal.id, key),
                    item,
                    opts.supersede,
                    "dispatch: key",
                )
                .map_err(|message| Error::Dispatch {
                    refusal: DispatchRefusal::KeyLimit,
                    message,
                })?,
            None => pool.inject(item),
        }
        self.host_promises.borrow_mut().track(&job);
        Ok(Promise::of_job(job))
    }

    /// The resolved module and the shared entry name of `module.entry`: kept from an earlier
    /// dispatch to the same pair, or resolved from the plan's root now.
    fn host_target(&self, module: &str, entry: &str) -> Result<Arc<JobTarget>> {
        let mut targets = self.host_targets.borrow_mut();
        if let Some(target) = targets.find(module, entry) {
            return Ok(target.clone());
        }
        let resolved = self
            .vm
            .core
            .modules
            .resolve(None, module)
            .map_err(|e| Error::Dispatch {
                refusal: DispatchRefusal::Module,
                message: format!("dispatch: {e}"),
            })?;
        let target = JobTarget::new(resolved.spec, resolved.path, Arc::from(entry));
        targets.keep(target.clone());
        Ok(target)
    }

    /// Ends the binding of the generation's `key` in `pool` after the items of the key
    /// dispatched before this call have settled. Answers whether the pool held the key.
    pub(crate) fn release_key(&self, pool: &PoolShared, key: &[u8]) -> Result<bool> {
        jobs::check_key(key, "release: key")?;
        let key = bytes::Bytes::copy_from_slice(key);
        Ok(pool.release_key((self.principal.id, key)))
    }
}
