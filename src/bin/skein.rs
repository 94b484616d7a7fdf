//! `skein`: run a Luau script with a pool of workers behind `jobs.dispatch`.
//!
//! The runner is thin: it parses the command line (`clap`, from `OsString`, so no argument can
//! make it panic), writes `print` output line by line, and reports what the library answers.
//! Exit codes: 0 when the run succeeded, 1 when the script, a task or a job failed (or the
//! script file could not be read), 2 for a usage error, 130 or 143 when `SIGINT` or `SIGTERM`
//! cancelled the run (`skein/signals.rs`).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use skein::capability::{CapabilityId, CapabilitySet, Grant, RootAuthority};
use skein::profile::ChromeTrace;
use skein::{DomainSpec, NativeMode, Plan, Pool, ReportKind, ScriptDomain};

// The runner's own modules sit in `src/bin/skein/`, so Cargo does not take them for binaries.
#[path = "skein/console.rs"]
mod console;
#[path = "skein/frames.rs"]
mod frames;
#[path = "skein/print.rs"]
mod print;
#[path = "skein/runner_global.rs"]
mod runner_global;
#[path = "skein/script_args.rs"]
mod script_args;
#[path = "skein/serve.rs"]
mod serve;
#[cfg(unix)]
#[path = "skein/signals.rs"]
mod signals;

/// The most worker threads `--workers` accepts.
///
/// Luau work is CPU-bound, so threads past the machine's cores add no speed, only memory: each
/// worker builds its own VM for every domain it serves (up to the 512 MiB VM limit each) and a
/// thread stack. 1024 covers the largest machines Skein is likely to meet (two sockets of 192
/// cores with SMT is 768) while refusing, at parse time, the typo that would start 100,000
/// threads.
const MAX_WORKERS: u16 = 1024;

const AFTER_HELP: &str = "\
EXIT CODES:
    0  every failure, if any, was observed by code: an error caught, a promise awaited or
       its status read, a worker's failure received or the worker joined (notes about them
       may still be printed on stderr); output to a closed pipe ends the run with 0 too
    1  the script failed, or a job, task, coroutine or worker failed and no code observed it
       (each is reported once on stderr), or the run can never end (every task waits on
       something nothing can settle, such as a queue no task pushes: each wait is named), or
       output could not be written, or the script file could not be read
    2  a usage error (the message says which argument)
    130, 143
       SIGINT (Ctrl-C) or SIGTERM cancelled the run: every job and task stopped at its next
       interrupt check, the domain stopped and the output printed so far is intact; a second
       signal exits at once

Run `skein run --help` for the options of `run`, `skein serve --help` for those of `serve`.";

/// The end of `skein run --help`: what the script sees, and what FILE may be.
fn run_after_help() -> String {
    format!(
        "\
ARGS after `--` reach the script as `...` and as the list `runner.args`: Luau strings are
bytes, so each arrives as the bytes given, UTF-8 or not.

THE `runner` GLOBAL (the script's own VM only, not jobs):
    runner.args    The script arguments, a list of strings.

`require(\"@skein/fs\")` (readFile, writeFile, list) works in every VM, within what the
--allow-read / --allow-write flags grant; without them each call is denied.

`print` writes each line to stdout with one write as it is called, so a line printed is kept
even if the run is then killed.

FILE must be a regular file of at most {} MiB; a directory, device, FIFO or larger file is
refused naming the path, with exit code 1. Its bytes are Luau source: they need not be UTF-8.

EXAMPLES:
    skein run --allow-write . examples/mandelbrot.luau   writes mandelbrot.png
    skein run examples/primes.luau --workers 2 -- 20000",
        Plan::MAX_SOURCE_BYTES >> 20
    )
}

/// The help of `--workers`, with its range.
fn workers_help() -> String {
    format!("Number of worker threads, 1 to {MAX_WORKERS} [default: the number of available cores]")
}

/// `skein --version`: the version and the code a run uses by default, native or interpreted.
fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        format!(
            "{}, {}",
            env!("CARGO_PKG_VERSION"),
            NativeMode::Annotated.in_use()
        )
    })
}

