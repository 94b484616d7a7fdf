//! A run that can never progress. The runner (which has no host code, so
//! nothing but the script's own tasks can wake its domain) exits 1 naming what each task waits
//! on, instead of running forever in silence; a long but finite wait still completes. Each
//! runner test runs the release runner as a child process under the hostile harness's
//! address-space limit. A host leaves the check off unless it asks (`DomainSpec::detect_stalls`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use skein::shared::SharedQueueRef;
use skein::{DomainSpec, Error, Message, Pool, ScriptDomain};

use crate::hostile::hostile_run;
use crate::support::Tree;

/// The start every stall report has.
const STALLED: &str = "skein: the run can never end: nothing can settle what its tasks wait on: ";

/// A module of jobs that wait: one pops a queue nobody pushes, one naps and answers.
const WAITERS: &str = r#"
local M = {}
function M.popper()
    return jobs.shared.queue("inner"):pop()
end
function M.nap(x)
    task.wait(0.6) -- the behaviour under test: a finite wait past the quiet interval
    return x
end
return M
"#;

/// The script's own path as its chunk name (and so the stall report) gives it.
fn script(tree: &Tree, name: &str) -> String {
    let dir: PathBuf = tree.path().canonicalize().unwrap();
    dir.join(name).display().to_string()
}

