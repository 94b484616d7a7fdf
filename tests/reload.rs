//! `restart(load)` and `reload(load)`: a restart ends the old generation and then runs the load
//! (a failing load leaves the domain failed in the new generation); a reload builds the next
//! generation beside the running one and swaps only when the load succeeds, leaving the running
//! generation untouched and the candidate discarded whole when it fails.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::event::EventTarget;
use skein::lifecycle::{DomainState, Load, LoadStage};
use skein::refusal::Halt;
use skein::{ContextSpec, DomainSpec, Error, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, string, wait_until, Tree};

const MODULE: &str = r#"
local M = {}
local count = 0
function M.bump()
    count += 1
    return count
end
-- Pool work that takes a while: a load that awaits it must be pumped until the timer fires.
function M.nap(s)
    task.wait(s) -- the behaviour under test: work still running when the load awaits it
    return "awake"
end
-- Parks on the shared queue `name` until the test pushes to it.
function M.napOn(name)
    jobs.shared.queue(name):pop()
    return "awake"
end
-- Records a command, says it started on the shared queue "started", and parks on "hold",
-- which nothing pushes to: it wakes only when its generation's store ends. Its command
-- applies only if it ever returns in a live generation.
function M.lateLog(a)
    local hold = jobs.shared.queue("hold")
    log.write(a.text)
    jobs.shared.queue("started"):push(true)
    hold:pop()
    return a.text
end
return M
"#;

/// What the host saw: `log.write` lines, and the resources released through `res.take`.
#[derive(Clone, Default)]
struct Host {
    log: Rc<RefCell<Vec<String>>>,
    released: Rc<RefCell<Vec<String>>>,
}

impl Host {
    fn lines(&self) -> Vec<String> {
        self.log.borrow().clone()
    }

    fn released(&self) -> Vec<String> {
        self.released.borrow().clone()
    }
}

fn text_of(first: &Message) -> String {
    match first {
        Message::String(s) => String::from_utf8_lossy(s).into_owned(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn spec(tree: &Tree, bound: Duration) -> DomainSpec {
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "worker.spawn",
    )
    .unwrap()]));
    DomainSpec::new("ui")
        .plan(Plan::new().root(tree.path()))
        .grant(grant)
        .load_bound(bound)
        .context(ContextSpec::new("main").phases([Phase::Startup, Phase::Update, Phase::Shutdown]))
        .unwrap()
}

/// A domain with `log.write(text)` and `res.take(kind)` (a resource owned for the running
/// generation, released into `host.released`).
fn domain_with_bound(pool: &Pool, tree: &Tree, bound: Duration) -> (ScriptDomain, Host) {
    let domain = ScriptDomain::new(pool, spec(tree, bound)).unwrap();
    let host = Host::default();
    let log = host.log.clone();
    domain
        .register_command("log.write", move |text: Message| {
            log.borrow_mut().push(text_of(&text));
            Ok(())
        })
        .unwrap();
    let owner = domain.resource_owner();
    let released = host.released.clone();
    domain
        .register_command("res.take", move |kind: Message| {
            let kind = text_of(&kind);
            let released = released.clone();
            let name = kind.clone();
            owner.own(kind, move || released.borrow_mut().push(name));
            Ok(())
        })
        .unwrap();
    (domain, host)
}

fn domain(pool: &Pool, tree: &Tree) -> (ScriptDomain, Host) {
    domain_with_bound(pool, tree, Duration::from_secs(10))
}

fn tree() -> Tree {
    Tree::new(&[("m.luau", MODULE)])
}

fn eval(domain: &ScriptDomain, source: &str) -> Message {
    domain.eval(source).unwrap()
}

// ---- restart(load) ----

#[test]
fn a_restart_runs_its_load_in_the_new_generation_and_its_bindings_run_next_phase() {
    let pool = Pool::new(1);
    let tree = tree();
    let (mut domain, _) = domain(&pool, &tree);
    domain.exec("old = 1").unwrap();
    let load = Load::source(
        "level 2",
        r#"
        fresh = jobs.dispatch("./m", "bump"):await()
        updates = 0
        require("@skein/context").bind("main", { update = function() updates += 1 end })
        "#,
    );
    assert_eq!(domain.restart(load).unwrap().get(), 2);
    assert_eq!(domain.state(), DomainState::Ready);
    assert_eq!(eval(&domain, "return old"), Message::Nil);
    assert_eq!(eval(&domain, "return fresh"), Message::Number(1.0));
    let report = domain.run_phase(Phase::Update, &[]).unwrap();
    assert_eq!(report.calls, 1);
    assert_eq!(eval(&domain, "return updates"), Message::Number(1.0));
}

