//! Domain events and the mailbox: what other threads and other domains post to the engine
//! thread, and how it is delivered there.
//!
//! `handlers.rs` holds the handlers bound to event names, the routes to other domains and the
//! drain of the event queue; `emit.rs` is `emit` as every VM of a domain reads it; `drain.rs`
//! handles the [`DomainEvent`](crate::jobs::DomainEvent)s of the current generation's mailbox;
//! `mailbox.rs` is the public [`DomainMailbox`](crate::DomainMailbox) they arrive through.

mod drain;
pub(crate) mod emit;
pub(crate) mod handlers;
pub(crate) mod mailbox;
