//! What a principal logs: the [`LogRecord`]s `@skein/log` makes in every VM of a domain (engine
//! and workers), and the [`LogSink`] a host sets with [`DomainSpec::logs`](crate::DomainSpec::logs).
//!
//! The runtime attributes a record (domain and generation, from the VM's principal), never the
//! script: a script chooses only the level, the message and the fields. A worker's record goes
//! to the sink from the worker thread, so a sink is `Send + Sync`. A domain without a sink
//! writes each record as one line on stderr. The Luau module that makes records is the domain's
//! (`domain/log_api.rs`); nothing here buffers records.

use std::fmt;
use std::sync::Arc;

use super::diagnostic::Attribution;
use crate::value::Message;

/// Receives the `@skein/log` records of a domain, on the thread whose VM wrote each one.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use skein::log::{LogLevel, LogRecord, LogSink};
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// #[derive(Default)]
/// struct Lines(Mutex<Vec<String>>);
/// impl LogSink for Lines {
///     fn record(&self, r: &LogRecord) {
///         self.0.lock().unwrap().push(format!("{} {}", r.level, r.message));
///     }
/// }
///
/// let lines = Arc::new(Lines::default());
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main").logs(lines.clone()))?;
/// domain.exec(r#"require("@skein/log").warn("low on fuel", { left = 3 })"#)?;
/// assert_eq!(*lines.0.lock().unwrap(), ["warn low on fuel"]);
/// # Ok::<(), skein::Error>(())
/// ```
pub trait LogSink: Send + Sync {
    /// Takes one record. Called on engine and worker threads alike, so it should be quick and
    /// must not call back into the domain.
    fn record(&self, r: &LogRecord);
}

/// How much a record matters, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `log.debug`.
    Debug,
    /// `log.info`.
    Info,
    /// `log.warn`.
    Warn,
    /// `log.error`.
    Error,
}

impl LogLevel {
    /// Every level, lowest first.
    pub(crate) const ALL: [LogLevel; 4] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
    ];

    /// The name scripts call it by: `debug`, `info`, `warn`, `error`.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One `@skein/log` call.
///
/// `Display` gives the stderr line of a domain without a sink:
/// `<level> <target> <attribution>: <message> <fields>` (fields only when given).
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    /// Who wrote it, as the runtime knows it.
    pub attribution: Attribution,
    /// Its level.
    pub level: LogLevel,
    /// Where it came from: the chunk (script or module) that called `log`, as Luau names it.
    pub target: String,
    /// The message.
    pub message: String,
    /// The fields table, copied ([`Message::Nil`] when none was given).
    pub fields: Message,
    /// `chunk:line` of the call, when Luau knows it.
    pub source: Option<String>,
    /// For a line of Luau's `print` (level `Info`, no fields), the line's bytes as printed,
    /// without its newline: Luau strings need not be UTF-8, and `message` is the same line
    /// with invalid UTF-8 replaced. `None` for an `@skein/log` call.
    pub printed: Option<Vec<u8>>,
}

impl fmt::Display for LogRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}: {}",
            self.level, self.target, self.attribution, self.message
        )?;
        if self.fields != Message::Nil {
            write!(f, " {}", self.fields)?;
        }
        Ok(())
    }
}

/// A domain's sink, if it has one.
pub(crate) type Logs = Option<Arc<dyn LogSink>>;

/// A [`Logs`] that a `#[derive(Debug, Clone)]` spec can hold.
#[derive(Clone, Default)]
pub(crate) struct LogSlot(pub(crate) Logs);

impl fmt::Debug for LogSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(<LogSink>)"
        } else {
            "None"
        })
    }
}