#[test]
fn a_restart_of_a_file_load_passes_its_arguments() {
    let pool = Pool::new(1);
    let tree = Tree::new(&[("m.luau", MODULE), ("main.luau", "first, second = ...")]);
    let (mut domain, _) = domain(&pool, &tree);
    domain
        .restart(Load::file_with_args(
            tree.path().join("main.luau"),
            ["a", "b"],
        ))
        .unwrap();
    assert_eq!(eval(&domain, "return first .. second"), string("ab"));
    let err = domain
        .restart(Load::file(tree.path().join("missing.luau")))
        .unwrap_err();
    assert_contains(&err.to_string(), "missing.luau");
    assert_eq!(domain.state(), DomainState::Failed);
}

const STARTUP_LOAD: &str = r#"
    started = (started or 0) + 1
    require("@skein/context").bind("main", { startup = function() log.write("startup") end })
"#;

#[test]
fn a_running_domain_runs_startup_after_a_restart_and_a_ready_one_at_its_first_frame() {
    let pool = Pool::new(1);
    let tree = tree();
    let (mut domain, host) = domain(&pool, &tree);
    assert_eq!(domain.state(), DomainState::Ready);
    domain.restart(Load::source("boot", STARTUP_LOAD)).unwrap();
    assert_eq!(domain.state(), DomainState::Ready);
    assert!(host.lines().is_empty(), "{:?}", host.lines());

    // The generation's first frame starts it up, once.
    let report = domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(report.phases[0].phase, Phase::Startup);
    assert_eq!(report.phases[0].calls, 1);
    assert_eq!(domain.state(), DomainState::Running);
    assert_eq!(host.lines(), ["startup"]);
    let report = domain.advance(Duration::from_millis(1)).unwrap();
    assert!(report.phases.iter().all(|p| p.phase != Phase::Startup));
    assert_eq!(host.lines(), ["startup"]);

    // A restart of a running domain starts the new generation at once, and its first frame
    // does not start it again.
    domain.restart(Load::source("boot", STARTUP_LOAD)).unwrap();
    assert_eq!(domain.state(), DomainState::Running);
    assert_eq!(host.lines(), ["startup", "startup"]);
    assert_eq!(eval(&domain, "return started"), Message::Number(1.0));
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(host.lines(), ["startup", "startup"]);
}

#[test]
fn a_restart_whose_load_fails_leaves_the_domain_failed_in_the_new_generation() {
    let pool = Pool::new(1);
    let tree = tree();
    let (mut domain, _) = domain(&pool, &tree);
    domain.exec("old = 1").unwrap();

    let err = domain
        .restart(Load::source("broken", "x = = 1"))
        .unwrap_err();
    assert!(matches!(err, Error::Script(_)), "{err:?}");
    assert_contains(&err.to_string(), "broken:1: Expected identifier");
    assert_eq!(domain.state(), DomainState::Failed);
    assert_eq!(domain.generation().get(), 2);
    assert_eq!(eval(&domain, "return old"), Message::Nil);

    let err = domain
        .restart(Load::source("raises", "half = true error('no level data')"))
        .unwrap_err();
    assert_contains(&err.to_string(), "script raises failed");
    assert_contains(&err.to_string(), "no level data");
    assert_eq!(domain.state(), DomainState::Failed);
    assert_eq!(domain.generation().get(), 3);
    let reports = domain.take_reports();
    assert!(
        reports
            .iter()
            .filter(|r| r.source == "restart")
            .any(|r| r.message.contains("no level data")),
        "{reports:?}"
    );

    // A later good load recovers.
    domain.restart(Load::source("good", "ok = true")).unwrap();
    assert_eq!(domain.state(), DomainState::Ready);
    assert_eq!(domain.generation().get(), 4);
    assert_eq!(eval(&domain, "return ok"), Message::Boolean(true));
}

