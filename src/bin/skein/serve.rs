//! `skein serve DIR`: the resources under `DIR` on one pool, with the operator console on
//! standard input.
//!
//! The library does the work ([`ResourceHost`]: loading, dependency order, calls, stop and
//! reload); this file chooses the startup set, hands the console the host through
//! [`Resources`], and connects standard input and the signals to the console. It never
//! touches a resource's lifecycle itself.

use std::io::{stderr, stdout};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use skein::capability::Grant;
use skein::resource::{HostFile, ResourceHost, StopOutcome};
use skein::{Error, NativeMode, Pool, Report};

use crate::console::{self, Resources, Row, Say};
use crate::print;

/// How often frames run while anything is live: about 60 a second, as `run_until_idle` runs
/// them.
const FRAME: Duration = Duration::from_millis(16);

/// How long a signal waits for the console to take it before it interrupts the resources'
/// running code: well inside the 100 ms a signal is honoured in, and long enough that a frame
/// or a command in progress ends first, so the resources' `stop` handlers still run.
const SIGNAL_GRACE: Duration = Duration::from_millis(50);

/// The file in `DIR` that names the startup set when `--start` is not given.
const HOST_FILE: &str = "skein-host.toml";

/// Lines read ahead of the console: the reader waits beyond this, so a flood on standard
/// input is held by the pipe, not in the runner.
const READ_AHEAD: usize = 64;

/// The console's view of a [`ResourceHost`].
struct Host(ResourceHost);

/// `resource 'NAME': SOURCE: MESSAGE`, how the console says a report.
fn said(resource: &str, report: &Report) -> String {
    format!(
        "resource '{resource}': {}: {}",
        report.source, report.message
    )
}

/// What the console says after a stop: its warnings, then its handlers' failures.
fn outcome(name: &str, outcome: StopOutcome) -> Vec<String> {
    let reports = outcome.reports.iter().map(|r| said(name, r));
    outcome.warnings.into_iter().chain(reports).collect()
}

impl Resources for Host {
    type Error = Error;

    fn start(&mut self, name: &str) -> Result<Vec<String>, Error> {
        self.0.start(name).map(|()| Vec::new())
    }

    fn stop(&mut self, name: &str) -> Result<Vec<String>, Error> {
        self.0.stop(name).map(|o| outcome(name, o))
    }

    fn reload(&mut self, name: &str) -> Result<Vec<String>, Error> {
        self.0.reload(name).map(|o| outcome(name, o))
    }

    fn list(&self) -> Vec<Row> {
        self.0
            .list()
            .into_iter()
            .map(|info| Row {
                name: info.name,
                state: info.state.to_string(),
                generation: info.generation,
                dependencies: info.dependencies,
                exports: info.exports,
                last_error: info.last_error,
            })
            .collect()
    }

    fn is_live(&self) -> bool {
        self.0.is_live()
    }

    fn advance(&mut self, dt: Duration) -> Vec<String> {
        self.0
            .advance(dt)
            .iter()
            .map(|r| said(&r.resource, &r.report))
            .collect()
    }

    fn shutdown(&mut self) -> Vec<String> {
        self.0
            .shutdown()
            .into_iter()
            .flat_map(|(name, o)| outcome(&name, o))
            .collect()
    }
}

/// How many resources the pool's memory budget is shared for: each resource's VMs get an
/// equal share of it as if this many ran at once (at most the library's default limit), so a
/// resource past them is refused at its start for want of memory, naming the budget, and the
/// others go on.
pub(crate) const RESOURCES_SIZED_FOR: usize = 8;

/// What `serve` needs from the command line.
pub(crate) struct Options<'a> {
    pub dir: &'a Path,
    /// `--start`, when given: the startup set instead of the host file's.
    pub start: Option<&'a [String]>,
    pub pool: Pool,
    /// The memory limit of each resource VM.
    pub vm_memory: usize,
    pub ceiling: Grant,
    /// `--native` / `--no-native`: the code mode of every resource's VMs.
    pub native: NativeMode,
    /// `--deadline`: every resource's run deadline, unless its manifest gives its own.
    pub deadline: Option<Duration>,
}

