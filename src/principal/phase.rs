//! [`Phase`]: the names of the scheduler's entries, when a context's handlers may run.
//!
//! Only the vocabulary lives here, below `vm`, so that a [`Diagnostic`](crate::diagnostic::Diagnostic) and a
//! profile event can name the phase they came from; the frame that runs phases is the domain's.

use std::fmt;

/// A scheduler entry: when a context's handlers may run.
///
/// The phases are generic on purpose: a host that wants a lifecycle of its own builds it on
/// [`OnDemand`](Phase::OnDemand) or on events. In Luau each phase is named in camelCase
/// (`fixedUpdate`), which [`name`](Phase::name) and [`from_name`](Phase::from_name) give.
///
/// ```
/// use skein::Phase;
/// assert_eq!(Phase::FixedUpdate.name(), "fixedUpdate");
/// assert_eq!(Phase::from_name("renderPrepare"), Some(Phase::RenderPrepare));
/// assert_eq!(Phase::from_name("render"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// The domain's code is being loaded.
    Load,
    /// The domain starts.
    Startup,
    /// One fixed step of [`advance`](crate::ScriptDomain::advance).
    FixedUpdate,
    /// Once per [`advance`](crate::ScriptDomain::advance), after the fixed steps.
    Update,
    /// Once per [`advance`](crate::ScriptDomain::advance), after `update`.
    LateUpdate,
    /// The host has input for the domain.
    Input,
    /// The host is about to render.
    RenderPrepare,
    /// The host has a message for the domain.
    Message,
    /// A host timer fired.
    Timer,
    /// The host runs event handling.
    Event,
    /// Whenever the host says.
    OnDemand,
    /// The domain is stopping: run by [`stop`](crate::ScriptDomain::stop) and `Drop`.
    Shutdown,
}

impl Phase {
    /// Every phase, in declaration order.
    pub const ALL: [Phase; 12] = [
        Phase::Load,
        Phase::Startup,
        Phase::FixedUpdate,
        Phase::Update,
        Phase::LateUpdate,
        Phase::Input,
        Phase::RenderPrepare,
        Phase::Message,
        Phase::Timer,
        Phase::Event,
        Phase::OnDemand,
        Phase::Shutdown,
    ];

    /// The phase's Luau name: `load`, `fixedUpdate`, `onDemand` ….
    pub fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Startup => "startup",
            Phase::FixedUpdate => "fixedUpdate",
            Phase::Update => "update",
            Phase::LateUpdate => "lateUpdate",
            Phase::Input => "input",
            Phase::RenderPrepare => "renderPrepare",
            Phase::Message => "message",
            Phase::Timer => "timer",
            Phase::Event => "event",
            Phase::OnDemand => "onDemand",
            Phase::Shutdown => "shutdown",
        }
    }

    /// The phase named `name` in Luau, if there is one (names are case-sensitive).
    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
