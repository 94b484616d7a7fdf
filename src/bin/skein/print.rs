//! The runner's log sink: `print` lines go to stdout, `@skein/log` records to stderr, each
//! line with one locked write and a flush as it is made.
//!
//! Every VM of the domain (the script's and the pool's) sends its `print` lines to the
//! domain's log sink as records marked `printed`. Writing each with one write and a flush means
//! nothing is held in the process: a kill, even `SIGKILL`, loses no line already printed,
//! there is nothing left to flush on `SIGINT`/`SIGTERM` or before an abort, and a piped
//! stdout receives the lines in the order they were printed. The lock keeps lines printed by
//! different workers from interleaving.
//!
//! A line that can't be written ends the run: the first failed write is kept ([`failed`]) and
//! the domain interrupted ([`stop_with`]), as a signal would. A closed pipe (`skein run x |
//! head`) then ends it quietly with exit code 0, as Unix tools end; any other error (a full
//! device) fails it with a message naming the stream. The runner's own messages on stderr go
//! through [`say`], which never panics when stderr can't be written.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};
use std::sync::OnceLock;

use skein::log::{LogRecord, LogSink};
use skein::InterruptHandle;

/// How the runner's output failed: the stream and the error.
pub(crate) struct OutputFailure {
    pub(crate) stream: &'static str,
    pub(crate) error: std::io::Error,
}

impl OutputFailure {
    /// Whether the reader went away (a closed pipe): the run ends quietly.
    pub(crate) fn reader_gone(&self) -> bool {
        self.error.kind() == ErrorKind::BrokenPipe
    }
}

/// The first write that failed.
static FAILED: OnceLock<OutputFailure> = OnceLock::new();

/// What ends the run when a write fails.
static STOP: OnceLock<InterruptHandle> = OnceLock::new();

/// From now on a failed write interrupts the domain behind `handle`.
pub(crate) fn stop_with(handle: InterruptHandle) {
    let _ = STOP.set(handle);
}

/// The first write of the run's output that failed, if one did.
pub(crate) fn failed() -> Option<&'static OutputFailure> {
    FAILED.get()
}

/// Keeps the first failure and ends the run.
fn output_failed(stream: &'static str, error: std::io::Error) {
    if FAILED.set(OutputFailure { stream, error }).is_ok() {
        if let Some(stop) = STOP.get() {
            stop.interrupt();
        }
    }
}

/// Writes `skein: <message>` and a newline on stderr; a failed write is kept as the run's
/// output failure instead of panicking as `eprintln!` would.
pub(crate) fn say(message: Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    if let Err(e) = err
        .write_fmt(format_args!("skein: {message}\n"))
        .and_then(|()| err.flush())
    {
        drop(err);
        output_failed("stderr", e);
    }
}

/// Writes `print` lines on stdout and other records on stderr, as a domain without a sink
/// would write them.
pub(crate) struct Lines;

impl LogSink for Lines {
    fn record(&self, r: &LogRecord) {
        // A printed line is written as it was given, with no copy: the domain charged it to its
        // host memory once, for the record.
        let (stream, written) = match &r.printed {
            Some(bytes) => {
                let mut out = std::io::stdout().lock();
                let written = out
                    .write_all(bytes)
                    .and_then(|()| out.write_all(b"\n"))
                    .and_then(|()| out.flush());
                ("stdout", written)
            }
            None => {
                let mut line = r.to_string().into_bytes();
                line.push(b'\n');
                let mut err = std::io::stderr().lock();
                ("stderr", err.write_all(&line).and_then(|()| err.flush()))
            }
        };
        if let Err(e) = written {
            output_failed(stream, e);
        }
    }
}
