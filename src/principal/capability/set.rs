//! `CapabilitySet`: an ordered set of capability names, and the delegation math over it.

use std::collections::BTreeSet;
use std::fmt;

use super::id::CapabilityId;

/// An ordered set of capabilities. Delegation only shrinks it.
///
/// ```
/// use skein::capability::{CapabilityId, CapabilitySet};
/// let id = |s| CapabilityId::new(s).unwrap();
/// let held = CapabilitySet::from_iter([id("filesystem.read"), id("worker.spawn")]);
/// let child = held.delegate(&CapabilitySet::from_iter([id("worker.spawn")]))?;
/// assert!(child.is_subset(&held));
/// let err = held
///     .delegate(&CapabilitySet::from_iter([id("net.connect"), id("audio.play")]))
///     .unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "the holder cannot delegate capabilities it does not hold: audio.play, net.connect"
/// );
/// # Ok::<(), skein::capability::OverDelegation>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapabilitySet(BTreeSet<CapabilityId>);

impl CapabilitySet {
    /// The empty set: what a domain holds unless the host grants more (deny by default).
    pub fn new() -> CapabilitySet {
        CapabilitySet::default()
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: &CapabilityId) -> bool {
        self.0.contains(id)
    }

    /// Whether a capability named `name` is in the set (no allocation).
    pub(crate) fn contains_name(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// Whether every capability of `self` is in `other`.
    pub fn is_subset(&self, other: &CapabilitySet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// The capabilities, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &CapabilityId> {
        self.0.iter()
    }

    /// How many capabilities the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn insert(&mut self, id: CapabilityId) {
        self.0.insert(id);
    }

    /// Hands on `wanted`, which must be a subset of what `self` holds.
    ///
    /// # Errors
    /// [`OverDelegation`] naming every wanted capability `self` does not hold, sorted.
    pub fn delegate(&self, wanted: &CapabilitySet) -> Result<CapabilitySet, OverDelegation> {
        self.delegate_as("the holder", wanted)
    }

    /// [`delegate`](Self::delegate), naming the delegator in the error (`domain 'editor'`).
    ///
    /// # Errors
    /// As [`delegate`](Self::delegate).
    pub fn delegate_as(
        &self,
        who: &str,
        wanted: &CapabilitySet,
    ) -> Result<CapabilitySet, OverDelegation> {
        let missing: Vec<CapabilityId> = wanted.0.difference(&self.0).cloned().collect();
        if missing.is_empty() {
            Ok(wanted.clone())
        } else {
            Err(OverDelegation {
                who: who.to_owned(),
                missing,
            })
        }
    }
}

impl FromIterator<CapabilityId> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = CapabilityId>>(iter: I) -> Self {
        CapabilitySet(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a CapabilitySet {
    type Item = &'a CapabilityId;
    type IntoIter = std::collections::btree_set::Iter<'a, CapabilityId>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A delegation asked for more than the delegator holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverDelegation {
    /// Who tried to delegate.
    pub who: String,
    /// What it does not hold, sorted.
    pub missing: Vec<CapabilityId>,
}

impl fmt::Display for OverDelegation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cannot delegate capabilities it does not hold: ",
            self.who
        )?;
        for (i, id) in self.missing.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(id.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for OverDelegation {}