// ---- reload(load): success ----

#[test]
fn a_reload_swaps_runs_the_old_shutdown_once_then_the_new_startup() {
    let pool = Pool::new(1);
    let tree = tree();
    let (mut domain, host) = domain(&pool, &tree);
    domain
        .exec(
            r#"
            theme = "dark"
            require("@skein/context").bind("main", { shutdown = function() log.write("old shutdown") end })
            require("@skein/events").on("ping", function() log.write("old ping") end)
            res.take("old texture")
            "#,
        )
        .unwrap();
    domain.advance(Duration::from_millis(1)).unwrap();
    // Two raw events of the running generation wait: the swap discards them, as a restart would.
    let mailbox = domain.mailbox();
    mailbox.post(EventTarget::All, Message::Integer(1)).unwrap();
    mailbox.post(EventTarget::All, Message::Integer(2)).unwrap();
    let stale = domain.stale_events();

    let load = Load::source(
        "ui v2",
        r#"
        theme = theme or "light"
        res.take("new texture")
        local events = require("@skein/events")
        events.on("hello", function(v) hello = v end)
        events.emit("hello", 7)
        require("@skein/context").bind("main", {
            startup = function() log.write("new startup") end,
            shutdown = function() log.write("new shutdown") end,
        })
        "#,
    );
    assert_eq!(domain.reload(load).unwrap().get(), 2);
    assert_eq!(domain.generation().get(), 2);
    assert_eq!(domain.state(), DomainState::Running);
    assert_eq!(host.lines(), ["old shutdown", "new startup"]);
    assert_eq!(eval(&domain, "return theme"), string("light"));
    assert_eq!(domain.stale_events(), stale + 2);
    // The old generation's resource was released at the swap; the new one's is held.
    assert_eq!(host.released(), ["old texture"]);
    let kinds: Vec<String> = domain
        .owned_resources()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(kinds, ["new texture"]);
    // What the load emitted waited for the new generation and reaches its handler.
    let report = domain.drain_events();
    assert_eq!((report.delivered, report.unhandled), (1, 0));
    assert_eq!(eval(&domain, "return hello"), Message::Number(7.0));
    // The old generation's named handlers went with it.
    domain.mailbox().post_named("ping", Message::Nil).unwrap();
    let report = domain.drain_events();
    assert_eq!((report.delivered, report.unhandled), (0, 1));
    assert_eq!(host.lines(), ["old shutdown", "new startup"]);

    // A ready domain reloads to ready and runs no startup.
    let mut ready = self::domain(&pool, &tree).0;
    ready.reload(Load::source("v2", "loaded = true")).unwrap();
    assert_eq!(ready.state(), DomainState::Ready);
    assert_eq!(eval(&ready, "return loaded"), Message::Boolean(true));
}

#[test]
fn a_reload_whose_load_awaits_pool_work_is_pumped_until_it_ends() {
    let pool = Pool::new(2);
    let tree = tree();
    let (mut domain, _) = domain(&pool, &tree);
    domain.exec("before = true").unwrap();
    let load = Load::source(
        "v2",
        r#"
        first = jobs.dispatch("./m", "bump"):await()
        napped = jobs.dispatch("./m", "nap", 0.05):await()
        "#,
    );
    domain.reload(load).unwrap();
    assert_eq!(eval(&domain, "return first"), Message::Number(1.0));
    assert_eq!(eval(&domain, "return napped"), string("awake"));
    assert_eq!(eval(&domain, "return before"), Message::Nil);
}

// ---- reload(load): failure ----

/// The running generation: globals, a context handler, a named-event handler, a worker that
/// doubles, a resource, and pool work still in flight (settling into `napped`).
const OLD: &str = r#"
    theme = "dark"
    updates = 0
    require("@skein/context").bind("main", { update = function() updates += 1 end })
    require("@skein/events").on("ping", function(v) pinged = v end)
    doubler = require("@skein/worker").spawn {
        name = "old doubler",
        source = "return function(n) return n * 2 end",
    }
    res.take("old resource")
    local nap = jobs.dispatch("./m", "napOn", "wake")
    task.spawn(function() napped = nap:await() end)
"#;

