//! The frame joins its parallel work: a handler that awaits pool work is resumed in the same
//! `advance`, in its phase, once that work settles; the frame budget bounds the wait; what
//! still waits then goes on in a later frame and the report names it.

use std::time::{Duration, Instant};

use skein::lifecycle::{DomainState, Load};
use skein::refusal::SpecSetting;
use skein::{ContextSpec, DomainSpec, Error, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{serve_world, Tree, World};

const FRAME: Duration = Duration::from_millis(16);

/// A chunk asks the engine for the frame's targets, sums its entities against them, and
/// records the sum: one forwarded query and one recorded command per chunk.
const CHUNKS: &str = r#"
return {
    sum = function(chunk)
        local targets = world.get(0)
        local total = 0
        for i = chunk.first, chunk.last do total += i * targets end
        world.set(chunk.index, total)
        return total
    end,
    chain = function(chunk)
        -- three queries in a row, each answered in the frame
        local a = world.get(0)
        local b = world.get(0)
        local c = world.get(0)
        return a + b + c
    end,
    slow = function(seconds)
        local t = os.clock()
        while os.clock() - t < seconds do end
        return seconds
    end,
    fail = function() error("the chunk broke") end,
}
"#;

fn game(tree: &Tree, pool: &Pool, budget: Option<Duration>) -> ScriptDomain {
    let mut spec = DomainSpec::new("game")
        .plan(Plan::new().root(tree.path()))
        .context(ContextSpec::new("game").phases([
            Phase::Startup,
            Phase::Update,
            Phase::LateUpdate,
        ]))
        .unwrap();
    if let Some(budget) = budget {
        spec = spec.frame_budget(budget);
    }
    ScriptDomain::new(pool, spec).unwrap()
}

fn with_world(domain: &ScriptDomain, targets: f64) -> World {
    let world = World::default();
    world.borrow_mut().insert(0, Message::Number(targets));
    serve_world(domain, &world);
    world
}

fn eval(domain: &ScriptDomain, code: &str) -> Message {
    domain.eval(code).unwrap()
}

#[test]
fn a_handler_awaiting_parallel_for_resumes_in_the_same_advance_with_its_commands_applied() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(2);
    let domain = game(&tree, &pool, Some(Duration::from_secs(10)));
    let world = with_world(&domain, 2.0);
    domain
        .exec(
            r#"
            frames, total = 0, 0
            require("@skein/context").bind("game", {
                update = function()
                    local sums = jobs.parallelFor("./chunks", "sum", 100, nil, { chunks = 4 }):await()
                    frames += 1
                    total = sums[1] + sums[2] + sums[3] + sums[4]
                end,
                lateUpdate = function() late = frames end,
            })
            "#,
        )
        .unwrap();
    for frame in 1..=20 {
        let report = domain.advance(FRAME).unwrap();
        assert_eq!(report.still_waiting().count(), 0, "{report:?}");
        // The handler resumed in this advance, before lateUpdate ran.
        assert_eq!(
            eval(&domain, "return frames"),
            Message::Number(frame as f64)
        );
        assert_eq!(eval(&domain, "return late"), Message::Number(frame as f64));
        assert_eq!(eval(&domain, "return total"), Message::Number(2.0 * 5050.0));
        // Each chunk's query was answered and its command applied in this frame.
        assert_eq!(report.frame.forwarded_calls, 4);
        assert_eq!(report.frame.commands_applied, 4);
        let world = world.borrow();
        let applied: f64 = (1..=4)
            .map(|i| match world.get(&i) {
                Some(Message::Number(n)) => *n,
                other => panic!("chunk {i} recorded {other:?}"),
            })
            .sum();
        assert_eq!(applied, 2.0 * 5050.0);
    }
    assert!(domain.take_reports().is_empty());
}

