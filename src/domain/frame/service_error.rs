//! [`ServiceError`]: why an engine service failed, and the errors a service's closure turns into
//! one with `?`. It holds only the text the calling script sees; the service's name and the
//! `failed:` around it are added where the service is called (`engine_services.rs`).

use std::fmt;

use crate::principal::capability::CapabilityError;
use crate::value::ConvertError;

/// Why an engine service failed: what the closure of
/// [`register_query`](crate::ScriptDomain::register_query) or
/// [`register_command`](crate::ScriptDomain::register_command) answers in its `Err`. The calling
/// script sees `engine service '<name>' failed: <text>`.
///
/// `?` makes one from a [`CapabilityError`] (a denied
/// [`require_capability`](crate::capability::require_capability)), a [`ConvertError`] (a
/// [`Message`](crate::Message) read as a Rust type), a `String` or a `&str`, its text unchanged.
///
/// ```
/// use skein::capability::require_capability;
/// use skein::{DomainSpec, Message, Pool, ScriptDomain, ServiceError};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("game"))?; // granted nothing
/// domain.register_query("input.axis", |axis: Message| {
///     require_capability("input.observe")?;           // a CapabilityError
///     let axis: u8 = axis.try_into()?;                 // a ConvertError
///     if axis > 1 {
///         return Err(format!("no axis {axis}").into()); // a String
///     }
///     Ok(0.5)
/// })?;
/// let err = domain.eval("return input.axis(0)").unwrap_err().to_string();
/// assert!(err.contains(&format!(
///     "engine service 'input.axis' failed: capability 'input.observe' denied to domain 'game' ({}, generation 1)",
///     domain.id()
/// )));
/// assert_eq!(ServiceError::from("no axis 2").message(), "no axis 2");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceError {
    message: String,
}

impl ServiceError {
    /// A failure whose text is `message`.
    pub fn new(message: impl Into<String>) -> ServiceError {
        ServiceError {
            message: message.into(),
        }
    }

    /// The text the calling script sees after `engine service '<name>' failed: `.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The text, without a copy.
    pub(crate) fn into_text(self) -> String {
        self.message
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServiceError {}

/// A denial's text: `capability '<name>' denied to <who>`.
impl From<CapabilityError> for ServiceError {
    fn from(e: CapabilityError) -> Self {
        ServiceError::new(e.to_string())
    }
}

/// A conversion's text, naming where the value sits: `value: expected ..., got ...`.
impl From<ConvertError> for ServiceError {
    fn from(e: ConvertError) -> Self {
        ServiceError::new(e.to_string())
    }
}

impl From<String> for ServiceError {
    fn from(message: String) -> Self {
        ServiceError::new(message)
    }
}

impl From<&str> for ServiceError {
    fn from(message: &str) -> Self {
        ServiceError::new(message)
    }
}
