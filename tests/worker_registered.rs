//! Jobs registered from a worker VM (`jobs.register` inside a dispatched item): their functions
//! stay in that VM and every frame posts a call there without waiting; the commands a call
//! records apply one frame later, a raise errors the job one frame later. Also the
//! `run_until_idle` rule for registered jobs, through the domain and through the runner.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use skein::job::JobStatus;
use skein::message::Args;
use skein::{Message, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, field, number, text, wait_until, Tree};

/// The module whose items register jobs in their worker VM. `mark()` is a host function that
/// counts, so a test knows a call ran to its end without draining the mailbox.
const MODULE: &str = r#"
local M = {}
local count = 0
local handle = nil

-- A luau job: each call bumps `count` (state of this VM), records world.set(count), may hold
-- (o.hold: counts `entered()`, then spins while the host's `held()` answers true), may cancel
-- itself at call o.cancel_at, marks, and may raise at call o.fail_at.
function M.start(o)
    handle = jobs.register({ name = o.name, phase = "main", executor = { kind = "luau", run = function()
        count += 1
        local n = count
        world.set(n)
        if o.hold then
            entered()
            while held() do end
        end
        if o.cancel_at == n then handle:cancel() end
        mark()
        if o.fail_at == n then error("boom at " .. n) end
    end } })
    return handle:valid()
end

-- A worker job: input answers 1, nil, 3, nil, ...; the entry doubles; apply records the result.
function M.double(v) return v * 2 end
function M.start_worker()
    local n = 0
    handle = jobs.register({ name = "doubler", phase = "main", executor = { kind = "worker",
        module = "./w", entry = "double",
        input = function() n += 1 if n % 2 == 0 then return nil end return n end,
        apply = function(r) world.set(r) mark() end } })
    return true
end

function M.state()
    local info = handle:info()
    return { valid = handle:valid(), status = handle:status() or "none", info = info }
end
function M.cancel() return handle:cancel() end
function M.ping() return true end
function M.pause() return handle:pause() end

function M.try(descriptor)
    local ok, err = pcall(jobs.register, descriptor)
    return if ok then "registered" else tostring(err)
end
function M.keyed()
    return M.try({ phase = "main", executor = { kind = "worker", module = "./w", entry = "double",
        input = print, apply = print, key = "k" } })
end
function M.named(name)
    return M.try({ name = name, phase = "main", executor = { kind = "luau", run = function() end } })
end
return M
"#;

const FRAME: Duration = Duration::from_millis(1);

/// A one-worker domain (so every item runs in the same worker VM) with `world.set` logging its
/// first argument, `mark()` counting, and `entered()`/`held()` to hold a call while the test acts.
struct Fixture {
    _tree: Tree,
    domain: ScriptDomain,
    log: Rc<RefCell<Vec<i64>>>,
    marks: Arc<AtomicU64>,
    entered: Arc<AtomicU64>,
    hold: Arc<AtomicBool>,
}

fn fixture() -> Fixture {
    let tree = Tree::new(&[("w.luau", MODULE), ("boom.luau", "rawPanic() return {}")]);
    let marks = Arc::new(AtomicU64::new(0));
    let counter = marks.clone();
    let entered = Arc::new(AtomicU64::new(0));
    let entered_counter = entered.clone();
    let hold = Arc::new(AtomicBool::new(false));
    let held = hold.clone();
    let plan = Plan::new()
        .function("mark", move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(skein::mlua::MultiValue::new())
        })
        .function("entered", move |_, _| {
            entered_counter.fetch_add(1, Ordering::SeqCst);
            Ok(skein::mlua::MultiValue::new())
        })
        .function("held", move |_, _| {
            let held = held.load(Ordering::SeqCst);
            Ok(skein::mlua::MultiValue::from_vec(vec![
                skein::mlua::Value::Boolean(held),
            ]))
        })
        // A host function whose panic Skein's wrapper does not catch: at a module's top level
        // it reaches the worker, which replaces its VM.
        .setup(|lua| {
            let f = lua
                .create_function(|_, ()| -> skein::mlua::Result<()> { panic!("raw host panic") })?;
            lua.globals().raw_set("rawPanic", f)
        });
    let domain = tree.domain_with(&Pool::new(1), plan);
    let log = Rc::new(RefCell::new(Vec::new()));
    let sink = log.clone();
    domain
        .register_command("world.set", move |args: Args| {
            match args.first() {
                Some(Message::Integer(i)) => sink.borrow_mut().push(*i),
                Some(Message::Number(n)) => sink.borrow_mut().push(*n as i64),
                other => return Err(format!("not a number: {other:?}").into()),
            }
            Ok(())
        })
        .unwrap();
    Fixture {
        _tree: tree,
        domain,
        log,
        marks,
        entered,
        hold,
    }
}

