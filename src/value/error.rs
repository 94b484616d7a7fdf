//! Why a value could not become a [`Message`](super::Message), or why bytes could not be decoded
//! into one.

use std::fmt;

/// The shared ending of every refusal, so a user can grep for one phrase.
const CANT_CROSS: &str = "can't cross a worker or event boundary";

/// A Luau value that cannot become a [`Message`](super::Message), and where it was.
///
/// `path` starts with the root name the caller gave (`message`, `args`, …) and names the first
/// value that was refused, the way Luau code would reach it.
///
/// ```
/// use mlua::Lua;
/// use skein::Message;
///
/// let lua = Lua::new();
/// let value = lua.load("{ items = { 1, 2, { callback = print } } }").eval().unwrap();
/// let err = Message::from_lua(&value, "message").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "message.items[3].callback: a function can't cross a worker or event boundary"
/// );
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TransferError {
    /// Where the refused value sits, starting from the root name.
    pub path: String,
    /// What was wrong with it.
    pub reason: TransferErrorKind,
}

/// What made a value refuse to cross.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TransferErrorKind {
    /// A Luau function.
    Function,
    /// A Luau thread (coroutine).
    Coroutine,
    /// A full userdata that is not a [`ResourceHandle`](super::ResourceHandle).
    UserData,
    /// A light userdata (a bare pointer).
    LightUserData,
    /// Any other kind of value, named by its Luau type.
    Unsupported {
        /// The Luau type name.
        type_name: &'static str,
    },
    /// A table with a metatable: its behaviour lives in functions, which can't cross.
    Metatable,
    /// A table that appears inside itself.
    Cycle,
    /// Tables nested deeper than [`Limits::MAX_DEPTH`](super::Limits::MAX_DEPTH).
    TooDeep {
        /// The bound that was passed.
        max_depth: usize,
    },
    /// A table key of a type that can't be a map key (only integers, numbers and strings can).
    KeyType {
        /// The Luau type name of the key.
        type_name: &'static str,
    },
    /// A NaN number used as a key.
    NanKey,
    /// The VM could not grow its stack to read the value: it is out of memory, or its stack
    /// is already near its limit of slots for one call. Nothing was read; the same read can
    /// succeed once the VM has room again.
    NoStack,
    /// The running weight passed the byte budget the caller gave.
    TooLarge {
        /// The budget, in bytes of [`Message::queue_weight`](super::Message::queue_weight).
        limit: usize,
    },
}

impl fmt::Display for TransferErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Function => write!(f, "a function {CANT_CROSS}"),
            Self::Coroutine => write!(f, "a coroutine {CANT_CROSS}"),
            Self::UserData => write!(f, "a userdata {CANT_CROSS}"),
            Self::LightUserData => write!(f, "a light userdata {CANT_CROSS}"),
            Self::Unsupported { type_name } => {
                write!(f, "{} {type_name} {CANT_CROSS}", super::article(type_name))
            }
            Self::Metatable => write!(f, "a table with a metatable {CANT_CROSS}"),
            Self::Cycle => write!(f, "a table that contains itself {CANT_CROSS}"),
            Self::TooDeep { max_depth } => {
                write!(
                    f,
                    "a table nested deeper than {max_depth} tables {CANT_CROSS}"
                )
            }
            Self::KeyType { type_name } => {
                write!(
                    f,
                    "{} {type_name} key {CANT_CROSS}",
                    super::article(type_name)
                )
            }
            Self::NanKey => write!(f, "a NaN key {CANT_CROSS}"),
            Self::NoStack => write!(
                f,
                "a value can't be read while its VM can't grow its stack (out of memory, or \
                 near the stack's limit)"
            ),
            Self::TooLarge { limit } => {
                write!(
                    f,
                    "a value weighing more than its limit of {limit} bytes {CANT_CROSS}"
                )
            }
        }
    }
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl std::error::Error for TransferError {}

/// Bytes that are not a well-formed, canonical encoded [`Message`](super::Message).
///
/// ```
/// use skein::Message;
///
/// let err = Message::decode(&[1, 200], 1024).unwrap_err();
/// assert_eq!(err.offset, 1);
/// assert_eq!(err.to_string(), "unknown value tag 200 at byte 1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The byte offset where the problem was found.
    pub offset: usize,
    /// What was wrong.
    pub kind: DecodeErrorKind,
}