/// What a candidate does before it fails: everything that must be undone.
const CANDIDATE: &str = r#"
    theme = "candidate"
    require("@skein/context").bind("main", { update = function() log.write("candidate update") end })
    require("@skein/events").on("ping", function() log.write("candidate ping") end)
    require("@skein/worker").spawn {
        name = "candidate worker",
        source = "return function(n) return n end",
    }
    res.take("candidate resource")
    jobs.dispatch("./m", "lateLog", { text = "candidate job" })
    -- The job has started on a worker, in a VM of the candidate's, and parked.
    jobs.shared.queue("started"):pop()
"#;

/// The worker VMs the pool's threads hold now.
fn vms_held(pool: &Pool) -> usize {
    pool.stats().iter().map(|s| s.vms_held).sum()
}

/// Checks that the running generation is as `OLD` left it, and that nothing of the candidate
/// lingers.
#[track_caller]
fn assert_old_generation_intact(domain: &ScriptDomain, host: &Host, pool: &Pool) {
    assert_eq!(domain.generation().get(), 1);
    assert_eq!(domain.state(), DomainState::Running);
    assert_eq!(eval(domain, "return theme"), string("dark"));
    // The old generation's pool work is still parked, until the test wakes it.
    assert_eq!(eval(domain, "return napped"), Message::Nil);
    // Its context handler runs in the next advance; the candidate's never does.
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(eval(domain, "return updates"), Message::Number(2.0));
    // Its named-event handler still gets events.
    domain
        .mailbox()
        .post_named("ping", Message::Integer(5))
        .unwrap();
    assert_eq!(domain.drain_events().delivered, 1);
    assert_eq!(eval(domain, "return pinged"), Message::Number(5.0));
    // Its worker still answers.
    assert_eq!(
        eval(domain, "doubler:send(21) return doubler:receive(5)"),
        Message::Number(42.0)
    );
    // Its resource is held; the candidate's was released.
    let kinds: Vec<String> = domain
        .owned_resources()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(kinds, ["old resource"]);
    assert_eq!(host.released(), ["candidate resource"]);
    // The candidate's worker thread is gone; the old one lives.
    assert_eq!(domain.live_actors().get(), 1);
    // Its pending pool work settles; the candidate's job never applies its command here.
    let wake = domain.shared().queue("wake", 4).unwrap();
    wake.push(Message::Boolean(true)).unwrap();
    let settled = wait_until(Duration::from_secs(10), || {
        domain.frame(Duration::from_millis(16));
        domain.eval("return napped").unwrap() == string("awake")
    });
    assert!(settled, "the old generation's pool work never settled");
    // The candidate job was parked on its generation's queue when the discard ended that
    // store, which woke its worker: the worker drops the candidate's VM (the one left is the
    // old generation's, which ran its nap), ending the job with its command unapplied. A
    // frame then drains whatever it sent before it went.
    assert!(
        wait_until(Duration::from_secs(10), || vms_held(pool) == 1),
        "the candidate's worker VM was never dropped: {:?}",
        pool.stats()
    );
    domain.frame(Duration::from_millis(16));
    let lines = host.lines();
    assert!(
        lines.iter().all(|l| !l.starts_with("candidate")),
        "{lines:?}"
    );
}

/// A running domain with `OLD` loaded, one advance done.
fn running_old(pool: &Pool, tree: &Tree, bound: Duration) -> (ScriptDomain, Host) {
    let (domain, host) = domain_with_bound(pool, tree, bound);
    let _ = domain.shared().queue("wake", 4).unwrap();
    domain.exec(OLD).unwrap();
    domain.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(eval(&domain, "return updates"), Message::Number(1.0));
    assert_eq!(domain.live_actors().get(), 1);
    (domain, host)
}

#[track_caller]
fn reload_failure(err: Error) -> (LoadStage, String) {
    let text = err.to_string();
    match err {
        Error::ReloadFailed { stage, message } => {
            assert_eq!(
                text,
                format!("reload: the new generation failed to {stage}, the running one is kept: {message}")
            );
            (stage, message)
        }
        other => panic!("expected ReloadFailed, got {other:?}"),
    }
}