impl Fixture {
    fn dispatch(&self, entry: &str, args: &str) -> Message {
        self.domain
            .eval(&format!(
                "return jobs.dispatch('./w', '{entry}', {args}):await()"
            ))
            .unwrap()
    }

    /// Waits until `n` calls have marked (run to their end, near enough: the end itself is
    /// posted right after).
    #[track_caller]
    fn wait_marks(&self, n: u64) {
        let marks = self.marks.clone();
        assert!(
            wait_until(Duration::from_secs(10), || marks.load(Ordering::SeqCst)
                >= n),
            "{n} marks never came: {}",
            self.marks.load(Ordering::SeqCst)
        );
    }

    /// Pumps (draining the mailbox, running no registered job) until the engine has seen the
    /// job's call end: the job is no longer running, or gone.
    #[track_caller]
    fn wait_idle(&self) {
        assert!(
            wait_until(Duration::from_secs(10), || {
                self.domain.pump();
                !self
                    .domain
                    .jobs()
                    .first()
                    .is_some_and(|j| j.status == JobStatus::Running)
            }),
            "{:?}",
            self.domain.jobs()
        );
    }

    /// Proves that no call is posted or running: every call a frame posted before this has run
    /// (and marked) once it returns. A frame posts a call to the worker's inbox; the worker takes
    /// its inbox before each item, but a post may land while the first item is being taken, so
    /// it may run just after that item: it runs before the second.
    fn barrier(&self) {
        assert_eq!(self.dispatch("ping", "nil"), Message::Boolean(true));
        assert_eq!(self.dispatch("ping", "nil"), Message::Boolean(true));
    }

    /// Both: call `n` ran, and the engine has applied its end.
    #[track_caller]
    fn settle(&self, n: u64) {
        self.wait_marks(n);
        self.wait_idle();
    }

    /// Pumps (draining the mailbox, running no registered job) until the job is errored.
    #[track_caller]
    fn pump_until_errored(&self) {
        assert!(
            wait_until(Duration::from_secs(10), || {
                self.domain.pump();
                self.job().status == JobStatus::Errored
            }),
            "{:?}",
            self.job()
        );
    }

    fn log(&self) -> Vec<i64> {
        self.log.borrow().clone()
    }

    fn job(&self) -> skein::job::JobInfo {
        let jobs = self.domain.jobs();
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        jobs[0].clone()
    }
}

#[test]
fn a_worker_registered_luau_job_keeps_its_vm_state_and_its_writes_land_one_frame_later() {
    let f = fixture();
    assert_eq!(
        f.dispatch("start", "{ name = 'counter' }"),
        Message::Boolean(true)
    );
    // The registration reached the engine with the item's reply.
    let job = f.job();
    assert_eq!(job.name.as_deref(), Some("counter"));
    assert_eq!(job.kind, "luau");
    assert_eq!(job.status, JobStatus::Pending);
    let worker = job
        .worker
        .expect("a worker-registered job reports its calls");
    assert_eq!(
        (worker.calls, worker.late_calls, worker.failed_calls),
        (0, 0, 0)
    );
    for k in 1..=5i64 {
        f.domain.frame(FRAME);
        // The frame posted call k and went on: its write is not applied in this frame.
        assert_eq!(f.log(), (1..k).collect::<Vec<_>>(), "after frame {k}");
        assert_eq!(f.job().status, JobStatus::Running);
        f.wait_marks(k as u64);
        // Still not: the write waits in the mailbox for the engine's next drain.
        assert_eq!(f.log().len(), (k - 1) as usize);
        f.wait_idle();
        assert_eq!(f.log(), (1..=k).collect::<Vec<_>>(), "after the drain {k}");
    }
    f.domain.frame(FRAME);
    // The counter in the module grew by one per call: the calls shared one VM.
    assert_eq!(f.log(), vec![1, 2, 3, 4, 5]);
    let worker = f.job().worker.unwrap();
    assert_eq!(
        (worker.calls, worker.late_calls, worker.failed_calls),
        (6, 0, 0)
    );
    assert_eq!(f.job().status, JobStatus::Running);
    // Call 6 ends; the engine's next drain sees it.
    f.settle(6);
    let engine = f
        .domain
        .eval("local w = jobs.find('counter'):info().worker return { w.calls, w.late_calls, w.failed_calls }")
        .unwrap();
    assert_eq!(
        engine,
        Message::List(vec![
            Message::Number(6.0),
            Message::Number(0.0),
            Message::Number(0.0)
        ])
    );
    // The handle in the worker VM answers as the engine last saw the job: call 6 ended.
    let state = f.dispatch("state", "nil");
    assert_eq!(field(&state, "valid"), &Message::Boolean(true));
    assert_eq!(text(field(&state, "status")), "pending");
    let info = field(&state, "info");
    assert_eq!(number(field(field(info, "worker"), "calls")), 6.0);
    assert_eq!(text(field(info, "name")), "counter");
    assert_eq!(text(field(info, "kind")), "luau");
    // An engine-registered job has no `worker` counts.
    let none = f
        .domain
        .eval("return jobs.register({ phase = 'p', executor = { kind = 'luau', run = function() end } }):info().worker == nil")
        .unwrap();
    assert_eq!(none, Message::Boolean(true));
    assert!(f.domain.take_reports().is_empty());
}

