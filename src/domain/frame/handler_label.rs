//! How reports and task owners name a handler call: `context 'game' update handler`,
//! `context 'ui' event 'hit' handler`, `event 'hit' handler`.
//!
//! A label is made once, when its handler is bound (phase handlers: once per context and
//! phase), and shared by every call of that handler as the owner identity of the call's task.
//! Its text is written only when something reads it, a failure after a yield or a report, so
//! a handler call that returns costs a reference count for its name instead of a `format!`
//! and two allocations.

use std::fmt;
use std::sync::Arc;

use crate::principal::Phase;
use crate::vm::OwnerIdentity;

/// The name of one handler, written out on demand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HandlerLabel {
    /// A context's handler for a phase.
    Phase { context: Arc<str>, phase: Phase },
    /// A handler of a named event, bound in a context or in none.
    Event {
        context: Option<Arc<str>>,
        name: Arc<str>,
    },
}

impl fmt::Display for HandlerLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerLabel::Phase { context, phase } => {
                write!(f, "context '{context}' {phase} handler")
            }
            HandlerLabel::Event {
                context: Some(context),
                name,
            } => write!(f, "context '{context}' event '{name}' handler"),
            HandlerLabel::Event {
                context: None,
                name,
            } => write!(f, "event '{name}' handler"),
        }
    }
}

impl OwnerIdentity for HandlerLabel {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_reports_name_handlers() {
        let phase = HandlerLabel::Phase {
            context: Arc::from("game"),
            phase: Phase::Update,
        };
        assert_eq!(phase.to_string(), "context 'game' update handler");
        let in_context = HandlerLabel::Event {
            context: Some(Arc::from("ui")),
            name: Arc::from("hit"),
        };
        assert_eq!(in_context.to_string(), "context 'ui' event 'hit' handler");
        let bare = HandlerLabel::Event {
            context: None,
            name: Arc::from("hit"),
        };
        assert_eq!(bare.to_string(), "event 'hit' handler");
    }
}