#[test]
fn a_reload_or_restart_whose_load_is_bytecode_is_refused_at_compile_and_nothing_of_it_runs() {
    let pool = Pool::new(2);
    let tree = tree();
    let (mut domain, _host) = running_old(&pool, &tree, Duration::from_secs(10));
    // Hand-made bytecode (it ended the process inside Luau's loader): refused as not source.
    let bytecode = "\u{6}\u{3}\u{1}\0\0\0\0\0\0\0";
    let err = domain.reload(Load::source("ui v2", bytecode)).unwrap_err();
    let (stage, message) = reload_failure(err);
    assert_eq!(stage, LoadStage::Compile);
    assert_eq!(
        message,
        "'ui v2' is not Luau source text: it starts with byte 0x06, which marks precompiled \
         bytecode; Skein loads only source it compiles itself"
    );
    assert_eq!(domain.generation().get(), 1);
    assert_eq!(eval(&domain, "return theme"), string("dark"));
    // A restart is destructive, but its load is refused the same way and never loaded.
    let err = domain
        .restart(Load::source("ui v3", bytecode))
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "'ui v3' is not Luau source text: it starts with byte 0x06",
    );
}

#[test]
fn a_reload_that_does_not_compile_keeps_the_running_generation() {
    let pool = Pool::new(2);
    let tree = tree();
    let (mut domain, host) = running_old(&pool, &tree, Duration::from_secs(10));
    let err = domain
        .reload(Load::source("ui v2", "theme = "))
        .unwrap_err();
    let (stage, message) = reload_failure(err);
    assert_eq!(stage, LoadStage::Compile);
    assert_contains(
        &message,
        "ui v2:1: Expected identifier when parsing expression",
    );
    let reports = domain.take_reports();
    assert!(
        reports
            .iter()
            .any(|r| r.source == "reload" && r.message.contains("failed to compile")),
        "{reports:?}"
    );
    // Nothing of a candidate ran, so none of its resources existed: check the old side only.
    assert_eq!(domain.generation().get(), 1);
    assert_eq!(eval(&domain, "return theme"), string("dark"));
    assert_eq!(domain.owned_resources().len(), 1);
    assert!(host.released().is_empty());
    // The failed candidate used number 2: the next generation is 3.
    assert_eq!(domain.reload(Load::Nothing).unwrap().get(), 3);
    assert_eq!(host.released(), ["old resource"]);
}

#[test]
fn a_reload_whose_load_raises_is_discarded_whole() {
    let pool = Pool::new(2);
    let tree = tree();
    let (mut domain, host) = running_old(&pool, &tree, Duration::from_secs(10));
    let source = format!("{CANDIDATE}\nerror('broken ui')");
    let err = domain.reload(Load::source("ui v2", source)).unwrap_err();
    let (stage, message) = reload_failure(err);
    assert_eq!(stage, LoadStage::Run);
    assert_contains(&message, "script ui v2 failed");
    assert_contains(&message, "broken ui");
    assert_old_generation_intact(&domain, &host, &pool);
}

#[test]
fn a_reload_that_binds_a_phase_the_context_does_not_schedule_is_discarded() {
    let pool = Pool::new(2);
    let tree = tree();
    let (mut domain, host) = running_old(&pool, &tree, Duration::from_secs(10));
    let source = format!(
        "{CANDIDATE}\nrequire('@skein/context').bind('main', {{ lateUpdate = function() end }})"
    );
    let err = domain.reload(Load::source("ui v2", source)).unwrap_err();
    let (stage, message) = reload_failure(err);
    assert_eq!(stage, LoadStage::Run);
    assert_contains(
        &message,
        "context.bind: context 'main' does not schedule the 'lateUpdate' phase (it schedules: startup, update, shutdown)",
    );
    assert_old_generation_intact(&domain, &host, &pool);
}

#[test]
fn a_reload_whose_load_awaits_forever_fails_at_the_load_bound() {
    let pool = Pool::new(2);
    let tree = tree();
    let (mut domain, host) = running_old(&pool, &tree, Duration::from_millis(250));
    let source = format!("{CANDIDATE}\njobs.shared.queue('never'):pop()");
    let started = std::time::Instant::now();
    let err = domain.reload(Load::source("ui v2", source)).unwrap_err();
    // The bound of 0.25 s is the behaviour under test; 10 s is a hang guard, not a
    // performance claim.
    assert!(started.elapsed() < Duration::from_secs(10));
    let (stage, message) = reload_failure(err);
    assert_eq!(stage, LoadStage::Finish);
    assert_eq!(
        message,
        "script ui v2 was still waiting after the load bound of 0.25 s"
    );
    assert_old_generation_intact(&domain, &host, &pool);
}