#[test]
fn a_slow_call_never_holds_a_frame_and_the_frames_it_spans_count_late_calls() {
    let f = fixture();
    f.hold.store(true, Ordering::SeqCst);
    f.dispatch("start", "{ name = 'slow', hold = true }");
    f.domain.frame(FRAME); // posts call 1, which holds until the test lets it go
    assert!(wait_until(Duration::from_secs(10), || f
        .entered
        .load(Ordering::SeqCst)
        == 1));
    // A watchdog lets the call go after 10 s: a frame that waited for it then fails the test
    // instead of hanging it.
    let (frames_done, done) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let hold = f.hold.clone();
        std::thread::spawn(move || {
            let fired = done.recv_timeout(Duration::from_secs(10)).is_err();
            hold.store(false, Ordering::SeqCst);
            fired
        })
    };
    for _ in 0..10 {
        f.domain.frame(FRAME);
    }
    // No frame waited for the held call: it is still running.
    assert_eq!(f.marks.load(Ordering::SeqCst), 0);
    frames_done.send(()).unwrap();
    assert!(
        !watchdog.join().unwrap(),
        "a frame waited for the held call"
    );
    let worker = f.job().worker.unwrap();
    // The first frame posted the call; the other 10 found it running, and posted no second.
    assert_eq!((worker.calls, worker.late_calls), (1, 10), "{worker:?}");
    assert_eq!(worker.failed_calls, 0);
    // Once the call ends, the next frame posts the next one.
    f.settle(worker.calls);
    f.domain.frame(FRAME);
    let after = f.job().worker.unwrap();
    assert_eq!(after.calls, worker.calls + 1);
    assert_eq!(after.late_calls, worker.late_calls);
}

#[test]
fn a_raise_errors_the_job_one_frame_later_and_resume_clears_it() {
    let f = fixture();
    f.dispatch("start", "{ name = 'flaky', fail_at = 2 }");
    f.domain.frame(FRAME);
    f.settle(1);
    f.domain.frame(FRAME); // posts call 2, which raises
                           // The raise has not reached the engine in the frame that posted the call.
    assert_eq!(f.job().status, JobStatus::Running);
    assert!(f.domain.take_reports().is_empty());
    f.wait_marks(2);
    // The engine's next drain (a frame's, or here a pump's) marks it errored.
    f.wait_idle();
    let job = f.job();
    assert_eq!(job.status, JobStatus::Errored);
    assert_contains(job.last_error.as_deref().unwrap(), "boom at 2");
    let worker = job.worker.unwrap();
    assert_eq!((worker.calls, worker.failed_calls), (2, 1));
    // The write the failing call made before raising still applied, in order.
    assert_eq!(f.log(), vec![1, 2]);
    let reports = f.domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "job 'flaky'");
    assert_contains(&reports[0].message, "job 'flaky' failed: ");
    assert_contains(&reports[0].message, "boom at 2");
    // Errored: skipped frame after frame.
    f.domain.frame(FRAME);
    f.domain.frame(FRAME);
    assert_eq!(f.job().worker.unwrap().calls, 2);
    assert_eq!(f.job().worker.unwrap().late_calls, 0);
    let resumed = f.domain.eval("return jobs.find('flaky'):resume()").unwrap();
    assert_eq!(resumed, Message::Boolean(true));
    f.domain.frame(FRAME);
    f.settle(3);
    f.domain.frame(FRAME);
    let job = f.job();
    assert_eq!(job.worker.unwrap().calls, 4);
    assert_ne!(job.status, JobStatus::Errored);
    assert_eq!(f.log(), vec![1, 2, 3]);
}

