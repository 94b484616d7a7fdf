//! The issuing side of one `jobs.dispatch`, behind both of its entrances: the raw C function
//! (`dispatch_raw.rs`), which reads the common call off the Luau stack, and the `mlua` function
//! (`api.rs`), which reads every other call and words its refusals. Each entrance reads the call
//! its own way, `opts` through the one parse in `jobs/leaves/options.rs`; from there the call is
//! one [`Dispatch`], and [`queue`] takes its charges and makes its job, its promise and its item.
//!
//! Nothing here reads Luau values or raises: a refusal is the text the entrance words or hands
//! to the slow path.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use super::home::{HomeKind, JobsHome};
use crate::jobs::leaves::options::DispatchOptions;
use crate::jobs::protocol::item::{Item, ItemArgs};
use crate::jobs::protocol::job::{JobShared, JobTarget, JOB_WEIGHT};
use crate::ledger::{Charge, Held};
use crate::principal::capability::current_or;
use crate::value::Message;
use crate::vm::{Outcome, PromiseCell, VmCore};

/// One dispatch, read and checked: what [`queue`] charges for and makes the job, the promise
/// and the item from.
pub(crate) struct Dispatch {
    opts: DispatchOptions,
    target: Arc<JobTarget>,
    args: Message,
    /// The arguments' weight (`Message::weight`).
    weight: usize,
}

impl Dispatch {
    /// The call as an entrance read it: `opts` through the one parse of dispatch options, the
    /// module resolved and the entry interned in `target`, `args` copied with their `weight`.
    #[inline]
    pub(crate) fn new(
        opts: DispatchOptions,
        target: Arc<JobTarget>,
        args: Message,
        weight: usize,
    ) -> Dispatch {
        Dispatch {
            opts,
            target,
            args,
            weight,
        }
    }
}

/// Takes the call's charges through `charge` (the entrance's own, which words its refusal),
/// then makes the job and its promise and queues the item (into its key's lane, the injector, or
/// this worker's deque), for the raw path and the `mlua` one alike. The job's own weight and its
/// name's are held as long as its promise, the arguments' while the item waits and runs; both
/// are taken before anything is made, so a refused charge leaves nothing. A key lane's refusal
/// takes the promise back out of the pending table unsettled (nobody holds it yet) and answers
/// the refusal's text.
///
/// # Errors
///
/// The first refusal `charge` answers (a charge already taken is given back), or the key
/// lane's.
pub(crate) fn queue(
    home: &JobsHome,
    core: &VmCore,
    call: Dispatch,
    mut charge: impl FnMut(usize) -> Result<Charge, String>,
) -> Result<Rc<PromiseCell>, String> {
    let own = JOB_WEIGHT.saturating_add(call.opts.name.as_ref().map_or(0, String::len));
    let held = charge(own)?;
    let carried = charge(call.weight)?;
    let opts = call.opts;
    let job = JobShared::dispatched(
        opts.name.map(Arc::from),
        call.target,
        home.pool.clone(),
        home.principal.id,
        opts.key.clone(),
        Some(Held::Own(held)),
    );
    let cell = core.promises.borrow_mut().make("jobs.dispatch");
    // The job also answers the promise's key.
    cell.set_canceller(job.clone());
    let item = Item {
        principal: home.principal.clone(),
        authority: current_or(&home.principal.authority),
        job,
        args: ItemArgs::Plain(call.args),
        deadline: opts.deadline,
        reply: home.reply_to(cell.id()),
        queued_at: (opts.key.is_some() || home.principal.profile.is_some()).then(Instant::now),
        charge: Some(Held::Own(carried)),
    };
    match (opts.key, &home.kind) {
        (Some(key), _) => {
            let lane = (home.principal.id, key);
            if let Err(refusal) =
                home.pool
                    .dispatch_keyed(lane, item, opts.supersede, "jobs.dispatch: opts.key")
            {
                core.promises
                    .borrow_mut()
                    .settle(cell.id(), Outcome::Cancelled);
                return Err(refusal);
            }
        }
        (None, HomeKind::Engine | HomeKind::Actor { .. }) => home.pool.inject(item),
        (None, HomeKind::Worker { outbox, .. }) => outbox.borrow_mut().push(item),
    }
    Ok(cell)
}
