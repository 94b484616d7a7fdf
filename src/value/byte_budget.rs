//! Byte budgets: what the host holds on a script's behalf, counted against a ceiling.
//!
//! A [`ByteBudget`] is a plain counter with a ceiling, shared behind an `Arc` by everything that
//! draws on it: a shared store's tables and queues, or a domain's jobs (their arguments and
//! results). A script that spreads its data over many names or many jobs meets the same bound as
//! one that piles it into one. A [`Charge`] is one holder's part of a budget, given back when the
//! holder is dropped, so no path that ends a holder can forget to release it.

// The counter is the loom-modelled kind (the shared store's queues use it inside the models);
// the handles that carry a charge across threads are plain `std` ones, as the pool's items are.
use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering};

/// Bytes held against a ceiling; a reservation past it is refused and takes nothing.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    held: AtomicUsize,
    max: usize,
}

impl ByteBudget {
    pub(crate) fn new(max: usize) -> ByteBudget {
        ByteBudget {
            held: AtomicUsize::new(0),
            max,
        }
    }

    /// The ceiling.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Takes `n` bytes, or answers what would have been held and takes nothing.
    pub(crate) fn reserve(&self, n: usize) -> Result<(), usize> {
        let max = self.max;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= max)
            })
            .map(|_| ())
            .map_err(|held| held.saturating_add(n))
    }

    /// Takes `n` bytes whatever the ceiling: for a value that was held before and comes back
    /// (a queue's give-back), which must not be lost.
    pub(crate) fn force(&self, n: usize) {
        self.held.fetch_add(n, Ordering::AcqRel);
    }

    /// Gives `n` bytes back.
    pub(crate) fn release(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// One holder's part of a [`ByteBudget`], given back when dropped. It may grow after it was
/// taken (a job's result joins its arguments), from any thread.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<ByteBudget>,
    bytes: AtomicUsize,
}

impl Charge {
    /// Takes `n` bytes of `budget`, or answers what would have been held and takes nothing.
    pub(crate) fn take(budget: &Arc<ByteBudget>, n: usize) -> Result<Charge, usize> {
        budget.reserve(n)?;
        Ok(Charge {
            budget: budget.clone(),
            bytes: AtomicUsize::new(n),
        })
    }

    /// Takes `n` more bytes, or answers what would have been held and takes nothing.
    pub(crate) fn grow(&self, n: usize) -> Result<(), usize> {
        self.budget.reserve(n)?;
        self.bytes.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }

    /// The budget it draws on.
    pub(crate) fn budget(&self) -> &ByteBudget {
        &self.budget
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
        self.budget.release(self.bytes.load(Ordering::Acquire));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_exact_at_its_ceiling_and_a_charge_gives_back_all_it_took() {
        let budget = Arc::new(ByteBudget::new(100));
        let charge = Charge::take(&budget, 60).unwrap();
        assert_eq!(Charge::take(&budget, 41).unwrap_err(), 101);
        assert_eq!(budget.held(), 60, "a refusal takes nothing");
        charge.grow(40).unwrap();
        assert_eq!(charge.grow(1).unwrap_err(), 101);
        assert_eq!(budget.held(), 100);
        drop(charge);
        assert_eq!(budget.held(), 0);
        let _again = Charge::take(&budget, 100).unwrap();
    }
}