#[test]
fn a_worker_kind_job_runs_input_entry_and_apply_in_its_vm() {
    let f = fixture();
    f.dispatch("start_worker", "nil");
    f.domain.frame(FRAME); // call 1: input 1, entry 2, apply
    f.settle(1);
    assert_eq!(f.log(), vec![2]);
    f.domain.frame(FRAME); // call 2: input nil, nothing more
    f.wait_idle();
    f.domain.frame(FRAME); // call 3: input 3, entry 6, apply
    f.settle(2);
    f.domain.frame(FRAME);
    assert_eq!(f.log(), vec![2, 6]);
    let job = f.job();
    assert_eq!(job.kind, "worker");
    assert_eq!(job.worker.unwrap().calls, 4);
    assert_eq!(job.worker.unwrap().late_calls, 0);
}

#[test]
fn a_name_is_unique_across_the_engine_and_worker_vms_at_the_call() {
    let f = fixture();
    f.domain
        .eval("jobs.register({ name = 'a', phase = 'main', executor = { kind = 'luau', run = function() end } })")
        .unwrap();
    let refused = text(&f.dispatch("named", "'a'"));
    assert_contains(
        &refused,
        "jobs.register: a job named 'a' is registered already",
    );
    assert_eq!(text(&f.dispatch("named", "'b'")), "registered");
    // The worker's name is taken at its call, before the engine has even drained.
    let engine = f
        .domain
        .eval("local ok, e = pcall(jobs.register, { name = 'b', phase = 'main', executor = { kind = 'luau', run = function() end } }) return tostring(e)")
        .unwrap();
    assert_contains(
        &text(&engine),
        "jobs.register: a job named 'b' is registered already",
    );
    // Descriptor checks raise with the engine's texts in a worker too.
    let bad = text(&f.dispatch(
        "try",
        "{ phase = 'main', executor = { kind = 'luau', run = 1 } }",
    ));
    assert_contains(
        &bad,
        "jobs.register: executor.run must be a function, got a number",
    );
    let names: Vec<_> = f.domain.jobs().into_iter().map(|j| j.name).collect();
    assert_eq!(names, vec![Some("a".to_owned()), Some("b".to_owned())]);
}

#[test]
fn a_kernel_job_is_refused_in_a_worker_vm_naming_why() {
    let f = fixture();
    f.domain.register_kernel("k", Ok).unwrap();
    let refused = text(&f.dispatch(
        "try",
        "{ phase = 'main', executor = { kind = 'kernel', kernel = 'k' } }",
    ));
    assert_contains(
        &refused,
        "jobs.register: executor.kind 'kernel' can't be registered from a worker VM: a kernel \
         job runs a host function and has no VM to stay in; register it from the engine VM",
    );
    let keyed = text(&f.dispatch("keyed", "nil"));
    assert_contains(
        &keyed,
        "jobs.register: executor.key can't be used from a worker VM",
    );
    assert!(f.domain.jobs().is_empty());
}

#[test]
fn a_job_that_cancels_itself_in_its_vm_is_called_no_more() {
    let f = fixture();
    f.dispatch("start", "{ name = 'c', cancel_at = 2 }");
    f.domain.frame(FRAME);
    f.settle(1);
    f.domain.frame(FRAME);
    f.wait_marks(2);
    // The cancel reaches the engine, and then the end of the call that made it, whose write
    // still applies.
    assert!(wait_until(Duration::from_secs(10), || {
        f.domain.pump();
        f.log.borrow().len() >= 2
    }));
    assert!(f.domain.jobs().is_empty());
    for _ in 0..3 {
        f.domain.frame(FRAME);
    }
    f.barrier();
    assert_eq!(f.marks.load(Ordering::SeqCst), 2);
    assert_eq!(f.log(), vec![1, 2]);
    let state = f.dispatch("state", "nil");
    assert_eq!(field(&state, "valid"), &Message::Boolean(false));
    assert_eq!(text(field(&state, "status")), "none");
    // Its name is free again.
    assert_eq!(text(&f.dispatch("named", "'c'")), "registered");
}