/// What was wrong with encoded bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input ended in the middle of a value, or a length or count claims more than is left.
    Truncated,
    /// The first byte is not a codec version this build reads.
    UnknownVersion(u8),
    /// A value tag this codec does not know.
    UnknownTag(u8),
    /// A map key tag that is not integer, number or string.
    UnknownKeyTag(u8),
    /// A varint longer than ten bytes or above `u64::MAX`.
    VarintOverflow,
    /// A varint with needless trailing zero groups.
    NonMinimalVarint,
    /// Decoding would pass the byte budget.
    OverLimit {
        /// The budget, in bytes of [`Message::queue_weight`](super::Message::queue_weight).
        limit: usize,
    },
    /// Tables nested deeper than [`Limits::MAX_DEPTH`](super::Limits::MAX_DEPTH).
    TooDeep,
    /// Bytes left over after the value.
    TrailingBytes,
    /// A NaN map key.
    NanKey,
    /// The same map key twice.
    DuplicateKey,
    /// A second encoding of a value that has a canonical one (an empty list, which is written as
    /// the empty map).
    NonCanonical(&'static str),
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => write!(f, "input ends in the middle of a value"),
            Self::UnknownVersion(v) => write!(f, "unknown codec version {v}"),
            Self::UnknownTag(t) => write!(f, "unknown value tag {t}"),
            Self::UnknownKeyTag(t) => write!(f, "unknown map key tag {t}"),
            Self::VarintOverflow => write!(f, "varint overflows 64 bits"),
            Self::NonMinimalVarint => write!(f, "varint is not minimally encoded"),
            Self::OverLimit { limit } => write!(f, "message passes its limit of {limit} bytes"),
            Self::TooDeep => write!(
                f,
                "tables nested deeper than {} tables",
                super::Limits::MAX_DEPTH
            ),
            Self::TrailingBytes => write!(f, "trailing bytes after the message"),
            Self::NanKey => write!(f, "NaN map key"),
            Self::DuplicateKey => write!(f, "duplicate map key"),
            Self::NonCanonical(what) => write!(f, "non-canonical form: {what}"),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.kind, self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// A [`Message`](super::Message) that is not the Rust value asked of it, or a Rust value that
/// can't become a `Message`: what [`FromMessage`](super::FromMessage),
/// [`IntoMessage`](super::IntoMessage), the `TryFrom` impls and the `serde` conversions answer.
///
/// The path names the value the way Luau code reaches it, from a root: `args` for a host
/// function's or service's arguments (`args[2]` is the second argument), `value` otherwise.
///
/// ```
/// use skein::{FromMessage, Message};
///
/// let args = vec![Message::from(7), Message::from("north")];
/// let err = <(i64, [f32; 3])>::from_args(args).unwrap_err();
/// assert_eq!(err.to_string(), "args[2]: expected a vector, got a string");
/// let err = u8::try_from(Message::from(300)).unwrap_err();
/// assert_eq!(err.to_string(), "value: expected an integer from 0 to 255, got the number 300");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ConvertError {
    /// Where the value sits, innermost first, so each level adds its segment as it unwinds.
    pub(crate) segments: Vec<super::path::Segment>,
    pub(crate) root: &'static str,
    kind: ConvertErrorKind,
}

/// Why a conversion to or from a [`Message`](super::Message) failed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConvertErrorKind {
    /// The value is of another type, or outside the range of the Rust type, or a number that the
    /// Rust type can't hold exactly (`2.5` as an `i64`).
    Mismatch {
        /// What was asked for: `an integer`, `a vector`, `an integer from 0 to 255`…
        expected: std::borrow::Cow<'static, str>,
        /// What was there: `a string`, `nil`, `2.5`…
        found: String,
    },
    /// Building the `Message` would pass its bound: a weight past the limit (in bytes of
    /// [`Message::queue_weight`](super::Message::queue_weight)), as every copy is refused.
    TooLarge {
        /// The bound that was passed.
        limit: usize,
    },
    /// Building the `Message` would nest tables deeper than
    /// [`Limits::MAX_DEPTH`](super::Limits::MAX_DEPTH).
    TooDeep {
        /// The bound that was passed.
        max_depth: usize,
    },
    /// A message from a `Serialize` or `Deserialize` implementation.
    Custom(String),
}

impl ConvertError {
    /// An error of `kind` at the root.
    #[cold]
    pub(crate) fn new(kind: ConvertErrorKind) -> Self {
        ConvertError {
            segments: Vec::new(),
            root: "value",
            kind,
        }
    }

    /// A mismatch: `expected` was asked for, `found` describes what was there.
    #[cold]
    pub(crate) fn mismatch(
        expected: impl Into<std::borrow::Cow<'static, str>>,
        found: &super::Message,
    ) -> Self {
        Self::new(ConvertErrorKind::Mismatch {
            expected: expected.into(),
            found: found.describe(),
        })
    }

    /// The same error one level further out: `segment` leads to where it was.
    #[cold]
    pub(crate) fn at(mut self, segment: super::path::Segment) -> Self {
        self.segments.push(segment);
        self
    }

    /// The same error, its path starting at `args` (a function's or service's arguments).
    pub(crate) fn in_args(mut self) -> Self {
        self.root = "args";
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ConvertErrorKind {
        &self.kind
    }

    /// Where: `value`, `args[2]`, `value.pos[1]`…
    pub fn path(&self) -> String {
        super::path::render(self.root, &self.segments)
    }
}

impl fmt::Display for ConvertErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mismatch { expected, found } => write!(f, "expected {expected}, got {found}"),
            Self::TooLarge { limit } => {
                write!(f, "a value weighing more than its limit of {limit} bytes")
            }
            Self::TooDeep { max_depth } => {
                write!(f, "a table nested deeper than {max_depth} tables")
            }
            Self::Custom(text) => f.write_str(text),
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path(), self.kind)
    }
}

impl std::error::Error for ConvertError {}