/// skein: run Luau in parallel
#[derive(Parser)]
#[command(name = "skein", version = version(), after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Luau script FILE on the engine thread, with a pool of worker threads behind
    /// jobs.dispatch
    ///
    /// Skein declares the context `main` (every phase) for the script's handlers, runs its
    /// `startup` phase, then drives frames at --fps (events drained, update handlers,
    /// registered jobs, tasks) until nothing can run any more. A script error prints the error
    /// and its Luau stack on stderr and exits 1.
    #[command(after_help = run_after_help())]
    Run(RunArgs),

    /// Host the resources under DIR (each sub-folder holding a skein.toml) on one pool, with
    /// an operator console on standard input
    ///
    /// Starts the startup set in dependency order, runs frames while any resource runs, and
    /// takes one command a line: list, start NAME, stop NAME, reload NAME, help, quit.
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(ServeArgs),
}

const SERVE_AFTER_HELP: &str = "\
THE STARTUP SET is --start's list, else the `[host] start` list of DIR/skein-host.toml, else
nothing (start resources from the console). It starts dependencies first, whatever the order
given; a start that fails is said on stderr and the console comes up all the same.

The --allow* flags are the most any resource may be granted: a skein.toml asking for a
capability they do not give is refused when DIR is loaded, and its read and write roots must
lie below an --allow-read / --allow-write directory.

A command that fails says its error on stderr and the console goes on. quit, the end of
standard input, SIGINT (Ctrl-C) and SIGTERM stop every resource, each after those that depend
on it, and exit 0; a second signal exits at once. A signal that comes while a resource's code
runs (a start script or an export in a loop) interrupts every resource's code within 100 ms:
the server then shuts down at once, its stop handlers interrupted too. A DIR that can't be
loaded exits 1.

EXAMPLE:
    skein serve examples/server";

#[derive(Args)]
struct ServeArgs {
    /// The folder of resources: every sub-folder holding a skein.toml is one, named after it
    #[arg(value_name = "DIR")]
    dir: PathBuf,

    /// The resources to start, comma-separated, instead of DIR/skein-host.toml's list
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    start: Option<Vec<String>>,

    /// The longest one run of a resource's code may take, in milliseconds, 1 to 60000 (default
    /// 60000): a start script, one call of an export, a handler or a task run. Past it the
    /// run stops with `deadline exceeded`, and the rest of the server goes on. A skein.toml's
    /// `deadline_ms` wins over it for its resource
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    deadline: Option<u64>,

    #[command(flatten)]
    pool: PoolArgs,

    #[command(flatten)]
    code: CodeArgs,

    #[command(flatten)]
    grants: GrantArgs,
}

#[derive(Args)]
struct RunArgs {
    /// The Luau script to run
    #[arg(value_name = "FILE")]
    file: PathBuf,

    #[command(flatten)]
    pool: PoolArgs,

    #[command(flatten)]
    code: CodeArgs,

    /// Write a Chrome trace-event timeline of the run to OUT.json when it ends (also when the
    /// script fails): every job on the worker thread that ran it, and on the engine thread each
    /// run of the script's code (the main script, its tasks, timers and handlers, from a resume
    /// to the next yield) and each handler call. Open it in ui.perfetto.dev
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,

    #[command(flatten)]
    grants: GrantArgs,

    /// Frames a second, 1 to 1000: each frame drains the events, runs the `main` context's
    /// fixedUpdate, update and lateUpdate handlers and the registered jobs, and moves task
    /// timers on by 1/FPS seconds
    #[arg(long, value_name = "FPS", default_value_t = frames::DEFAULT_FPS, value_parser = clap::value_parser!(u16).range(1..=i64::from(frames::MAX_FPS)))]
    fps: u16,

    /// Print the domain's and each pool worker's counters on stderr when the run ends
    #[arg(long)]
    stats: bool,

    /// Arguments for the script (after `--`)
    #[arg(last = true, value_name = "ARGS")]
    script_args: Vec<OsString>,
}

/// `--workers` and `--memory`, which `run` and `serve` share.
#[derive(Args)]
struct PoolArgs {
    #[arg(long, value_name = "N", help = workers_help(), value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_WORKERS)))]
    workers: Option<u16>,