#[test]
fn cancel_from_another_item_of_the_vm_stops_the_calls() {
    let f = fixture();
    f.dispatch("start", "{ name = 'c' }");
    f.domain.frame(FRAME);
    f.wait_marks(1);
    assert_eq!(f.dispatch("cancel", "nil"), Message::Boolean(true));
    assert_eq!(f.dispatch("cancel", "nil"), Message::Boolean(false));
    for _ in 0..3 {
        f.domain.frame(FRAME);
    }
    f.barrier();
    assert!(f.domain.jobs().is_empty());
    assert_eq!(f.marks.load(Ordering::SeqCst), 1);
}

#[test]
fn cancel_from_the_engine_stops_the_calls_and_the_worker_handle_sees_it() {
    let f = fixture();
    f.dispatch("start", "{ name = 'c' }");
    f.domain.frame(FRAME);
    f.wait_marks(1);
    f.domain.eval("found = jobs.find('c')").unwrap();
    // The worker VM's handle drops the registration's reference; the engine's found handle
    // holds the job, so its calls go on.
    assert_eq!(f.dispatch("cancel", "nil"), Message::Boolean(true));
    assert_eq!(f.dispatch("cancel", "nil"), Message::Boolean(false));
    let state = f.dispatch("state", "nil");
    assert_eq!(field(&state, "valid"), &Message::Boolean(true));
    f.domain.frame(FRAME);
    f.wait_marks(2);
    // The engine's handle drops the last one: no later call, and the worker handle sees it.
    let cancelled = f.domain.eval("return found:cancel()").unwrap();
    assert_eq!(cancelled, Message::Boolean(true));
    for _ in 0..3 {
        f.domain.frame(FRAME);
    }
    f.barrier();
    assert_eq!(f.marks.load(Ordering::SeqCst), 2);
    assert!(f.domain.jobs().is_empty());
    let state = f.dispatch("state", "nil");
    assert_eq!(field(&state, "valid"), &Message::Boolean(false));
    assert_eq!(f.dispatch("cancel", "nil"), Message::Boolean(false));
    // Its name is free again.
    assert_eq!(text(&f.dispatch("named", "'c'")), "registered");
}

#[test]
fn a_found_handle_cancelled_on_the_engine_leaves_the_job_to_the_worker_handle() {
    let f = fixture();
    f.dispatch("start", "{ name = 'c' }");
    f.domain.frame(FRAME);
    f.wait_marks(1);
    let cancelled = f.domain.eval("return jobs.find('c'):cancel()").unwrap();
    assert_eq!(cancelled, Message::Boolean(true));
    f.domain.frame(FRAME);
    f.wait_marks(2);
    assert_eq!(f.domain.jobs().len(), 1);
    // The worker VM's handle holds the last reference.
    assert_eq!(f.dispatch("cancel", "nil"), Message::Boolean(true));
    for _ in 0..3 {
        f.domain.frame(FRAME);
    }
    f.barrier();
    assert_eq!(f.marks.load(Ordering::SeqCst), 2);
    assert!(f.domain.jobs().is_empty());
}

#[test]
fn pause_from_the_worker_vm_stops_the_calls_from_the_next_drain() {
    let f = fixture();
    f.dispatch("start", "{ name = 'p' }");
    f.domain.frame(FRAME);
    f.settle(1);
    assert_eq!(f.dispatch("pause", "nil"), Message::Boolean(true));
    assert!(f.job().paused);
    for _ in 0..3 {
        f.domain.frame(FRAME);
    }
    f.barrier();
    assert_eq!(f.marks.load(Ordering::SeqCst), 1);
    assert_eq!(f.job().worker.unwrap().calls, 1);
    f.domain.eval("jobs.find('p'):resume()").unwrap();
    f.domain.frame(FRAME);
    f.wait_marks(2);
}

#[test]
fn a_restart_ends_worker_registered_jobs_with_their_vm() {
    let mut f = fixture();
    f.dispatch("start", "{ name = 'c' }");
    f.domain.frame(FRAME);
    f.wait_marks(1);
    f.domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert!(f.domain.jobs().is_empty());
    for _ in 0..3 {
        f.domain.frame(FRAME);
    }
    f.barrier();
    assert_eq!(f.marks.load(Ordering::SeqCst), 1);
    assert_eq!(
        f.log(),
        Vec::<i64>::new(),
        "the old generation's write is never applied"
    );
    // The new generation's worker VM starts over: its module count begins at 1 again.
    f.dispatch("start", "{ name = 'c' }");
    f.domain.frame(FRAME);
    f.settle(2);
    assert_eq!(f.log(), vec![1]);
}

