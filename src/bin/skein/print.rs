//! The runner's log sink: `print` lines go to stdout, `@skein/log` records to stderr, each
//! line with one locked write and a flush as it is made.
//!
//! Every VM of the domain (the script's and the pool's) sends its `print` lines to the
//! domain's log sink as records marked `printed`. Writing each with one write and a flush means
//! nothing is held in the process: a kill, even `SIGKILL`, loses no line already printed,
//! there is nothing left to flush on `SIGINT`/`SIGTERM` or before an abort, and a piped
//! stdout receives the lines in the order they were printed. The lock keeps lines printed by
//! different workers from interleaving.

use std::io::Write;

use skein::{LogRecord, LogSink};

/// Writes `print` lines on stdout and other records on stderr, as a domain without a sink
/// would write them.
pub(crate) struct Lines;

impl LogSink for Lines {
    fn record(&self, r: &LogRecord) {
        // As Luau's `print` does, a line that can't be written (stdout closed) is dropped
        // rather than failing the script. A printed line is written as it was given, with no
        // copy: the domain charged it to its host memory once, for the record.
        let _ = match &r.printed {
            Some(bytes) => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)
                    .and_then(|()| out.write_all(b"\n"))
                    .and_then(|()| out.flush())
            }
            None => {
                let mut line = r.to_string().into_bytes();
                line.push(b'\n');
                let mut err = std::io::stderr().lock();
                err.write_all(&line).and_then(|()| err.flush())
            }
        };
    }
}