#[test]
fn a_chain_of_forwarded_queries_and_awaits_completes_inside_one_frame() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(2);
    let domain = game(&tree, &pool, Some(Duration::from_secs(10)));
    with_world(&domain, 5.0);
    domain
        .exec(
            r#"
            require("@skein/context").bind("game", {
                update = function()
                    -- two joined waits in a row, and a task the handler spawned
                    local a = jobs.parallelFor("./chunks", "chain", 4, nil, { chunks = 2 }):await()
                    local b = jobs.dispatch("./chunks", "chain", { first = 1, last = 1 }):await()
                    task.spawn(function()
                        spawned = jobs.map("./chunks", "slow", { 0, 0, 0 }):await()
                    end)
                    result = a[1] + a[2] + b
                end,
            })
            "#,
        )
        .unwrap();
    let report = domain.advance(FRAME).unwrap();
    assert_eq!(report.still_waiting().count(), 0, "{report:?}");
    assert_eq!(eval(&domain, "return result"), Message::Number(45.0));
    assert_eq!(eval(&domain, "return #spawned"), Message::Number(3.0));
    // Nine queries: three per chunk, three chunks' worth (two chunks, one dispatch).
    assert_eq!(report.frame.forwarded_calls, 9);
}

#[test]
fn past_the_budget_a_handler_goes_on_in_a_later_frame_and_the_report_names_it() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(1);
    let domain = game(&tree, &pool, None);
    assert_eq!(
        DomainSpec::new("x").get_frame_budget(),
        DomainSpec::DEFAULT_FRAME_BUDGET
    );
    domain
        .exec(
            r#"
            require("@skein/context").bind("game", {
                update = function()
                    if started then return end
                    started = true
                    done = jobs.dispatch("./chunks", "slow", 1.5):await()
                end,
            })
            "#,
        )
        .unwrap();
    let began = Instant::now();
    let report = domain
        .advance_within(FRAME, Duration::from_millis(20))
        .unwrap();
    let waiting: Vec<_> = report.still_waiting().collect();
    assert_eq!(waiting.len(), 1, "{report:?}");
    assert_eq!(waiting[0].source, "context 'game' update handler");
    assert!(
        waiting[0].waited >= Duration::from_millis(20),
        "{waiting:?}"
    );
    assert!(
        began.elapsed() < Duration::from_millis(1200),
        "it waited past its budget"
    );
    assert_eq!(eval(&domain, "return done"), Message::Nil);
    // A later frame's drain resumes it; the frames in between wait for nothing of it.
    let mut frames = 0;
    while eval(&domain, "return done") == Message::Nil {
        let report = domain.advance(FRAME).unwrap();
        assert_eq!(report.still_waiting().count(), 0);
        frames += 1;
        assert!(frames < 10_000, "never resumed");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(eval(&domain, "return done"), Message::Number(1.5));
    assert!(domain.take_reports().is_empty());
}

#[test]
fn a_zero_budget_never_waits_and_the_spec_refuses_one_past_the_bound() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(1);
    let domain = game(&tree, &pool, Some(Duration::ZERO));
    domain
        .exec(
            r#"require("@skein/context").bind("game", {
                update = function() done = jobs.dispatch("./chunks", "slow", 0.05):await() end })"#,
        )
        .unwrap();
    let report = domain.advance(FRAME).unwrap();
    assert_eq!(report.still_waiting().count(), 1);
    assert_eq!(eval(&domain, "return done"), Message::Nil);

    // At the bound and one past it.
    let at = DomainSpec::new("a").frame_budget(Duration::from_secs(60));
    assert!(ScriptDomain::new(&pool, at).is_ok());
    let past = DomainSpec::new("b").frame_budget(Duration::from_secs(60) + Duration::from_nanos(1));
    let err = ScriptDomain::new(&pool, past).err().unwrap();
    assert!(matches!(
        err,
        Error::Spec {
            setting: SpecSetting::FrameBudget,
            ..
        }
    ));
    assert_eq!(err.to_string(), "frame budget: must be at most 60 s");
}