#[test]
fn a_job_whose_vm_is_replaced_after_a_panic_is_errored_naming_why() {
    let f = fixture();
    f.dispatch("start", "{ name = 'c' }");
    f.domain.frame(FRAME);
    f.wait_marks(1);
    // Requiring a module whose top level panics drops the only worker VM, and the job with it.
    let err = f
        .domain
        .eval("local ok, e = pcall(function() jobs.dispatch('./boom', 'x'):await() end) return tostring(e)")
        .unwrap();
    assert_contains(&text(&err), "host code panicked: raw host panic");
    // The worker posts the job's failure right after answering the item: pump until it lands.
    f.pump_until_errored();
    let job = f.job();
    assert_contains(
        job.last_error.as_deref().unwrap(),
        "the worker VM that registered it was replaced after host code panicked: raw host panic",
    );
    // Resumed, its next call finds no VM to run in, and it is errored again, saying so.
    f.domain.eval("jobs.find('c'):resume()").unwrap();
    f.domain.frame(FRAME);
    f.pump_until_errored();
    assert_contains(
        f.job().last_error.as_deref().unwrap(),
        "the worker VM that registered it is gone",
    );
    assert_eq!(f.marks.load(Ordering::SeqCst), 1);
}

#[test]
fn run_until_idle_runs_registered_jobs_until_the_last_one_cancels_itself() {
    let f = fixture();
    f.domain
        .exec("jobs.dispatch('./w', 'start', { name = 'c', cancel_at = 5 }):await()")
        .unwrap();
    let at = Instant::now();
    f.domain.run_until_idle().unwrap();
    let took = at.elapsed();
    assert_eq!(f.marks.load(Ordering::SeqCst), 5);
    assert_eq!(f.log(), vec![1, 2, 3, 4, 5]);
    assert!(f.domain.jobs().is_empty());
    // The behaviour under test: paced by the frame interval (16 ms), not a hot loop: five calls
    // span four intervals. A lower bound only, which a slow machine can't break.
    assert!(took >= Duration::from_millis(60), "took {took:?}");

    // An engine-VM job that cancels itself after 3 runs ends the run after 3 runs.
    f.domain
        .exec(
            "n = 0 local job job = jobs.register({ phase = 'main', executor = { kind = 'luau', \
             run = function() n += 1 if n == 3 then job:cancel() end end } })",
        )
        .unwrap();
    f.domain.run_until_idle().unwrap();
    assert_eq!(f.domain.eval("return n").unwrap(), Message::Number(3.0));
}

#[test]
fn a_paused_or_errored_job_does_not_keep_run_until_idle_busy() {
    let f = fixture();
    f.domain
        .exec(
            "n = 0 jobs.register({ phase = 'main', executor = { kind = 'luau', \
             run = function() n += 1 end } }):pause()",
        )
        .unwrap();
    let at = Instant::now();
    f.domain.run_until_idle().unwrap();
    // A hang guard, not a performance claim: a paused job that kept the run busy would run it
    // for ever; 10 s is far past what an idle run takes on any machine.
    assert!(at.elapsed() < Duration::from_secs(10));
    assert_eq!(f.domain.eval("return n").unwrap(), Message::Number(0.0));
    f.domain
        .exec("jobs.register({ phase = 'main', executor = { kind = 'luau', run = function() error('no') end } })")
        .unwrap();
    f.domain.run_until_idle().unwrap();
    let reports = f.domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_contains(&reports[0].message, "no");
}

#[test]
fn the_runner_ends_after_a_worker_registered_job_cancels_itself() {
    let tree = Tree::new(&[
        (
            "ticker.luau",
            r#"
local M = {}
function M.start(n)
    local count = 0
    local job
    job = jobs.register({ phase = "main", executor = { kind = "luau", run = function()
        count += 1
        print("tick " .. count)
        if count == n then job:cancel() end
    end } })
    return true
end
return M
"#,
        ),
        (
            "main.luau",
            "jobs.dispatch('./ticker', 'start', 4):await()\nprint('registered')\n",
        ),
    ]);
    let (code, stdout, stderr) =
        crate::support::skein_in(&tree.path(), &["run", "main.luau", "--workers", "1"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    // The script's line and the first tick may print in either order: they run on two
    // threads at once.
    let ticks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("tick")).collect();
    assert_eq!(
        ticks,
        ["tick 1", "tick 2", "tick 3", "tick 4"],
        "stderr: {stderr}"
    );
    assert_eq!(stdout.lines().filter(|l| *l == "registered").count(), 1);
}