    /// The most memory the run's VMs and what Skein holds for its scripts may take together,
    /// in bytes or with K, M or G (e.g. 2G). Each VM is given an equal share of it, at most
    /// 512 MiB [default: the lower of the address-space limit and the machine's memory, less
    /// a quarter]
    #[arg(long, value_name = "SIZE", value_parser = memory_size)]
    memory: Option<usize>,
}

/// The least memory limit the runner gives a VM: a share of `--memory` smaller than this
/// means too many workers for the budget.
const MIN_VM_MEMORY: usize = 8 << 20;

/// `--memory SIZE`, read as the library reads a size, and at least one VM's least share.
fn memory_size(text: &str) -> Result<usize, String> {
    let bytes = skein::size::parse_size(text)?;
    if bytes < 4 * MIN_VM_MEMORY {
        return Err(format!(
            "must be at least {}",
            skein::size::format_bytes(4 * MIN_VM_MEMORY)
        ));
    }
    Ok(bytes)
}

/// `--native` and `--no-native`, which `run` and `serve` share.
#[derive(Args)]
struct CodeArgs {
    /// Compile every module and script to native code, not only those that start with
    /// `--!native` and the functions marked `@native` (the default). Where the platform has no
    /// code generator everything runs interpreted
    #[arg(long, conflicts_with = "no_native")]
    native: bool,

    /// Run everything interpreted, `--!native` modules too
    #[arg(long)]
    no_native: bool,
}

/// The `--allow*` flags: what `run` grants its script, and the most `serve` grants any
/// resource.
#[derive(Args)]
struct GrantArgs {
    /// Grant filesystem.read below the directory PATH (`@skein/fs` readFile, list)
    #[arg(long = "allow-read", value_name = "PATH")]
    read: Vec<PathBuf>,

    /// Grant filesystem.write below the directory PATH (`@skein/fs` writeFile)
    #[arg(long = "allow-write", value_name = "PATH")]
    write: Vec<PathBuf>,

    /// Grant the capability NAME (dotted lowercase, e.g. worker.spawn). Without these flags
    /// the script holds no capability: deny by default
    #[arg(long, value_name = "NAME", value_parser = capability)]
    allow: Vec<CapabilityId>,
}

