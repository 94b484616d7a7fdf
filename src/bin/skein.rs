//! `skein`: run a Luau script with a pool of workers behind `jobs.dispatch`.

use std::process::ExitCode;
use std::sync::Arc;

use skein::{
    CapabilityId, CapabilitySet, ChromeTrace, DomainSpec, Grant, Pool, RootAuthority, ScriptDomain,
};

// The runner's own modules sit in `src/bin/skein/`, so Cargo does not take them for binaries.
#[path = "skein/runner_global.rs"]
mod runner_global;

const HELP: &str = "\
skein: run Luau in parallel

USAGE:
    skein run FILE [--workers N] [-- ARGS...]
    skein run --trace OUT.json FILE ...
    skein run [--allow-read PATH]... [--allow-write PATH]... [--allow NAME]... FILE ...
    skein --help | --version

COMMANDS:
    run FILE        Run the Luau script FILE on the engine thread, with a pool of worker
                    threads behind jobs.dispatch. Skein pumps until the script and every job
                    and task it started have settled, then exits 0. A script error prints the
                    error and its Luau stack on stderr and exits 1.

OPTIONS:
    --workers N     Number of worker threads (default: the number of available cores).
    --trace OUT.json
                    Write a Chrome trace-event timeline of the run to OUT.json when it ends
                    (also when the script fails): every job on the worker thread that ran
                    it, and the engine thread's work. Open it in ui.perfetto.dev.
    --allow-read PATH
                    Grant filesystem.read below the directory PATH (`@skein/fs` readFile, list).
    --allow-write PATH
                    Grant filesystem.write below the directory PATH (`@skein/fs` writeFile).
    --allow NAME    Grant the capability NAME (dotted lowercase, e.g. worker.spawn).
                    Without these flags the script holds no capability: deny by default.
    -h, --help      Print this help.
    -V, --version   Print the version.

ARGS after `--` reach the script as `...` (strings), and as the list `runner.args`.

THE `runner` GLOBAL (the script's own VM only, not jobs):
    runner.args                    The script arguments, a list of strings.

`require(\"@skein/fs\")` (readFile, writeFile, list) works in every VM, within what the
--allow-read / --allow-write flags grant; without them each call is denied.

EXAMPLES:
    skein run --allow-write . examples/mandelbrot.luau   writes mandelbrot.png
    skein run examples/primes.luau --workers 2
";

struct RunArgs {
    file: String,
    workers: Option<usize>,
    trace: Option<String>,
    read: Vec<String>,
    write: Vec<String>,
    allow: Vec<CapabilityId>,
    script_args: Vec<String>,
}

fn parse(args: &[String]) -> Result<Option<RunArgs>, String> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => return Ok(None),
        Some("-V") | Some("--version") => {
            println!("skein {}", env!("CARGO_PKG_VERSION"));
            std::process::exit(0);
        }
        Some("run") => {}
        Some(other) => return Err(format!("unknown command '{other}' (try `skein --help`)")),
    }
    let mut file = None;
    let mut workers = None;
    let mut trace = None;
    let (mut read, mut write, mut allow) = (Vec::new(), Vec::new(), Vec::new());
    let mut script_args = Vec::new();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--" => {
                script_args.extend(it.by_ref().cloned());
            }
            "-h" | "--help" => return Ok(None),
            "--workers" => {
                let n = it
                    .next()
                    .ok_or("--workers needs a number")?
                    .parse::<usize>()
                    .map_err(|_| "--workers needs a whole number of at least 1".to_owned())?;
                if n == 0 {
                    return Err("--workers needs a whole number of at least 1".to_owned());
                }
                workers = Some(n);
            }
            "--trace" => trace = Some(it.next().ok_or("--trace needs a file PATH")?.clone()),
            "--allow-read" => read.push(it.next().ok_or("--allow-read needs a PATH")?.clone()),
            "--allow-write" => write.push(it.next().ok_or("--allow-write needs a PATH")?.clone()),
            "--allow" => {
                let name = it.next().ok_or("--allow needs a capability NAME")?;
                allow.push(CapabilityId::new(name).map_err(|e| format!("--allow: {e}"))?);
            }
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option '{flag}' (try `skein --help`)"))
            }
            path if file.is_none() => file = Some(path.to_owned()),
            extra => {
                return Err(format!(
                    "unexpected argument '{extra}': pass script arguments after `--`"
                ))
            }
        }
    }
    let file = file.ok_or("run needs a FILE (try `skein --help`)")?;
    Ok(Some(RunArgs {
        file,
        workers,
        trace,
        read,
        write,
        allow,
        script_args,
    }))
}

fn run(args: RunArgs) -> Result<(), String> {
    let pool = match args.workers {
        Some(n) => Pool::new(n),
        None => Pool::with_available_parallelism(),
    };
    let grant = grant(&args).map_err(|e| e.to_string())?;
    let mut spec = DomainSpec::new("main").grant(grant);
    let trace = args.trace.as_ref().map(|_| Arc::new(ChromeTrace::new()));
    if let Some(trace) = &trace {
        spec = spec.profile(trace.clone());
    }
    let result = run_script(&pool, spec, &args);
    // Written after the domain has stopped (its stop is on the timeline), and whether or not
    // the script failed: a failing run is the one a timeline helps most with.
    if let (Some(trace), Some(path)) = (trace, &args.trace) {
        if let Err(e) = trace.write_to(path) {
            let written = format!("could not write the trace {path}: {e}");
            return Err(match result {
                Ok(()) => written,
                Err(run) => format!("{run}\nskein: {written}"),
            });
        }
    }
    result
}

/// Runs the script in a domain made from `spec` until it and its work are done; the domain
/// stops when this returns.
fn run_script(pool: &Pool, spec: DomainSpec, args: &RunArgs) -> Result<(), String> {
    let domain = ScriptDomain::new(pool, spec).map_err(|e| e.to_string())?;
    runner_global::install(domain.lua(), &args.script_args).map_err(|e| e.to_string())?;
    domain
        .run_file(&args.file, &args.script_args)
        .map_err(|e| e.to_string())?;
    let result = domain.run_until_idle();
    for report in domain.take_reports() {
        eprintln!("skein: {}: {}", report.source, report.message);
    }
    result.map_err(|e| e.to_string())
}

/// The grant the flags ask for: named capabilities, and file access below the given roots.
fn grant(args: &RunArgs) -> std::io::Result<Grant> {
    let mut grant =
        RootAuthority::new().grant(CapabilitySet::from_iter(args.allow.iter().cloned()));
    for dir in &args.read {
        grant = grant.read_root(dir)?;
    }
    for dir in &args.write {
        grant = grant.write_root(dir)?;
    }
    Ok(grant)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match parse(&argv) {
        Ok(None) => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Ok(Some(args)) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("skein: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("skein: {e}");
            ExitCode::from(2)
        }
    }
}
