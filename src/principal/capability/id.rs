//! `CapabilityId`: one dotted lowercase capability name.

use std::fmt;
use std::sync::Arc;

/// The longest capability name, in bytes.
pub(crate) const MAX_CAPABILITY_LEN: usize = 128;

/// A capability's name: dotted lowercase segments, each `[a-z][a-z0-9_]*`, 1 to 128 bytes in
/// all (`filesystem.read`, `worker.spawn`).
///
/// ```
/// use skein::capability::CapabilityId;
/// assert_eq!(CapabilityId::new("filesystem.read")?.as_str(), "filesystem.read");
/// let bad = CapabilityId::new("FileSystem.Read").unwrap_err();
/// assert_eq!(
///     bad.to_string(),
///     "invalid capability name 'FileSystem.Read': each dotted segment must be a lowercase \
///      letter followed by lowercase letters, digits or '_'"
/// );
/// # Ok::<(), skein::capability::InvalidCapability>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CapabilityId(Arc<str>);

impl CapabilityId {
    /// The longest capability name, in bytes: 128.
    pub const MAX_LEN: usize = MAX_CAPABILITY_LEN;

    /// Checks and makes a capability name.
    ///
    /// # Errors
    /// [`InvalidCapability`] naming the refused text, when it is empty, longer than 128 bytes,
    /// or has a segment that is not `[a-z][a-z0-9_]*`.
    pub fn new(name: &str) -> Result<CapabilityId, InvalidCapability> {
        validate(name)?;
        Ok(CapabilityId(Arc::from(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks a capability name without allocating.
pub(crate) fn validate(name: &str) -> Result<(), InvalidCapability> {
    let refuse = |reason: &'static str| InvalidCapability {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(refuse("a name is 1 to 128 bytes"));
    }
    if name.len() > MAX_CAPABILITY_LEN {
        return Err(refuse("a name is 1 to 128 bytes"));
    }
    for segment in name.split('.') {
        let mut bytes = segment.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
        let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !(first_ok && rest_ok) {
            return Err(refuse(
                "each dotted segment must be a lowercase letter followed by lowercase \
                     letters, digits or '_'",
            ));
        }
    }
    Ok(())
}

impl std::borrow::Borrow<str> for CapabilityId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CapabilityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CapabilityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CapabilityId({:?})", &*self.0)
    }
}

impl std::str::FromStr for CapabilityId {
    type Err = InvalidCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CapabilityId::new(s)
    }
}

/// A capability name was refused; it names the text and the rule it broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidCapability {
    /// The refused text.
    pub name: String,
    reason: &'static str,
}

impl fmt::Display for InvalidCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid capability name '{}': {}",
            self.name, self.reason
        )
    }
}

impl std::error::Error for InvalidCapability {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_and_past_the_bounds() {
        assert!(CapabilityId::new("a").is_ok());
        assert!(CapabilityId::new("worker.spawn_2").is_ok());
        let at = format!("a{}", "b".repeat(MAX_CAPABILITY_LEN - 1));
        assert!(CapabilityId::new(&at).is_ok());
        let past = format!("{at}b");
        assert_eq!(
            CapabilityId::new(&past).unwrap_err().to_string(),
            format!("invalid capability name '{past}': a name is 1 to 128 bytes")
        );
        for bad in ["", "a..b", ".a", "a.", "1a", "a.B", "a-b", "a b", "_a"] {
            let err = CapabilityId::new(bad).unwrap_err();
            assert_eq!(err.name, bad);
        }
    }
}