#[test]
fn a_handler_awaiting_work_that_fails_fails_itself_and_is_reported_once() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(2);
    let domain = game(&tree, &pool, Some(Duration::from_secs(10)));
    domain
        .exec(
            r#"require("@skein/context").bind("game", {
                update = function()
                    if ran then return end
                    ran = true
                    jobs.parallelFor("./chunks", "fail", 4, nil, { chunks = 2, name = "broken" }):await()
                    reached = true
                end })"#,
        )
        .unwrap();
    let report = domain.advance(FRAME).unwrap();
    assert_eq!(report.still_waiting().count(), 0);
    assert_eq!(eval(&domain, "return reached"), Message::Nil);
    // The failure came after the handler's first yield: it is the handler's report, once,
    // in this advance's reports and in take_reports.
    assert_eq!(report.reports.len(), 1, "{:?}", report.reports);
    assert_eq!(report.reports[0].source, "context 'game' update handler");
    let message = &report.reports[0].message;
    assert!(
        message.starts_with("job 'broken' failed: chunk "),
        "{message}"
    );
    assert!(message.contains("the chunk broke"), "{message}");
    let taken = domain.take_reports();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(&taken[0].message, message);
    // The next frame (whose handler starts nothing) reports nothing again.
    let report = domain.advance(FRAME).unwrap();
    assert!(report.reports.is_empty(), "{:?}", report.reports);
}

/// A domain whose update handler starts a 10 s job and awaits it, with a frame budget of 5 ms:
/// after the first advance the handler still waits on the pool.
fn waiting_domain(tree: &Tree, pool: &Pool) -> ScriptDomain {
    let domain = game(tree, pool, Some(Duration::from_millis(5)));
    domain
        .exec(
            r#"
            require("@skein/context").bind("game", {
                startup = function() starts = (starts or 0) + 1 end,
                update = function()
                    if waiting then return end
                    waiting = true
                    jobs.dispatch("./chunks", "slow", 10):await()
                    resumed = true
                end,
            })
            "#,
        )
        .unwrap();
    let report = domain.advance(FRAME).unwrap();
    assert_eq!(report.still_waiting().count(), 1, "{report:?}");
    domain
}

#[test]
fn stop_restart_and_reload_end_a_handler_still_waiting_on_its_frames_work() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(1);

    // Stop: the job is interrupted, nothing hangs, nothing resumes.
    let mut domain = waiting_domain(&tree, &pool);
    let began = Instant::now();
    domain.stop();
    assert_eq!(domain.state(), DomainState::Stopped);
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(domain.advance(FRAME).is_err());

    // Restart: the new generation starts up on its own and the old handler never resumes.
    let mut domain = waiting_domain(&tree, &pool);
    assert_eq!(eval(&domain, "return starts"), Message::Number(1.0));
    domain
        .restart(Load::source(
            "boot",
            r#"require("@skein/context").bind("game", {
                startup = function() starts = (starts or 0) + 1 end,
                update = function() updated = true end })"#,
        ))
        .unwrap();
    assert_eq!(domain.generation().get(), 2);
    assert_eq!(eval(&domain, "return starts"), Message::Number(1.0));
    let report = domain.advance(FRAME).unwrap();
    assert_eq!(report.still_waiting().count(), 0);
    assert_eq!(eval(&domain, "return updated"), Message::Boolean(true));
    assert_eq!(eval(&domain, "return resumed"), Message::Nil);
    // The pool is free for new work: the old job was interrupted.
    let answer = domain
        .eval(r#"return jobs.dispatch("./chunks", "slow", 0):await()"#)
        .unwrap();
    assert_eq!(answer, Message::Number(0.0));

    // Reload: the same, through a reload.
    let mut domain = waiting_domain(&tree, &pool);
    domain
        .reload(Load::source(
            "boot",
            r#"require("@skein/context").bind("game", { update = function() updated = true end })"#,
        ))
        .unwrap();
    let report = domain.advance(FRAME).unwrap();
    assert_eq!(report.still_waiting().count(), 0);
    assert_eq!(eval(&domain, "return updated"), Message::Boolean(true));
    assert_eq!(eval(&domain, "return resumed"), Message::Nil);
}

