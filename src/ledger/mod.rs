//! The ledger: every byte Skein holds on a script's behalf, counted before it is allocated.
//!
//! A [`Ledger`] is a counter with a ceiling and, above it, the ledger it also draws on: a
//! generation's jobs and its shared store draw on their domain's host memory, and every domain
//! draws on its pool's memory budget, which also holds the memory limit of every VM built for
//! the pool's domains. A [`Charge`] is one holder's part, taken from a ledger and every ledger
//! above it at once, and given back to all of them when the holder is dropped, so no path that
//! ends a holder can forget to release it. A charge that some ledger on the way up refuses
//! takes nothing from any of them, so a refusal leaves nothing half-made.
//!
//! What is charged is found by looking for [`Charge`]: names, error texts, reports, log lines,
//! metadata, job arguments and results, queued messages, shared tables and queues.

// The counter is the loom-modelled kind (the shared store's queues use it inside the models);
// the handles that carry a charge across threads are plain `std` ones, as the pool's items are.
use std::fmt;
use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering};

mod machine;
mod size;
mod text;

pub(crate) use machine::default_budget;
pub use size::{format_bytes, parse_size};
pub(crate) use text::bounded_text;
pub use text::MAX_TEXT_BYTES;

/// Bytes held against a ceiling, and against the ledger above it; a reservation past either is
/// refused and takes nothing.
#[derive(Debug)]
pub(crate) struct Ledger {
    held: AtomicUsize,
    max: usize,
    /// How refusals name it ("the host memory of domain 'game'"); empty for a ledger whose
    /// callers word their own refusal.
    name: Box<str>,
    parent: Option<Arc<Ledger>>,
}

/// A reservation refused: which ledger refused, what it would have held and its ceiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    /// What the refusing ledger would have held with the reservation.
    pub(crate) would: usize,
    /// Its ceiling.
    pub(crate) max: usize,
    /// The name of the ledger that refused.
    pub(crate) by: Box<str>,
    /// Whether that is a ledger above the one charged.
    pub(crate) above: bool,
}

impl Refused {
    /// The refusal's text: `own(would)` when the ledger charged refused, else the ledger above
    /// that did ("the pool's memory would hold N bytes, past its budget of M").
    pub(crate) fn text(&self, own: impl FnOnce(usize) -> String) -> String {
        if self.above {
            self.to_string()
        } else {
            own(self.would)
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} would hold {}, past its budget of {}",
            self.by,
            format_bytes(self.would),
            format_bytes(self.max)
        )
    }
}

impl Ledger {
    /// A ledger of its own, with nothing above it.
    #[cfg(any(test, loom))]
    pub(crate) fn new(max: usize) -> Ledger {
        Ledger::under(max, None)
    }

    /// A ledger whose charges are taken from `parent` too.
    pub(crate) fn under(max: usize, parent: Option<Arc<Ledger>>) -> Ledger {
        Ledger::named("", max, parent)
    }

    /// A ledger that refusals name `name`, drawing on `parent` when there is one.
    pub(crate) fn named(
        name: impl Into<Box<str>>,
        max: usize,
        parent: Option<Arc<Ledger>>,
    ) -> Ledger {
        Ledger {
            held: AtomicUsize::new(0),
            max,
            name: name.into(),
            parent,
        }
    }

    /// The ceiling.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Takes `n` bytes here and in every ledger above, or takes nothing and answers which
    /// ledger refused. The ledgers are walked in a loop, the one charged first: a refusal
    /// higher up gives back what the ledgers below it took.
    #[inline]
    pub(crate) fn reserve(&self, n: usize) -> Result<(), Refused> {
        let mut at = self;
        loop {
            if let Err(held) = at.take(n) {
                let refused = Refused {
                    would: held.saturating_add(n),
                    max: at.max,
                    by: at.name.clone(),
                    above: !std::ptr::eq(at, self),
                };
                self.give_back_below(at, n);
                return Err(refused);
            }
            match &at.parent {
                Some(parent) => at = parent,
                None => return Ok(()),
            }
        }
    }

