//! Who the pool runs work for: a domain ([`DomainId`]) in one of its generations
//! ([`Generation`]), together a [`Principal`].

use std::fmt;

/// A script domain's stable identity within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainId(pub(crate) u64);

impl DomainId {
    /// The number behind the id.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for DomainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "domain#{}", self.0)
    }
}

/// How many times a domain has restarted. Work of an older generation is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Generation(pub(crate) u64);

impl Generation {
    /// The number behind the generation.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// What the pool runs work as: one generation of one domain.
///
/// Every pool item carries its principal. A worker thread keeps one VM per principal that has used
/// it; when the principal ends (its domain stops or restarts) those VMs are dropped and its
/// queued items are refused unrun.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    /// The domain.
    pub domain: DomainId,
    /// Its generation.
    pub generation: Generation,
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (generation {})", self.domain, self.generation.0)
    }
}