#[test]
fn startup_runs_on_the_first_frame_of_a_generation_once() {
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .context(ContextSpec::new("main").phases([Phase::Startup]))
        .unwrap();
    let mut domain = ScriptDomain::new(&pool, spec).unwrap();
    let boot = r#"require("@skein/context").bind("main", {
        startup = function() starts = (starts or 0) + 1 end })"#;
    domain.exec(boot).unwrap();
    assert_eq!(eval(&domain, "return starts"), Message::Nil);
    domain.frame(FRAME);
    assert_eq!(eval(&domain, "return starts"), Message::Number(1.0));
    domain.frame(FRAME);
    domain.advance(FRAME).unwrap();
    assert_eq!(eval(&domain, "return starts"), Message::Number(1.0));
    // A host that ran startup itself before its first frame is not started up again.
    let spec = DomainSpec::new("game")
        .context(ContextSpec::new("main").phases([Phase::Startup]))
        .unwrap();
    let own = ScriptDomain::new(&pool, spec).unwrap();
    own.exec(boot).unwrap();
    own.run_phase(Phase::Startup, &[]).unwrap();
    own.advance(FRAME).unwrap();
    assert_eq!(own.eval("return starts").unwrap(), Message::Number(1.0));
    // After a restart of a running domain, once more, at once.
    domain.restart(Load::source("boot", boot)).unwrap();
    domain.advance(FRAME).unwrap();
    assert_eq!(eval(&domain, "return starts"), Message::Number(1.0));
}

/// Pumps until the global `name` is set; answers what the pumps settled, answered, applied and
/// resumed, summed.
fn pumped_until_set(domain: &ScriptDomain, name: &str) -> (u64, u64, u64, u64) {
    let mut seen = (0, 0, 0, 0);
    let began = Instant::now();
    while eval(domain, &format!("return {name}")) == Message::Nil {
        let r = domain.pump();
        seen.0 += r.settled;
        seen.1 += r.answered;
        seen.2 += r.applied;
        seen.3 += r.resumed;
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{name} never set"
        );
        std::thread::yield_now();
    }
    seen
}

#[test]
fn pump_answers_what_it_settled_answered_applied_and_resumed() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(1);
    let domain = game(&tree, &pool, None);
    let world = with_world(&domain, 3.0);
    assert!(!domain.pump().did_anything());
    domain
        .exec(
            r#"task.spawn(function()
                result = jobs.parallelFor("./chunks", "sum", 2, nil, { chunks = 1 }):await()
            end)"#,
        )
        .unwrap();
    assert_eq!(pumped_until_set(&domain, "result"), (1, 1, 1, 1));
    assert_eq!(world.borrow().get(&1), Some(&Message::Number(9.0)));
    assert!(!domain.pump().did_anything());

    // A job that recorded a command settles with it: counted as settled too.
    domain
        .exec(r#"task.spawn(function() single = jobs.dispatch("./chunks", "sum", { index = 5, first = 1, last = 1 }):await() end)"#)
        .unwrap();
    assert_eq!(pumped_until_set(&domain, "single"), (1, 1, 1, 1));
    assert_eq!(eval(&domain, "return single"), Message::Number(3.0));
}