impl PoolArgs {
    /// The pool `--workers` and `--memory` ask for, and the memory limit of each VM: the
    /// budget shared equally by `vms_per_worker` VMs a worker (and as many for the engine
    /// thread and for what Skein holds on the scripts' behalf), at most the library's default.
    /// A share below [`MIN_VM_MEMORY`] is a usage error naming both flags.
    fn pool(&self, vms_per_worker: usize) -> Result<(Pool, usize), String> {
        let workers = match self.workers {
            Some(n) => usize::from(n),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let budget = self.memory.unwrap_or_else(Pool::default_memory_budget);
        let shares = (workers + 2) * vms_per_worker;
        let share = budget / shares;
        if share < MIN_VM_MEMORY {
            let fit = (budget / MIN_VM_MEMORY / vms_per_worker).saturating_sub(2);
            return Err(format!(
                "--workers {workers}: a memory budget of {} gives each VM {}, less than the \
                 {} a VM needs; at most {fit} workers fit it (set --workers lower or --memory \
                 higher)",
                skein::size::format_bytes(budget),
                skein::size::format_bytes((share >> 10) << 10),
                skein::size::format_bytes(MIN_VM_MEMORY),
            ));
        }
        // Whole MiB, so texts that name the limit read plainly.
        let limit = (share.min(Plan::DEFAULT_MEMORY_LIMIT) >> 20) << 20;
        Ok((Pool::with_memory_budget(workers, budget), limit))
    }
}

/// A usage error: said as clap says its own, exit code 2.
fn usage(message: &str) -> ! {
    Cli::command()
        .error(clap::error::ErrorKind::ArgumentConflict, message)
        .exit()
}

impl CodeArgs {
    /// The code mode `--native` / `--no-native` ask for.
    fn native(&self) -> NativeMode {
        if self.native {
            NativeMode::All
        } else if self.no_native {
            NativeMode::Off
        } else {
            NativeMode::Annotated
        }
    }
}

impl GrantArgs {
    /// The grant the flags ask for: named capabilities, and file access below the given roots.
    fn grant(&self) -> Result<Grant, String> {
        let mut grant =
            RootAuthority::new().grant(CapabilitySet::from_iter(self.allow.iter().cloned()));
        for dir in &self.read {
            grant = grant
                .read_root(dir)
                .map_err(|e| format!("--allow-read: {e}"))?;
        }
        for dir in &self.write {
            grant = grant
                .write_root(dir)
                .map_err(|e| format!("--allow-write: {e}"))?;
        }
        Ok(grant)
    }
}

/// `--allow NAME`, checked as the library checks a capability name.
fn capability(name: &str) -> Result<CapabilityId, String> {
    CapabilityId::new(name).map_err(|e| e.to_string())
}

/// How a run that did not succeed ended; what to say is already on stderr.
enum Failed {
    /// The script, a task or a job failed, or the run could not start.
    Error,
    /// A signal cancelled the run: it exits `128 + signal`.
    Signal(i32),
}

/// The first `SIGINT`/`SIGTERM` the run took, if any.
fn signalled() -> Option<i32> {
    #[cfg(unix)]
    return signals::received();
    #[cfg(not(unix))]
    return None;
}

fn run(args: RunArgs) -> Result<(), Failed> {
    let script_args = script_args::bytes(&args.script_args).map_err(|e| fail(&e))?;
    let (pool, vm_memory) = args.pool.pool(1).unwrap_or_else(|e| usage(&e));
    let grant = args.grants.grant().map_err(|e| fail(&e))?;
    // Code with no file of its own (a task spawned straight onto `require`) resolves from the
    // script's folder, as the script's own requires do, not from wherever the runner started.
    let root = script_folder(&args.file);
    let plan = Plan::new()
        .root(root)
        .native(args.code.native())
        .memory_limit(vm_memory);
    // The runner has no host code: nothing but the script's own tasks can wake the domain, so
    // a run whose tasks all wait on what nothing can settle ends (exit 1) instead of hanging.
    let mut spec = DomainSpec::new("main")
        .context(frames::context())
        .map_err(|e| fail(&e))?
        .plan(plan)
        .grant(grant)
        .logs(Arc::new(print::Lines))
        .detect_stalls();
    let trace = args.trace.as_ref().map(|_| Arc::new(ChromeTrace::new()));
    if let Some(trace) = &trace {
        spec = spec.profile(trace.clone());
    }
    let result = run_script(&pool, spec, &args, &script_args);
    // A signal outranks what the cancelled run answered (its jobs failed as cancelled), and so
    // does output that could not be written, which ended the run the same way.
    let result = match (signalled(), print::failed()) {
        (Some(signal), _) => Err(Failed::Signal(signal)),
        (None, Some(failure)) if failure.reader_gone() => Ok(()),
        (None, Some(failure)) => Err(fail(&format_args!(
            "could not write to {}: {}",
            failure.stream, failure.error
        ))),
        (None, None) => result,
    };
    // Written after the domain has stopped (its stop is on the timeline), and whether or not
    // the script failed: a failing run is the one a timeline helps most with.
    if let (Some(trace), Some(path)) = (trace, &args.trace) {
        if let Err(e) = trace.write_to(path) {
            return Err(fail(&format!(
                "could not write the trace {}: {e}",
                path.display()
            )));
        }
    }
    result
}

fn serve_resources(args: ServeArgs) -> Result<(), Failed> {
    let ceiling = args.grants.grant().map_err(|e| fail(&e))?;
    let (pool, vm_memory) = args
        .pool
        .pool(serve::RESOURCES_SIZED_FOR)
        .unwrap_or_else(|e| usage(&e));
    serve::serve(serve::Options {
        dir: &args.dir,
        start: args.start.as_deref(),
        pool,
        vm_memory,
        ceiling,
        native: args.code.native(),
        deadline: args.deadline.map(Duration::from_millis),
    })
    .map_err(|e| fail(&e))
}

/// The folder of the script at `file`, canonical when it can be made so (a missing script is
/// refused later, naming it).
fn script_folder(file: &Path) -> PathBuf {
    let full = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    match full.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Says `message` on stderr as the runner's.
fn fail(message: &dyn std::fmt::Display) -> Failed {
    print::say(format_args!("{message}"));
    Failed::Error
}

/// Runs the script in a domain made from `spec` until it and its work are done; the domain
/// stops when this returns. Every failure no code observed is said once on stderr, and any of
/// them fails the run; capability denials and notes are said too, but fail nothing
/// ([`Report::is_failure`](skein::Report::is_failure)).
fn run_script(
    pool: &Pool,
    spec: DomainSpec,
    args: &RunArgs,
    script_args: &[&[u8]],
) -> Result<(), Failed> {
    let domain = ScriptDomain::new(pool, spec).map_err(|e| fail(&e))?;
    #[cfg(unix)]
    signals::watch(domain.interrupt_handle());
    print::stop_with(domain.interrupt_handle());
    // After a signal or a failed write, what the cancel made fail is not the run's failure:
    // nothing more is said (`run` answers for the run). The text said is kept, so the reports
    // below do not say a denial it carries a second time.
    let run_error = std::cell::RefCell::new(None::<String>);
    let said = |e: skein::Error| match (signalled(), print::failed()) {
        (Some(signal), _) => Failed::Signal(signal),
        (None, Some(_)) => Failed::Error,
        (None, None) => {
            let text = e.to_string();
            let failed = fail(&text);
            *run_error.borrow_mut() = Some(text);
            failed
        }
    };
    runner_global::install(domain.lua(), script_args).map_err(|e| fail(&e))?;
    domain
        .run_file_bytes(&args.file, script_args)
        .map_err(said)?;
    let (startup_failed, result) = frames::drive(&domain, args.fps);
    let result = result.map_err(said);
    if args.stats {
        frames::print_stats(&domain, pool);
    }
    if let Some(signal) = signalled() {
        return Err(Failed::Signal(signal));
    }
    if print::failed().is_some() {
        return Err(Failed::Error);
    }
    let mut unhandled = startup_failed;
    // The main script's failure is the run's error, said above already.
    let reports: Vec<_> = domain
        .take_reports()
        .into_iter()
        .filter(|report| !(result.is_err() && report.kind == ReportKind::Script))
        .collect();
    // A denial that a failure carries in its text (an `fs.writeFile` that failed the script,
    // or a task nobody awaited) is said there, once: each failure takes the latest denial with
    // its text off the reports. A denial the code caught is still said as its own report.
    let run_error = run_error.into_inner();
    let failures = run_error.iter().map(String::as_str).chain(
        reports
            .iter()
            .filter(|report| report.is_failure())
            .map(|report| report.message.as_str()),
    );
    let mut carried = vec![false; reports.len()];
    for failure in failures {
        let latest = (0..reports.len()).rev().find(|&i| {
            !carried[i]
                && reports[i].kind == ReportKind::Capability
                && failure.contains(reports[i].message.as_str())
        });
        if let Some(i) = latest {
            carried[i] = true;
        }
    }
    for (report, carried) in reports.iter().zip(carried) {
        if carried {
            continue;
        }
        print::say(format_args!("{}: {}", report.source, report.message));
        unhandled |= report.is_failure();
    }
    match result {
        Ok(()) if unhandled => Err(Failed::Error),
        other => other,
    }
}

fn main() -> ExitCode {
    // First, while this is the only thread: every thread started later inherits the mask.
    #[cfg(unix)]
    signals::block();
    // Parsed from `OsString`: an argument that is not UTF-8 is a usage error clap names (or,
    // for FILE and script arguments, simply bytes), never a panic.
    let cli = Cli::parse_from(std::env::args_os());
    let result = match cli.command {
        None => {
            let _ = Cli::command().print_help();
            Ok(())
        }
        Some(Command::Run(args)) => run(args),
        Some(Command::Serve(args)) => serve_resources(args),
    };
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed::Error) => ExitCode::FAILURE,
        Err(Failed::Signal(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
    };
    let _ = std::io::stdout().flush();
    code
}
