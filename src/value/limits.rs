//! The bounds every [`Message`](super::Message) obeys, in one place so the Luau reader, the
//! writer and the codec agree on them.

/// Bounds on a transferable value.
///
/// ```
/// use skein::message::Limits;
/// assert_eq!(Limits::MAX_DEPTH, 64);
/// assert_eq!(Limits::NODE_WEIGHT, 16);
/// assert_eq!(Limits::MAX_MESSAGE_BYTES, 64 << 20);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits;

impl Limits {
    /// The deepest nesting of tables that may cross: a table inside 63 others is fine, one more
    /// level is refused. Luau's own C stack and every recursive walk here stay bounded by it.
    pub const MAX_DEPTH: usize = 64;

    /// The fixed weight, in bytes, that each node of a message (a value, or a map key) adds to
    /// [`Message::queue_weight`](super::Message::queue_weight) on top of its string or buffer
    /// bytes. It stands for the bookkeeping a queued node costs, so a list of a million `nil`s
    /// is not free.
    pub const NODE_WEIGHT: usize = 16;

    /// The most one copy may weigh (in bytes of
    /// [`Message::queue_weight`](super::Message::queue_weight)) when the caller sets no smaller
    /// limit: 64 MiB. Every copy a script asks for (dispatch arguments and results, shared
    /// table writes, queue pushes, worker messages, log fields, event payloads) is weighed as it
    /// is read and refused when it passes this, before the host holds more. A value whose
    /// sub-tables or strings are shared is weighed as it expands (each use counts), so a
    /// doubling table of 26 levels is refused after a few million nodes, not expanded to
    /// billions.
    pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

    /// The version byte that starts every encoded message.
    pub const CODEC_VERSION: u8 = 1;
}
