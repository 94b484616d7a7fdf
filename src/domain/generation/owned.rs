//! What a domain owns on behalf of its code ([`OwnedResources`], part of the domain's
//! `Lifecycle`): native resources a host service made for it
//! ([`ScriptDomain::own`](crate::ScriptDomain::own), [`ResourceOwner`]).
//!
//! Its invariants: each resource is released once, on
//! [`release_resource`](crate::ScriptDomain::release_resource), at the end of the generation
//! whose code was running when it was taken, or at stop, newest first; a release that panics
//! is contained and answered as text; once closed (the domain stopped) what is taken is
//! released at once. Nothing a domain owns waits for process exit.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

use crate::principal::Generation;
use crate::vm::panic_message;

/// Names one resource a domain owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(u64);

impl ResourceId {
    /// The number behind the id.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resource#{}", self.0)
    }
}

struct Owned {
    id: ResourceId,
    kind: String,
    generation: Generation,
    release: Box<dyn FnOnce()>,
}

/// A domain's owned resources, in the order they were taken.
pub(crate) struct OwnedResources {
    list: RefCell<Vec<Owned>>,
    next: Cell<u64>,
    /// The generation whose code runs now: what is taken is its own. During a reload that is
    /// the candidate, so what its load takes ends with it if it is discarded.
    running: Cell<Generation>,
    /// The domain has stopped: nothing it takes would ever be released, so it is released at
    /// once.
    closed: Cell<bool>,
}

impl OwnedResources {
    pub(crate) fn new(running: Generation) -> Rc<OwnedResources> {
        Rc::new(OwnedResources {
            list: RefCell::default(),
            next: Cell::new(0),
            running: Cell::new(running),
            closed: Cell::new(false),
        })
    }

    /// The code of `generation` runs from now on.
    pub(crate) fn set_running(&self, generation: Generation) {
        self.running.set(generation);
    }

    /// Takes `release` for the generation running now; a closed owner releases it at once.
    pub(crate) fn own(&self, kind: String, release: Box<dyn FnOnce()>) -> ResourceId {
        let id = ResourceId(self.next.get() + 1);
        self.next.set(id.0);
        if self.closed.get() {
            release();
            return id;
        }
        self.list.borrow_mut().push(Owned {
            id,
            kind,
            generation: self.running.get(),
            release,
        });
        id
    }

    /// Releases, newest first, every resource `which` selects; a release that panics is
    /// contained and answered as text.
    fn release_where(&self, which: impl Fn(&Owned) -> bool) -> Vec<String> {
        let taken: Vec<Owned> = {
            let mut list = self.list.borrow_mut();
            let (gone, kept): (Vec<Owned>, Vec<Owned>) = list.drain(..).partition(|o| which(o));
            *list = kept;
            gone
        };
        let mut failures = Vec::new();
        for owned in taken.into_iter().rev() {
            let (id, kind) = (owned.id, owned.kind);
            if let Err(panic) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(owned.release))
            {
                failures.push(format!(
                    "releasing {id} ({kind}) panicked: {}",
                    panic_message(&panic)
                ));
            }
        }
        failures
    }

    /// Releases what `generation` owns. Every earlier generation released its own when it
    /// ended, and a later one (a reload's candidate) keeps its own.
    pub(crate) fn end_generation(&self, generation: Generation) -> Vec<String> {
        self.release_where(|o| o.generation == generation)
    }

    /// Releases everything, and releases at once whatever is taken later.
    pub(crate) fn close(&self) -> Vec<String> {
        self.closed.set(true);
        self.release_where(|_| true)
    }

    /// Releases resource `id` now, answering the failures of its release; `None` when it is
    /// not owned (never was, or it was released already).
    pub(crate) fn release(&self, id: ResourceId) -> Option<Vec<String>> {
        let owned = self.list.borrow().iter().any(|o| o.id == id);
        owned.then(|| self.release_where(|o| o.id == id))
    }

    /// What is owned now, oldest first: each id with its kind.
    pub(crate) fn listed(&self) -> Vec<(ResourceId, String)> {
        let list = self.list.borrow();
        list.iter().map(|o| (o.id, o.kind.clone())).collect()
    }

    /// How many resources are owned now.
    pub(crate) fn count(&self) -> usize {
        self.list.borrow().len()
    }

    /// A handle that takes resources into this owner (see [`ResourceOwner`]).
    pub(crate) fn owner(self: &Rc<Self>) -> ResourceOwner {
        ResourceOwner(self.clone())
    }
}

/// A handle that takes resources for a domain on behalf of its running code, for the host
/// services that make native things for scripts: a service closure can't hold the domain, but
/// it can hold this. What it takes belongs to the generation whose code is running when it is
/// taken (during a [`reload`](crate::ScriptDomain::reload), the candidate's), and is released as
/// [`ScriptDomain::own`](crate::ScriptDomain::own) describes.
///
/// It stays on the engine thread, as the domain does.
///
/// ```
/// use std::{cell::RefCell, rc::Rc};
/// use skein::{DomainSpec, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
/// let owner = domain.resource_owner();
/// let closed = Rc::new(RefCell::new(0));
/// let count = closed.clone();
/// domain.register_command("gpu.texture", move |()| {
///     let count = count.clone();
///     owner.own("texture", move || *count.borrow_mut() += 1);
///     Ok(())
/// })?;
/// domain.eval("gpu.texture()")?;
/// assert_eq!(domain.owned_resources().len(), 1);
/// domain.stop();
/// assert_eq!(*closed.borrow(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ResourceOwner(Rc<OwnedResources>);

impl ResourceOwner {
    /// Takes `release` for the running generation, as
    /// [`ScriptDomain::own`](crate::ScriptDomain::own) does. Once the domain has stopped,
    /// `release` runs at once.
    pub fn own(&self, kind: impl Into<String>, release: impl FnOnce() + 'static) -> ResourceId {
        self.0.own(kind.into(), Box::new(release))
    }
}

impl fmt::Debug for ResourceOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceOwner").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_generation_end_releases_its_own_newest_first_and_keeps_later_ones() {
        let owned = OwnedResources::new(Generation(1));
        let log = Rc::new(RefCell::new(Vec::new()));
        for (n, generation) in [(1, 1), (2, 1), (3, 2)] {
            let log = log.clone();
            owned.list.borrow_mut().push(Owned {
                id: ResourceId(n),
                kind: "k".into(),
                generation: Generation(generation),
                release: Box::new(move || log.borrow_mut().push(n)),
            });
        }
        assert!(owned.end_generation(Generation(1)).is_empty());
        assert_eq!(*log.borrow(), [2, 1]);
        assert_eq!(owned.list.borrow().len(), 1);
        // A generation's end leaves a later generation's (a reload's candidate) alone.
        assert!(owned.end_generation(Generation(1)).is_empty());
        assert_eq!(owned.list.borrow().len(), 1);
        owned.list.borrow_mut().push(Owned {
            id: ResourceId(4),
            kind: "bad".into(),
            generation: Generation(2),
            release: Box::new(|| panic!("boom")),
        });
        let failures = owned.end_generation(Generation(2));
        assert_eq!(failures, ["releasing resource#4 (bad) panicked: boom"]);
        assert_eq!(*log.borrow(), [2, 1, 3]);
        assert!(owned.list.borrow().is_empty());
        // Once closed, what is taken is released at once.
        assert!(owned.close().is_empty());
        let late = log.clone();
        owned.own("late".into(), Box::new(move || late.borrow_mut().push(5)));
        assert_eq!(*log.borrow(), [2, 1, 3, 5]);
        assert!(owned.list.borrow().is_empty());
    }
}