#[test]
fn a_restart_whose_load_waits_past_the_bound_fails_too() {
    let pool = Pool::new(1);
    let tree = tree();
    let (mut domain, _) = domain_with_bound(&pool, &tree, Duration::from_millis(200));
    let err = domain
        // The behaviour under test: a load that waits longer than the bound.
        .restart(Load::source("slow", "task.wait(30)"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "script slow was still waiting after the load bound of 0.2 s"
    );
    assert_eq!(domain.state(), DomainState::Failed);
}

#[test]
fn a_load_bound_of_zero_or_past_the_cap_is_refused() {
    let pool = Pool::new(1);
    let tree = tree();
    for bound in [Duration::ZERO, Duration::from_secs(61)] {
        let err = ScriptDomain::new(&pool, spec(&tree, bound)).err().unwrap();
        assert_eq!(
            err.to_string(),
            "load bound: must be more than zero and at most 60 s"
        );
    }
}

#[test]
fn a_reload_of_a_file_that_cannot_be_read_fails_at_the_read_stage() {
    let pool = Pool::new(1);
    let tree = tree();
    let (mut domain, _) = domain(&pool, &tree);
    domain.exec("kept = true").unwrap();
    let missing = tree.path().join("missing.luau");
    let err = domain.reload(Load::file(&missing)).unwrap_err();
    let (stage, message) = reload_failure(err);
    assert_eq!(stage, LoadStage::Read);
    assert!(
        message.starts_with(&format!("{}: ", missing.display())),
        "{message}"
    );
    assert_eq!(domain.generation().get(), 1);
    assert_eq!(domain.state(), DomainState::Ready);
    assert_eq!(eval(&domain, "return kept"), Message::Boolean(true));
}

#[test]
fn a_stopped_domain_refuses_restart_and_reload_and_stays_stopped() {
    let pool = Pool::new(1);
    let mut domain = ScriptDomain::new(&pool, DomainSpec::new("done")).unwrap();
    domain.stop();
    let generation = domain.generation();
    for (err, entry) in [
        (
            domain.restart(Load::source("x", "x = 1")).unwrap_err(),
            "restart",
        ),
        (
            domain.reload(Load::source("x", "x = 1")).unwrap_err(),
            "reload",
        ),
    ] {
        assert!(
            matches!(
                err,
                Error::Stopped {
                    entry: refused,
                    state: Halt::Stopped,
                    new_generation: true,
                    ..
                } if refused == entry
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{entry}: domain 'done' is stopped; a stopped domain stays stopped, make a new one"
            )
        );
    }
    assert_eq!(domain.state(), DomainState::Stopped);
    assert_eq!(domain.generation(), generation);
}

/// A script that rewrites a module through `@skein/fs` and dispatches it at once, thirty times,
/// computing a little before each await: every dispatch runs the text written just before it,
/// on one worker and on two (the write bumps the source epoch before it returns).
#[test]
fn a_module_a_script_rewrites_is_what_the_next_dispatch_runs() {
    let tree = crate::support::Tree::new(&[
        ("mod.luau", "return { v = function() return 0 end }\n"),
        (
            "main.luau",
            r#"
local fs = require("@skein/fs")
local got = {}
for i = 1, 30 do
    fs.writeFile("mod.luau", `return \{ v = function() return {i} end }`)
    local p = jobs.dispatch("./mod", "v")
    local t = os.clock()
    while os.clock() - t < 0.005 do end
    got[i] = p:await()
end
print(table.concat(got, " "))
"#,
        ),
    ]);
    let expected: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
    for workers in ["1", "2"] {
        let (code, out, err) = crate::support::skein_in(
            &tree.path(),
            &[
                "run",
                "--workers",
                workers,
                "--allow-read",
                ".",
                "--allow-write",
                ".",
                "main.luau",
            ],
        );
        assert_eq!((code, err.as_str()), (0, ""), "{workers} workers");
        assert_eq!(
            out,
            format!("{}\n", expected.join(" ")),
            "{workers} workers"
        );
    }
}