#[test]
fn a_frame_answering_a_query_for_a_host_dispatched_job_does_not_wait_for_it() {
    // The host waits on its own promise: a frame serving that job's query has no task to
    // resume, and goes on without waiting for what the job does next. The job computes 20 ms
    // after its query, so a frame that waited for a follow-up would take its whole
    // `FOLLOW_UP_WAIT` (2 ms) every time; the quickest of 30 frames shows whether any waited.
    let tree = Tree::new(&[(
        "asks.luau",
        r#"return { run = function()
            local n = world.get(0)
            local t = os.clock()
            while os.clock() - t < 0.02 do end
            return n
        end }"#,
    )]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    with_world(&domain, 7.0);
    let mut quickest = Duration::MAX;
    for _ in 0..30 {
        let promise = domain.dispatch("./asks", "run", Message::Nil).unwrap();
        let began = Instant::now();
        loop {
            let frame_began = Instant::now();
            let report = domain.frame(Duration::from_millis(1));
            if report.forwarded_calls > 0 {
                quickest = quickest.min(frame_began.elapsed());
                break;
            }
            assert!(began.elapsed() < Duration::from_secs(10), "never asked");
        }
        assert_eq!(promise.wait().unwrap(), Message::Number(7.0));
    }
    assert!(
        quickest < skein::frame::FrameReport::FOLLOW_UP_WAIT,
        "every frame that answered waited: the quickest took {quickest:?}"
    );
}
#[test]
fn a_frame_does_not_wait_for_a_registered_items_that_spans_frames() {
    // An item that waits on frames cannot settle within the frame that started it: the frame
    // goes on without it, and it applies in the frame after it lands.
    let tree = Tree::new(&[(
        "frames.luau",
        "return { next = function() task.waitFrames(1) return 1 end }",
    )]);
    let pool = Pool::new(1);
    let domain = game(&tree, &pool, Some(Duration::from_secs(10)));
    domain
        .exec(
            r#"applied = 0
            jobs.register({ phase = "main", executor = { kind = "worker", module = "./frames",
                entry = "next", input = function() return 0 end,
                apply = function(r) applied += r end } })"#,
        )
        .unwrap();
    // With a 10 s budget, a frame that waited for its item would take 10 s; none may take 1 s.
    let began = Instant::now();
    while eval(&domain, "return applied") != Message::Number(5.0) {
        let frame = Instant::now();
        domain.frame(FRAME);
        assert!(
            frame.elapsed() < Duration::from_secs(1),
            "a frame waited for its item: {:?}",
            frame.elapsed()
        );
        assert!(began.elapsed() < Duration::from_secs(30), "never applied 5");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(domain.take_reports().is_empty());
}

#[test]
fn an_interrupt_from_another_thread_ends_a_join_in_progress() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(1);
    let mut domain = game(&tree, &pool, Some(Duration::from_secs(30)));
    domain
        .exec(
            r#"require("@skein/context").bind("game", {
                update = function() jobs.dispatch("./chunks", "slow", 20):await() end })"#,
        )
        .unwrap();
    let handle = domain.interrupt_handle();
    let interrupter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        handle.interrupt();
    });
    let began = Instant::now();
    let _ = domain.advance(FRAME);
    // The frame gave up its 30 s join at the interrupt; the 20 s job was stopped.
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    interrupter.join().unwrap();
    domain.stop();
    assert_eq!(domain.state(), DomainState::Stopped);
}

#[test]
fn a_join_resumes_only_its_handlers_tasks_and_others_keep_their_place_in_the_frame() {
    let tree = Tree::new(&[("chunks.luau", CHUNKS)]);
    let pool = Pool::new(2);
    let domain = game(&tree, &pool, Some(Duration::from_secs(10)));
    domain
        .exec(
            r#"
            order = {}
            -- A script's own task, waiting on work that settles while update is joined.
            task.spawn(function()
                jobs.dispatch("./chunks", "slow", 0.02):await()
                table.insert(order, "script task")
            end)
            require("@skein/context").bind("game", {
                update = function()
                    if joined then return end
                    joined = true
                    table.insert(order, "update")
                    jobs.dispatch("./chunks", "slow", 0.05):await()
                    table.insert(order, "update resumed")
                end,
                lateUpdate = function() table.insert(order, "lateUpdate") end,
            })
            "#,
        )
        .unwrap();
    domain.advance(FRAME).unwrap();
    assert_eq!(
        eval(&domain, "return table.concat(order, ', ')"),
        Message::String("update, update resumed, lateUpdate, script task".into())
    );
}

#[test]
fn a_zero_timeout_wait_still_moves_the_script_on() {
    let tree = Tree::new(&[("main.luau", "task.wait(0.01)")]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let script = domain.run_file(tree.path().join("main.luau"), &[]).unwrap();
    let began = Instant::now();
    loop {
        match script.wait_timeout(&domain, Duration::ZERO).unwrap() {
            skein::ScriptStatus::Returned => break,
            _ => assert!(began.elapsed() < Duration::from_secs(10), "never ended"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // At the bound and past it: a long timeout waits for the end, a short one answers Running.
    let script = domain.run_file(tree.path().join("main.luau"), &[]).unwrap();
    assert_eq!(
        script
            .wait_timeout(&domain, Duration::from_micros(1))
            .unwrap(),
        skein::ScriptStatus::Running
    );
    assert_eq!(
        script.wait_timeout(&domain, Duration::MAX).unwrap(),
        skein::ScriptStatus::Returned
    );
}
