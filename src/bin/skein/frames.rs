//! The runner as a host: the context it declares (`main`, every phase), the `startup` phase
//! after the main script's first run, the frame loop at `--fps`
//! ([`ScriptDomain::run_frames`]), and what `--stats` prints when the run ends.

use std::time::Duration;

use skein::{ContextSpec, Phase, Pool, ScriptDomain};

use crate::print::say;

/// The name of the context the runner declares: the main script binds to it.
pub const CONTEXT: &str = "main";

/// The frames a second `--fps` asks for by default.
pub const DEFAULT_FPS: u16 = 60;

/// The most frames a second `--fps` accepts: a step shorter than a millisecond is busy waiting.
pub const MAX_FPS: u16 = 1000;

/// The context every runner domain declares: `main`, scheduling every phase, with the domain's
/// whole grant.
pub fn context() -> ContextSpec {
    ContextSpec::new(CONTEXT).phases(Phase::ALL)
}

/// Runs `startup` once (its failures are said on stderr; answers whether any), then drives
/// frames at `fps` until nothing can run any more.
pub fn drive(domain: &ScriptDomain, fps: u16) -> (bool, skein::Result<()>) {
    let mut failed = false;
    match domain.run_phase(Phase::Startup, &[]) {
        Ok(report) => {
            for error in report.errors {
                let context = error.attribution.context.as_deref().unwrap_or(CONTEXT);
                say(format_args!(
                    "context '{context}' startup: {}",
                    error.message
                ));
                failed = true;
            }
        }
        Err(e) => return (failed, Err(e)),
    }
    let step = Duration::from_secs(1) / u32::from(fps.max(1));
    (failed, domain.run_frames(step))
}

/// `--stats`: the domain's counters and each worker's, on stderr, one `skein: stats:` line
/// each, so the script's own output on stdout stays as it was.
pub fn print_stats(domain: &ScriptDomain, pool: &Pool) {
    let s = domain.stats();
    say(format_args!(
        "stats: domain '{}': generation {}, {:?}, {} frames, {} tasks, {} handler calls, \
         events {} delivered, {} unhandled, {} pending, {} stale, {} registered jobs, \
         {} live @skein/worker threads, {} errors, {} warnings, {} denials, job bytes {}, \
         shared bytes {}",
        domain.name(),
        s.generation.get(),
        s.state,
        s.frames,
        s.tasks,
        s.handler_calls,
        s.events_delivered,
        s.events_unhandled,
        s.events_pending,
        s.stale_events,
        s.registered_jobs,
        s.live_actors,
        s.errors,
        s.warnings,
        s.denials,
        s.job_bytes,
        s.shared_bytes,
    ));
    for w in pool.stats() {
        say(format_args!(
            "stats: worker {}: {} items ({} keyed), {} steals, {} sleeps, {} panics, \
             {} VMs, {} keys held, key wait {:?} total, {:?} max, busy {:?}",
            w.worker,
            w.items_run,
            w.keyed_items,
            w.steals,
            w.sleeps,
            w.panics,
            w.vms_held,
            w.keys_held,
            w.key_wait_total,
            w.key_wait_max,
            w.busy,
        ));
    }
}