/// The startup set: `--start`, else `DIR/skein-host.toml`'s `[host] start`, else nothing.
fn startup_set(options: &Options<'_>) -> Result<Vec<String>, Error> {
    if let Some(names) = options.start {
        return Ok(names.iter().filter(|n| !n.is_empty()).cloned().collect());
    }
    let file: PathBuf = options.dir.join(HOST_FILE);
    if !file.exists() {
        return Ok(Vec::new());
    }
    Ok(HostFile::read(&file)?.start)
}

/// Serves the resources under `options.dir` until `quit`, end of input or a signal; each ends
/// in a shutdown and `Ok`. The error is a folder or host file that can't be loaded: nothing
/// started.
pub(crate) fn serve(options: Options<'_>) -> Result<(), Error> {
    let (signal_to, signal) = crossbeam_channel::bounded(1);
    let start = startup_set(&options)?;
    let mut host = Host(ResourceHost::load(
        &options.pool,
        options.dir,
        options.ceiling,
    )?);
    host.0.memory_limit(options.vm_memory);
    #[cfg(unix)]
    {
        let interrupt = host.0.interrupt_handle();
        crate::signals::on_first(move || {
            let _ = signal_to.try_send(());
            // The console takes the signal between commands and frames, at once when it waits.
            // Still there after the grace, the engine thread is in a resource's code (a start
            // script, an export or a handler in a loop): that code is interrupted, so the
            // server ends now, not at the code's deadline.
            let until = Instant::now() + SIGNAL_GRACE;
            while !signal_to.is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            if !signal_to.is_empty() {
                interrupt.interrupt();
            }
        });
    }
    #[cfg(not(unix))]
    drop(signal_to);
    // Every resource's `print` lines and log records are written as `skein run` writes them:
    // one write a line, so the console's answers and the resources' lines never interleave.
    let deadline = options.deadline;
    host.0.spec_with(move |_, spec| {
        let spec = spec.logs(Arc::new(print::Lines));
        match deadline {
            Some(deadline) => spec.run_deadline(deadline),
            None => spec,
        }
    });
    host.0.native(options.native);
    let mut say = Say {
        out: stdout(),
        err: stderr(),
    };
    let names: Vec<&str> = start.iter().map(String::as_str).collect();
    if let Err(e) = host.0.start_set(&names) {
        // The operator can mend what failed and start it from the console.
        say.err(&format!("error: {e}"));
    }
    say.out(&banner(options.dir, &host.list()));
    let (to, input) = crossbeam_channel::bounded(READ_AHEAD);
    // The reader blocks on standard input for good; the process ends without waiting for it.
    let spawned = std::thread::Builder::new()
        .name("skein-console".into())
        .spawn(move || console::read_lines(std::io::stdin().lock(), &to));
    if let Err(e) = spawned {
        say.err(&format!(
            "error: could not start the console's reader ({e}); shutting down"
        ));
    }
    console::serve(&mut host, &input, &signal, FRAME, &mut say);
    Ok(())
}

/// `serving 3 resources from DIR, 3 running: store, scores, report; help lists the commands`.
fn banner(dir: &Path, rows: &[Row]) -> String {
    let running: Vec<&str> = rows
        .iter()
        .filter(|r| r.state == "running")
        .map(|r| r.name.as_str())
        .collect();
    let plural = if rows.len() == 1 { "" } else { "s" };
    let running = match running.as_slice() {
        [] => "none running".to_owned(),
        names => format!("{} running: {}", names.len(), names.join(", ")),
    };
    format!(
        "serving {} resource{plural} from {}, {running}; help lists the commands",
        rows.len(),
        dir.display()
    )
}
