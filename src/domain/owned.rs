//! What a domain owns on behalf of its code: native resources a host service made for it
//! (`ScriptDomain::own`), released on `release(id)`, at the end of the generation that made
//! them, or at stop, newest first. Nothing a domain owns waits for process exit.

use std::cell::{Cell, RefCell};
use std::fmt;

use super::ScriptDomain;
use crate::jobs::Generation;

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
#[derive(Default)]
pub(crate) struct OwnedResources {
    list: RefCell<Vec<Owned>>,
    next: Cell<u64>,
}

impl OwnedResources {
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
                    crate::vm::panic_message(&panic)
                ));
            }
        }
        failures
    }

    /// Releases what the generations up to and including `generation` own.
    pub(super) fn end_generation(&self, generation: Generation) -> Vec<String> {
        self.release_where(|o| o.generation <= generation)
    }
}

impl ScriptDomain {
    /// Takes ownership of a native resource a host service made for this domain's code:
    /// `release` runs once, when [`release`](Self::release) names it, or at the end of the
    /// current generation (a restart or a stop), newest first. `kind` is for
    /// [`owned_resources`](Self::owned_resources) and reports.
    ///
    /// ```
    /// use std::{cell::RefCell, rc::Rc};
    /// use skein::{DomainSpec, Pool, ScriptDomain};
    ///
    /// let pool = Pool::new(1);
    /// let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?;
    /// let log = Rc::new(RefCell::new(Vec::new()));
    /// for name in ["socket", "texture"] {
    ///     let log = log.clone();
    ///     domain.own(name, move || log.borrow_mut().push(name));
    /// }
    /// assert_eq!(domain.owned_resources().len(), 2);
    /// domain.stop();
    /// assert_eq!(*log.borrow(), ["texture", "socket"]); // newest first
    /// assert!(domain.owned_resources().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn own(&self, kind: impl Into<String>, release: impl FnOnce() + 'static) -> ResourceId {
        let owned = &self.owned;
        let id = ResourceId(owned.next.get() + 1);
        owned.next.set(id.0);
        owned.list.borrow_mut().push(Owned {
            id,
            kind: kind.into(),
            generation: self.generation(),
            release: Box::new(release),
        });
        id
    }

    /// Releases resource `id` now. Answers false when the domain does not own it (never did,
    /// or it was released already).
    pub fn release_resource(&self, id: ResourceId) -> bool {
        let owned = self.owned.list.borrow().iter().any(|o| o.id == id);
        if owned {
            for failure in self.owned.release_where(|o| o.id == id) {
                self.report_release_failure(failure);
            }
        }
        owned
    }

    /// What the domain owns now, oldest first: each id with its kind. Empty after a stop.
    pub fn owned_resources(&self) -> Vec<(ResourceId, String)> {
        let list = self.owned.list.borrow();
        list.iter().map(|o| (o.id, o.kind.clone())).collect()
    }

    pub(super) fn report_release_failure(&self, message: String) {
        self.reports.borrow_mut().push(super::Report {
            source: "owned resources".to_owned(),
            message,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_generation_end_releases_its_own_newest_first_and_keeps_later_ones() {
        let owned = OwnedResources::default();
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
    }
}
