//! Engine service names, as every thread sees them: the principal's append-only list of names
//! and kinds ([`ServiceNames`]), and the rule a name follows.
//!
//! The host registers services on its engine thread (`ScriptDomain::register_query` and
//! `register_command`); the functions themselves never leave that thread. What every other
//! thread needs is only the list of names and kinds, kept here. A worker VM installs a stub for
//! each name it has not installed yet when it starts an item (`service_stubs.rs`; the list only
//! grows, so its length is its version).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::principal::capability::{require_capability, CapabilityId};

/// The longest service name, in bytes.
pub(crate) const MAX_SERVICE_NAME: usize = 256;

/// What a service does, as the worker side needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ServiceKind {
    /// Answers a value; forwarded from a worker.
    Query,
    /// Changes host state and answers nothing; recorded on a worker and applied later.
    Command {
        /// The capability a caller must hold, checked where the call is made (a worker's at
        /// the call it records), so the caller's own call is refused.
        requires: Option<CapabilityId>,
    },
}

/// The text every caller of engine service `name` sees when the call fails: `engine service
/// 'world.set' failed: <why>`, the same on the engine thread, on a worker and in an actor.
pub(crate) fn service_failed(name: &str, why: impl fmt::Display) -> String {
    format!("engine service '{name}' failed: {why}")
}

/// Checks that the task calling service `name` holds the capability it `requires`, if any, as
/// [`require_capability`] checks: against the authority installed on this thread. A denial is
/// counted and reported once, here, and its text is the call's failure.
pub(crate) fn check_requirement(name: &str, requires: Option<&CapabilityId>) -> Result<(), String> {
    match requires {
        Some(capability) => {
            require_capability(capability.as_str()).map_err(|e| service_failed(name, e))
        }
        None => Ok(()),
    }
}

/// The names and kinds of a principal's engine services: `Send + Sync`, append-only.
#[derive(Default)]
pub(crate) struct ServiceNames {
    names: RwLock<Vec<(Arc<str>, ServiceKind)>>,
    /// The list's length, read without the lock on every item start.
    len: AtomicUsize,
}

impl ServiceNames {
    /// Adds a name; refused when it is taken.
    pub(crate) fn add(&self, name: &str, kind: ServiceKind) -> Result<(), String> {
        let mut names = self.names.write().unwrap_or_else(|e| e.into_inner());
        if names.iter().any(|(n, _)| &**n == name) {
            return Err(format!(
                "register: engine service '{name}' is registered already"
            ));
        }
        names.push((Arc::from(name), kind));
        self.len.store(names.len(), Ordering::Release);
        Ok(())
    }

    /// How many names there are: a VM that installed this many has every stub.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// The names from position `from` on.
    pub(crate) fn since(&self, from: usize) -> Vec<(Arc<str>, ServiceKind)> {
        let names = self.names.read().unwrap_or_else(|e| e.into_inner());
        names.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }
}

/// Luau's reserved words: a path segment that is one can't be written `a.end`.
const RESERVED: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in", "local",
    "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
];

/// Checks a service name: 1 to 256 bytes of dotted Luau identifiers (`world.get`).
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("register: engine service name '{name}' {why}"));
    if name.is_empty() || name.len() > MAX_SERVICE_NAME {
        return bad(&format!(
            "must be 1 to {MAX_SERVICE_NAME} bytes, got {}",
            name.len()
        ));
    }
    for segment in name.split('.') {
        let mut bytes = segment.bytes();
        let identifier = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !identifier || RESERVED.contains(&segment) {
            return bad(&format!(
                "is not a dotted Luau path: '{segment}' is not an identifier"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dotted_identifiers_of_1_to_256_bytes() {
        assert!(check_name("world.get").is_ok());
        assert!(check_name("log").is_ok());
        assert!(check_name(&"a".repeat(256)).is_ok());
        let e = check_name(&"a".repeat(257)).unwrap_err();
        assert!(e.contains("must be 1 to 256 bytes, got 257"), "{e}");
        assert!(check_name("").unwrap_err().contains("got 0"));
        for bad in [
            "world.",
            ".get",
            "world..get",
            "1world",
            "world.end",
            "wo-rld",
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains("is not a dotted Luau path"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_name_is_registered_once_and_the_list_only_grows() {
        let names = ServiceNames::default();
        let command = ServiceKind::Command { requires: None };
        names.add("world.get", ServiceKind::Query).unwrap();
        names.add("world.set", command.clone()).unwrap();
        let e = names.add("world.get", command.clone()).unwrap_err();
        assert_eq!(
            e,
            "register: engine service 'world.get' is registered already"
        );
        assert_eq!(names.len(), 2);
        let since: Vec<_> = names
            .since(1)
            .into_iter()
            .map(|(n, k)| (n.to_string(), k))
            .collect();
        assert_eq!(since, vec![("world.set".to_owned(), command)]);
        assert!(names.since(5).is_empty());
    }
}
