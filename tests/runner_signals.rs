//! The runner and `SIGINT`/`SIGTERM`: the first signal cancels the run (every job and task
//! stops at its next interrupt check) and the runner exits 130 or 143 within a second, its
//! output intact; a second signal exits at once. The runner is the real binary, a child
//! process.

use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{exit_within, runner_lines, Tree};

/// How long the run may take to reach the point the test signals at (a debug build).
const START: Duration = Duration::from_secs(20);

/// The bound the issue sets between the signal and the exit.
const BOUND: Duration = Duration::from_secs(1);

/// A script that prints, dispatches a job that prints and then loops with no yield, prints
/// again and ends: the runner waits for the job.
fn runaway() -> Tree {
    Tree::new(&[
        (
            "main.luau",
            "print('before')\njobs.dispatch('./spin', 'go')\nprint('dispatched')\n",
        ),
        (
            "spin.luau",
            "return { go = function() print('spinning') while true do end end }\n",
        ),
    ])
}

/// Takes lines until each of `lines` came, in any order; answers every line taken.
fn lines_until(received: &mpsc::Receiver<String>, lines: &[&str]) -> Vec<String> {
    let mut seen = Vec::new();
    let end = Instant::now() + START;
    while !lines.iter().all(|line| seen.iter().any(|l| l == line)) {
        match received.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(l) => seen.push(l),
            Err(e) => panic!("{lines:?} never all came ({e}); got {seen:?}"),
        }
    }
    seen
}

fn send(child: &Child, signal: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: `pid` is our own child, not yet waited for, so the id is still its.
    unsafe { libc::kill(pid, signal) };
}

/// Signals the runner while its job loops, and checks the exit: within the bound, with
/// `128 + signal`, every line printed before still there and nothing after.
fn cancels_on(signal: i32) {
    let tree = runaway();
    let (mut child, received) = runner_lines(&tree);
    let mut seen = lines_until(&received, &["dispatched", "spinning"]);
    let sent = Instant::now();
    send(&child, signal);
    let status = exit_within(&mut child, BOUND);
    let took = sent.elapsed();
    let status = status.unwrap_or_else(|| panic!("still running {took:?} after the signal"));
    assert_eq!(status.code(), Some(128 + signal), "{status:?}");
    // The pipe closes with the runner: what is left in it comes now.
    seen.extend(received.iter());
    seen.sort();
    assert_eq!(seen, ["before", "dispatched", "spinning"]);
}

#[test]
fn sigint_cancels_a_runaway_job_and_exits_130_within_a_second() {
    cancels_on(libc::SIGINT);
}

#[test]
fn sigterm_cancels_a_runaway_job_and_exits_143_within_a_second() {
    cancels_on(libc::SIGTERM);
}

#[test]
fn a_runaway_main_script_is_cancelled_too() {
    let tree = Tree::new(&[("main.luau", "print('looping')\nwhile true do end\n")]);
    let (mut child, received) = runner_lines(&tree);
    lines_until(&received, &["looping"]);
    send(&child, libc::SIGINT);
    let status = exit_within(&mut child, BOUND).expect("the runner exited");
    assert_eq!(status.code(), Some(130), "{status:?}");
}

#[test]
fn a_second_signal_exits_at_once_while_the_first_cannot_stop_the_run() {
    // The job spends seconds inside one call into Luau's C library (`table.sort` of six
    // million numbers, no comparator: about 2 s here), where no interrupt check comes: the
    // first signal's cancel can't land until it returns, and the pool can't join that thread
    // meanwhile, so the cancelled run would exit 130 only then. The second signal, sent right
    // after the first, exits at once with its own code.
    let tree = Tree::new(&[
        ("main.luau", "jobs.dispatch('./stuck', 'go')\n"),
        (
            "stuck.luau",
            "return { go = function() \
             local t = table.create(6000000, 0) \
             for i = 1, #t do t[i] = math.random() end \
             print('stuck') table.sort(t) print('sorted') end }\n",
        ),
    ]);
    let (mut child, received) = runner_lines(&tree);
    lines_until(&received, &["stuck"]);
    let sent = Instant::now();
    send(&child, libc::SIGINT);
    send(&child, libc::SIGTERM);
    let status = exit_within(&mut child, BOUND);
    let took = sent.elapsed();
    let status = status.unwrap_or_else(|| panic!("still running {took:?} after the second"));
    // Linux hands pending signals over lowest number first, so `SIGTERM` is the second (143);
    // either way the exit came from the second signal, before the sort could end.
    assert!(
        [Some(128 + libc::SIGTERM), Some(128 + libc::SIGINT)].contains(&status.code()),
        "{status:?}"
    );
    assert!(
        received.iter().all(|line| line != "sorted"),
        "the sort ended before the exit"
    );
}