#[test]
fn a_pop_of_a_queue_no_task_can_push_ends_the_run_naming_the_queue_and_the_line() {
    let tree = Tree::new(&[(
        "main.luau",
        "local q = jobs.shared.queue(\"work\")\nprint(\"before\")\nlocal v = q:pop()\nprint(\"never\", v)\n",
    )]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(1).stdout_has("before");
    assert!(!ended.stdout.contains("never"), "{}", ended.stdout);
    assert_eq!(
        ended.stderr,
        format!(
            "{STALLED}{}:3 waits on SharedQueue:pop of queue 'work' (no task can push it)\n",
            script(&tree, "main.luau")
        )
    );
}

#[test]
fn a_task_delay_of_math_huge_alone_ends_the_run() {
    let tree = Tree::new(&[(
        "main.luau",
        "task.delay(math.huge, function() print(\"never\") end)\nprint(\"scheduled\")\n",
    )]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(1).stdout_has("scheduled");
    assert_eq!(
        ended.stderr,
        format!(
            "{STALLED}{}:1 waits on task.delay, due more than 86400 s from now (past the stall \
             horizon: counted as never)\n",
            script(&tree, "main.luau")
        )
    );
}

#[test]
fn an_awaited_job_that_pops_forever_in_its_worker_ends_the_run() {
    let tree = Tree::new(&[
        ("w.luau", WAITERS),
        (
            "main.luau",
            "local p = jobs.dispatch(\"./w\", \"popper\")\nprint(p:await())\n",
        ),
    ]);
    let ended = hostile_run(&tree.path(), &["--workers", "2", "main.luau"]);
    ended.exited(1);
    assert_eq!(
        ended.stderr,
        format!(
            "{STALLED}{}:2 waits on a jobs.dispatch promise (its work waits on something \
             nothing can settle)\n",
            script(&tree, "main.luau")
        )
    );
}

#[test]
fn every_wait_is_named_oldest_task_first_then_promises_no_task_awaits() {
    let tree = Tree::new(&[
        ("w.luau", WAITERS),
        (
            "main.luau",
            r#"local q = jobs.shared.queue("a")
task.spawn(function() q:pop() end)
task.spawn(function() task.wait(1e9) end) -- the behaviour under test: a wait past the horizon
local p = jobs.dispatch("./w", "popper")
"#,
        ),
    ]);
    let main = script(&tree, "main.luau");
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(1);
    assert_eq!(
        ended.stderr,
        format!(
            "{STALLED}{main}:2 waits on SharedQueue:pop of queue 'a' (no task can push it); \
             {main}:3 waits on task.wait, due more than 86400 s from now (past the stall \
             horizon: counted as never); a jobs.dispatch promise no task awaits is pending\n"
        )
    );
}

#[test]
fn a_script_error_beside_a_stall_is_reported_as_the_failure_it_is() {
    let tree = Tree::new(&[(
        "main.luau",
        "task.spawn(function() jobs.shared.queue(\"q\"):pop() end)\nerror(\"boom\")\n",
    )]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(1)
        .stderr_has(&format!("{}:2: boom", script(&tree, "main.luau")));
    assert!(!ended.stderr.contains("can never end"), "{}", ended.stderr);
}

/// No false stall: waits that end (a timer in the engine VM and in a worker VM, a queue a
/// delayed task pushes later, a job that computes past the quiet interval) let the run finish.
#[test]
fn long_but_finite_waits_complete_normally() {
    let tree = Tree::new(&[
        ("w.luau", WAITERS),
        (
            "main.luau",
            // The behaviour under test: every wait here is finite, and lasts past the quiet interval.
            r#"task.spawn(function() task.wait(0.5) print("waited") end)
print("nap", jobs.dispatch("./w", "nap", 5):await())
local q = jobs.shared.queue("later")
task.delay(0.8, function() q:push(7) end)
print("popped", q:pop())
print("spun", jobs.dispatch("./w2", "spin", 0.8):await())
"#,
        ),
        (
            "w2.luau",
            "return { spin = function(n) local t = os.clock() while os.clock() - t < n do end return n end }",
        ),
    ]);
    let started = Instant::now();
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended
        .exited(0)
        .stdout_has("waited\n")
        .stdout_has("nap\t5\n")
        .stdout_has("popped\t7\n")
        .stdout_has("spun\t0.8\n");
    assert_eq!(ended.stderr, "");
    // A lower bound only: the waits above took their time rather than being cut short.
    assert!(started.elapsed() >= Duration::from_millis(2000));
}

/// A host that did not ask keeps today's behaviour: another thread of the host may push the
/// queue later, so `run_until_idle` waits for it rather than calling the run stalled.
#[test]
fn a_host_that_did_not_ask_waits_for_its_own_thread_to_push() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("host")).unwrap();
    domain
        .exec("task.spawn(function() got = jobs.shared.queue('feed'):pop() end)")
        .unwrap();
    let queue = domain
        .shared()
        .queue("feed", SharedQueueRef::DEFAULT_CAPACITY)
        .unwrap();
    let pusher = std::thread::spawn(move || {
        // The behaviour under test: a host thread that pushes late, past the quiet interval.
        std::thread::sleep(Duration::from_millis(900));
        queue.push(Message::Integer(3)).unwrap();
    });
    domain.run_until_idle().unwrap();
    pusher.join().unwrap();
    assert_eq!(domain.eval("return got").unwrap(), Message::Integer(3));
}

/// The same wait in a domain that asked ends with `Error::Stalled`, its waits in order.
#[test]
fn a_host_that_asked_gets_error_stalled_with_each_wait() {
    let pool = Pool::new(1);
    let spec = DomainSpec::new("host").detect_stalls();
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .exec("task.spawn(function() jobs.shared.queue('feed'):pop() end) task.delay(math.huge, print)")
        .unwrap();
    let err = domain.run_until_idle().unwrap_err();
    let Error::Stalled { waits } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        waits,
        &[
            "a task waits on SharedQueue:pop of queue 'feed' (no task can push it)",
            "a task waits on task.delay, due more than 86400 s from now (past the stall horizon: \
             counted as never)",
        ]
    );
    assert!(err
        .to_string()
        .starts_with("the run can never end: nothing can settle what its tasks wait on: a task"));
}

/// A far timer whose task was cancelled is waited for by nothing: the run ends as finished,
/// exit 0, rather than waiting a year on it or calling it stalled with nothing to name.
#[test]
fn a_cancelled_far_timer_ends_the_run_as_finished() {
    let tree = Tree::new(&[(
        "main.luau",
        "local t = task.delay(math.huge, print)\ntask.cancel(t)\nprint(\"cancelled\")\n",
    )]);
    let ended = hostile_run(&tree.path(), &["main.luau"]);
    ended.exited(0).stdout_has("cancelled\n");
    assert_eq!(ended.stderr, "");
}