    /// Takes `n` bytes of this ledger alone, or answers what it holds and takes nothing.
    #[inline]
    fn take(&self, n: usize) -> Result<usize, usize> {
        let max = self.max;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= max)
            })
    }

    /// Gives `n` bytes back to this ledger and those above it, up to (not including) `stop`.
    #[cold]
    fn give_back_below(&self, stop: &Ledger, n: usize) {
        let mut at = self;
        while !std::ptr::eq(at, stop) {
            at.held.fetch_sub(n, Ordering::AcqRel);
            match &at.parent {
                Some(parent) => at = parent,
                None => return,
            }
        }
    }

    /// Takes `n` bytes whatever the ceilings: for a value that was held before and comes back
    /// (a queue's give-back), which must not be lost.
    pub(crate) fn force(&self, n: usize) {
        self.held.fetch_add(n, Ordering::AcqRel);
        if let Some(parent) = &self.parent {
            parent.force(n);
        }
    }

    /// Gives `n` bytes back, here and above.
    #[inline]
    pub(crate) fn release(&self, n: usize) {
        let mut at = self;
        loop {
            at.held.fetch_sub(n, Ordering::AcqRel);
            match &at.parent {
                Some(parent) => at = parent,
                None => return,
            }
        }
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// One holder's part of a [`Ledger`], given back when dropped. It may grow after it was taken
/// (a job's result joins its arguments), from any thread.
#[derive(Debug)]
pub(crate) struct Charge {
    ledger: Arc<Ledger>,
    bytes: AtomicUsize,
}

impl Charge {
    /// Takes `n` bytes of `ledger`, or takes nothing and answers which ledger refused.
    pub(crate) fn take(ledger: &Arc<Ledger>, n: usize) -> Result<Charge, Refused> {
        ledger.reserve(n)?;
        Ok(Charge {
            ledger: ledger.clone(),
            bytes: AtomicUsize::new(n),
        })
    }

    /// Takes `n` more bytes, or takes nothing and answers which ledger refused.
    pub(crate) fn grow(&self, n: usize) -> Result<(), Refused> {
        self.ledger.reserve(n)?;
        self.bytes.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }

    /// The ledger it draws on.
    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

/// A charge one holder owns, or shares with others that hold the same thing (the chunks of one
/// `parallelFor` share their arguments): the shared form costs an allocation the owned one saves.
#[derive(Debug)]
pub(crate) enum Held {
    Own(Charge),
    Shared(Arc<Charge>),
}

impl std::ops::Deref for Held {
    type Target = Charge;

    fn deref(&self) -> &Charge {
        match self {
            Held::Own(charge) => charge,
            Held::Shared(charge) => charge,
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.ledger.release(self.bytes.load(Ordering::Acquire));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_is_exact_at_its_ceiling_and_a_charge_gives_back_all_it_took() {
        let ledger = Arc::new(Ledger::new(100));
        let charge = Charge::take(&ledger, 60).unwrap();
        assert_eq!(Charge::take(&ledger, 41).unwrap_err().would, 101);
        assert_eq!(ledger.held(), 60, "a refusal takes nothing");
        charge.grow(40).unwrap();
        assert_eq!(charge.grow(1).unwrap_err().would, 101);
        assert_eq!(ledger.held(), 100);
        drop(charge);
        assert_eq!(ledger.held(), 0);
        let _again = Charge::take(&ledger, 100).unwrap();
    }

    #[test]
    fn a_charge_is_taken_from_every_ledger_above_and_a_refusal_above_takes_nothing() {
        let pool = Arc::new(Ledger::named("the pool's memory", 100, None));
        let domain = Arc::new(Ledger::named(
            "the host memory of domain 'a'",
            80,
            Some(pool.clone()),
        ));
        let jobs = Arc::new(Ledger::under(70, Some(domain.clone())));
        let other = Arc::new(Ledger::under(1000, Some(pool.clone())));

        let held = Charge::take(&jobs, 70).unwrap();
        assert_eq!((jobs.held(), domain.held(), pool.held()), (70, 70, 70));
        // The jobs' own ceiling refuses first, naming no ledger above.
        let own = Charge::take(&jobs, 1).unwrap_err();
        assert_eq!((own.would, own.max, own.above), (71, 70, false));
        assert_eq!(own.text(|would| format!("own {would}")), "own 71");

        // The pool refuses for another of its domains: nothing stays held anywhere.
        let refused = Charge::take(&other, 31).unwrap_err();
        assert_eq!((&*refused.by, refused.above), ("the pool's memory", true));
        assert_eq!(
            refused.text(|_| unreachable!()),
            "the pool's memory would hold 101 bytes, past its budget of 100 bytes"
        );
        assert_eq!((other.held(), pool.held()), (0, 70));

        // At the bound exactly it fits.
        let fits = Charge::take(&other, 30).unwrap();
        assert_eq!(pool.held(), 100);
        drop((held, fits));
        assert_eq!(
            (jobs.held(), domain.held(), pool.held(), other.held()),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn a_refusal_two_ledgers_up_names_the_one_that_refused() {
        let pool = Arc::new(Ledger::named("the pool's memory", 10, None));
        let domain = Arc::new(Ledger::named(
            "the host memory of domain 'a'",
            100,
            Some(pool.clone()),
        ));
        let jobs = Arc::new(Ledger::under(100, Some(domain.clone())));
        let refused = Charge::take(&jobs, 11).unwrap_err();
        assert_eq!((&*refused.by, refused.above), ("the pool's memory", true));
        assert_eq!((jobs.held(), domain.held(), pool.held()), (0, 0, 0));
    }
}
