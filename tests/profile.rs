//! The profile sink and the Chrome trace: what a host's sink receives from the engine thread and
//! the workers, and the timeline `skein run --trace` writes.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use skein::event::EventTarget;
use skein::profile::{ProfileEvent, ProfileKind, ProfileSink};
use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};

use crate::support::Tree;

#[derive(Default)]
struct Recorder(Mutex<Vec<ProfileEvent>>);

impl ProfileSink for Recorder {
    fn event(&self, e: &ProfileEvent) {
        self.0.lock().unwrap().push(e.clone());
    }
}

impl Recorder {
    fn of(&self, kind: ProfileKind) -> Vec<ProfileEvent> {
        let events = self.0.lock().unwrap();
        events.iter().filter(|e| e.kind == kind).cloned().collect()
    }
}

const WORK: &str = r#"
return {
    run = function(n)
        local s = 0
        for i = 1, n do s += i end
        return s
    end,
    chunk = function(c) return c.last - c.first end,
    -- The behaviour under test: an item whose event must span its wait.
    nap = function(ms) task.wait(ms / 1000) return ms end,
}
"#;

#[test]
fn context_calls_are_attributed_named_and_timed_on_the_engine_thread() {
    let recorder = Arc::new(Recorder::default());
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .context(ContextSpec::new("ui").phases([Phase::Update, Phase::Event]))
        .unwrap()
        .context(ContextSpec::new("hud").phases([Phase::Update]))
        .unwrap()
        .profile(recorder.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .exec(
            r#"require("@skein/context").bind("ui", {
                update = function() local s = 0 for i = 1, 1e5 do s += i end end,
                event = function() end,
            })
            require("@skein/context").bind("hud", { update = function() end })"#,
        )
        .unwrap();
    domain.run_phase(Phase::Update, &[]).unwrap();
    domain.advance(Duration::from_millis(16)).unwrap();
    domain
        .mailbox()
        .post(EventTarget::All, Message::Integer(1))
        .unwrap();
    // The behaviour under test: the event waits 20 ms in the queue, and its queue delay must
    // count that wait.
    std::thread::sleep(Duration::from_millis(20));
    domain.drain_events();
    let calls = recorder.of(ProfileKind::ContextCall);
    let names: Vec<&str> = calls.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ui.update",
            "hud.update",
            "ui.update",
            "hud.update",
            "ui.event"
        ]
    );
    let engine = std::thread::current().name().map(str::to_owned);
    for call in &calls {
        assert_eq!(
            call.attribution.context.as_deref(),
            Some(&call.name[..call.name.find('.').unwrap()])
        );
        assert_eq!(call.attribution.domain, domain.id());
        assert_eq!(call.thread.name.as_deref(), engine.as_deref());
        assert!(call.queue_delay.is_some(), "{call:?}");
    }
    // The update handler counted to 100,000: it took some time, and it was measured; the hud's
    // handler waited behind it in the phase, so its queue delay is at least that long.
    assert!(calls[0].duration > Duration::ZERO, "{calls:?}");
    assert!(
        calls[1].queue_delay.unwrap() >= calls[0].duration,
        "{calls:?}"
    );
    // The raw event waited in the queue from its post to the drain.
    assert!(
        calls[4].queue_delay.unwrap() >= Duration::from_millis(20),
        "{calls:?}"
    );
    assert_eq!(recorder.of(ProfileKind::DomainStarted).len(), 1);
    assert_eq!(recorder.of(ProfileKind::DomainCreated).len(), 1);
}

#[test]
fn every_pool_item_is_an_event_on_the_worker_that_ran_it() {
    let recorder = Arc::new(Recorder::default());
    let tree = Tree::new(&[("work.luau", WORK)]);
    let pool = Pool::new(2);
    let spec = DomainSpec::new("main")
        .plan(skein::Plan::new().root(tree.path()))
        .profile(recorder.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    let sum = domain
        .eval(
            r#"
            local ps = {}
            for i = 1, 5 do ps[i] = jobs.dispatch("./work", "run", 1000) end
            local napped = jobs.dispatch("./work", "nap", 20, { name = "napper" })
            local s = 0
            for _, p in ps do s += p:await() end
            napped:await()
            jobs.parallelFor("./work", "chunk", 100, nil, { chunks = 4 }):await()
            return s
            "#,
        )
        .unwrap();
    assert_eq!(sum, Message::Number((5 * 500_500) as f64));
    let host = domain
        .dispatch("./work", "run", Message::Number(3.0))
        .unwrap();
    assert_eq!(host.wait().unwrap(), Message::Number(6.0));
    let items = recorder.of(ProfileKind::PoolItem);
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for item in &items {
        *by_name.entry(item.name.as_str()).or_default() += 1;
        let thread = item.thread.name.as_deref().unwrap_or("");
        assert!(thread.starts_with("skein-worker-"), "{item:?}");
        assert!(item.queue_delay.is_some(), "{item:?}");
        assert_eq!(item.attribution.domain, domain.id());
        assert_eq!(item.attribution.context, None);
    }
    // 5 dispatches and the host's one, 4 chunks, and the named job.
    assert_eq!(by_name.get("./work:run"), Some(&6), "{by_name:?}");
    assert_eq!(by_name.get("./work:chunk"), Some(&4), "{by_name:?}");
    assert_eq!(by_name.get("napper"), Some(&1), "{by_name:?}");
    assert_eq!(items.len(), 11);
    // The napper's event spans its wait: it ended at least 20 ms after it started.
    let napper = items.iter().find(|e| e.name == "napper").unwrap();
    assert!(napper.duration >= Duration::from_millis(20), "{napper:?}");
}

#[test]
fn stale_events_and_the_stop_reach_the_sink_and_a_restart_keeps_it() {
    let recorder = Arc::new(Recorder::default());
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game").profile(recorder.clone());
    let mut domain = ScriptDomain::new(&pool, spec).unwrap();
    let old = domain.mailbox();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    old.post_named("n", Message::Integer(4)).unwrap();
    old.post_named("n", Message::Integer(5)).unwrap();
    domain.drain_events();
    assert_eq!(domain.stale_events(), 2);
    let stale = recorder.of(ProfileKind::StaleEvent);
    assert_eq!(stale.len(), 2);
    assert_eq!(stale[0].attribution.generation.get(), 2);
    domain.stop();
    let stopped = recorder.of(ProfileKind::DomainStopped);
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].name, "game");
}

/// Runs the runner with `--trace` in `tree`, answering its exit code and the parsed trace.
fn traced_run(tree: &Tree, script: &str) -> (i32, String, Value) {
    let out_path = tree.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["run", "--workers", "2", "--trace"])
        .arg(&out_path)
        .arg(tree.path().join(script))
        .output()
        .expect("run skein");
    let text = std::fs::read_to_string(&out_path).expect("the trace was written");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap_or(-1);
    (
        code,
        stderr,
        serde_json::from_str(&text).expect("the trace is JSON"),
    )
}

fn slices<'a>(trace: &'a Value, cat: &str) -> Vec<&'a Value> {
    let events = trace["traceEvents"].as_array().unwrap();
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == cat)
        .collect()
}

fn thread_names(trace: &Value) -> HashMap<u64, String> {
    let events = trace["traceEvents"].as_array().unwrap();
    events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            let name = e["args"]["name"].as_str().unwrap().to_owned();
            (e["tid"].as_u64().unwrap(), name)
        })
        .collect()
}

#[test]
fn skein_run_trace_writes_one_slice_per_job_on_a_worker_thread() {
    let tree = Tree::new(&[
        ("work.luau", WORK),
        (
            "main.luau",
            r#"
            local ps = {}
            for i = 1, 8 do ps[i] = jobs.dispatch("./work", "run", 20000) end
            local s = 0
            for _, p in ps do s += p:await() end
            print(s)
            "#,
        ),
    ]);
    let (code, stderr, trace) = traced_run(&tree, "main.luau");
    assert_eq!(code, 0, "{stderr}");
    let names = thread_names(&trace);
    let jobs = slices(&trace, "pool.item");
    assert_eq!(jobs.len(), 8, "{trace}");
    for job in &jobs {
        assert_eq!(job["name"], "./work:run");
        assert_eq!(job["pid"], 1);
        let tid = job["tid"].as_u64().unwrap();
        assert!(names[&tid].starts_with("skein-worker-"), "{names:?}");
        assert!(job["dur"].as_f64().unwrap() > 0.0, "{job}");
        assert!(job["ts"].as_u64().is_some(), "{job}");
        assert!(job["args"]["queue_delay_us"].as_f64().is_some(), "{job}");
    }
    // The engine thread's side: the domain was made and stopped there.
    for cat in ["domain.created", "domain.stopped"] {
        let events = slices(&trace, cat);
        assert_eq!(events.len(), 1, "{cat}: {trace}");
        let tid = events[0]["tid"].as_u64().unwrap();
        assert_eq!(names[&tid], "main");
        assert_eq!(events[0]["name"], "main");
    }
}

/// The engine thread's script work is on the timeline: one `engine.run` slice per run of the
/// script's code there, from a resume to its next yield or end, named for what it runs for.
#[test]
fn skein_run_trace_shows_each_run_of_the_script_on_the_engine_thread() {
    let tree = Tree::new(&[
        ("work.luau", WORK),
        (
            "main.luau",
            r#"
            -- Run 1: to the await, holding run 2, the spawned task's to its wait.
            task.spawn(function()
                task.wait(0.01) -- run 3: after the wait
            end)
            require("@skein/context").bind("main", { update = function() end })
            jobs.dispatch("./work", "nap", 5):await() -- run 4: after the await
            "#,
        ),
    ]);
    let (code, stderr, trace) = traced_run(&tree, "main.luau");
    assert_eq!(code, 0, "{stderr}");
    let names = thread_names(&trace);
    let runs = slices(&trace, "engine.run");
    let script = format!("script {}", tree.path().join("main.luau").display());
    let mut of_script: Vec<&Value> = runs
        .iter()
        .copied()
        .filter(|r| r["name"] == script.as_str())
        .collect();
    assert_eq!(of_script.len(), 4, "{trace}");
    assert!(
        runs.iter()
            .any(|r| r["name"] == "context 'main' update handler"),
        "{trace}"
    );
    for run in &runs {
        let tid = run["tid"].as_u64().unwrap();
        assert_eq!(names[&tid], "main", "{run}");
        assert_eq!(run["args"]["domain"], 1, "{run}");
        assert!(run["dur"].as_f64().unwrap() > 0.0, "{run}");
    }
    // The main script's first run holds the spawned task's first run.
    let ts = |r: &Value| r["ts"].as_f64().unwrap();
    of_script.sort_by(|a, b| ts(a).total_cmp(&ts(b)));
    let (outer, inner) = (of_script[0], of_script[1]);
    let end = |r: &Value| ts(r) + r["dur"].as_f64().unwrap();
    assert!(
        ts(outer) <= ts(inner) && end(inner) <= end(outer),
        "{outer} {inner}"
    );
    // The run after the await begins once the job has ended on its worker.
    let job = slices(&trace, "pool.item")[0];
    assert!(end(job) <= ts(of_script[3]), "{job} {}", of_script[3]);
}

#[test]
fn skein_run_trace_is_written_when_the_script_fails() {
    let tree = Tree::new(&[
        ("work.luau", WORK),
        (
            "bad.luau",
            r#"
            jobs.dispatch("./work", "run", 10):await()
            error("boom")
            "#,
        ),
    ]);
    let (code, stderr, trace) = traced_run(&tree, "bad.luau");
    assert_eq!(code, 1);
    assert!(stderr.contains("boom"), "{stderr}");
    assert_eq!(slices(&trace, "pool.item").len(), 1, "{trace}");
    assert_eq!(slices(&trace, "domain.stopped").len(), 1, "{trace}");
}

#[test]
fn skein_run_trace_is_in_the_help_and_needs_a_path() {
    let (code, help, _) = crate::support::skein(&["run", "--help"]);
    assert_eq!(code, 0);
    assert!(
        help.contains(
            "      --trace <OUT.json>\n          Write a Chrome trace-event timeline of the run \
             to OUT.json when it ends (also when the script fails): every job on the worker \
             thread that ran it, and on the engine thread each run of the script's code (the \
             main script, its tasks, timers and handlers, from a resume to the next yield) and \
             each handler call. Open it in ui.perfetto.dev\n"
        ),
        "{help}"
    );
    let (code, _, stderr) = crate::support::skein(&["run", "x.luau", "--trace"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with(
            "error: a value is required for '--trace <OUT.json>' but none was supplied"
        ),
        "{stderr}"
    );
}

fn grant_of(names: &[&str]) -> skein::capability::Grant {
    skein::capability::RootAuthority::new().grant(skein::capability::CapabilitySet::from_iter(
        names
            .iter()
            .map(|n| skein::capability::CapabilityId::new(n).unwrap()),
    ))
}

#[test]
fn a_worker_s_spawn_calls_and_stop_are_profiled_on_its_own_thread() {
    let recorder = Arc::new(Recorder::default());
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .grant(grant_of(&["worker.spawn"]))
        .profile(recorder.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    let out = domain
        .eval(
            r#"
            -- The first call ends no sooner than 20 ms after the engine has sent both messages
            -- (it waits for "sent"), so the second message waits behind it at least that long.
            -- The 20 ms timer is the behaviour under test: the calls' measured durations.
            local w = require('@skein/worker').spawn {
                name = 'echo',
                source = [[return function(m)
                    if m == 1 then jobs.shared.queue("sent"):pop() end
                    task.wait(0.02) -- the behaviour under test: a call's measured duration
                    return m
                end]],
            }
            w:send(1)
            w:send(2)
            jobs.shared.queue("sent"):push(true)
            local a, b = w:receive(5), w:receive(5)
            return { a, b, w:join(5) }
            "#,
        )
        .unwrap();
    assert_eq!(
        crate::support::text(&crate::support::list(&out)[2]),
        "stopped"
    );
    let spawned = recorder.of(ProfileKind::ActorSpawned);
    let calls = recorder.of(ProfileKind::ActorCall);
    let stopped = recorder.of(ProfileKind::ActorStopped);
    assert_eq!((spawned.len(), calls.len(), stopped.len()), (1, 2, 1));
    let engine = std::thread::current().name().map(str::to_owned);
    for e in spawned.iter().chain(&calls).chain(&stopped) {
        assert_eq!(e.name, "echo");
        assert_eq!(e.attribution.actor.as_deref(), Some("echo"));
        assert_eq!(e.attribution.domain, domain.id());
        assert_eq!(e.attribution.generation.get(), 1);
        assert_eq!(e.thread.name.as_deref(), Some("skein-actor echo"));
        assert_ne!(e.thread.name.as_deref(), engine.as_deref());
    }
    // In order on the worker's thread: its start, the two calls, its end.
    assert!(spawned[0].start + (spawned[0].duration.as_micros() as u64) <= calls[0].start);
    assert!(calls[0].start < calls[1].start && calls[1].start <= stopped[0].start);
    for call in &calls {
        assert!(call.duration >= Duration::from_millis(20), "{call:?}");
        assert!(call.queue_delay.is_some(), "{call:?}");
    }
    // The second message waited behind the first call.
    assert!(
        calls[1].queue_delay.unwrap() >= Duration::from_millis(20),
        "{calls:?}"
    );
    assert_eq!(stopped[0].duration, Duration::ZERO);
    // A worker event is not a context call or a pool item.
    assert!(recorder.of(ProfileKind::PoolItem).is_empty());
}

#[test]
fn a_restart_profiles_the_end_of_its_generation_and_the_workers_it_stopped() {
    let recorder = Arc::new(Recorder::default());
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .grant(grant_of(&["worker.spawn"]))
        .profile(recorder.clone());
    let mut domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .exec("require('@skein/worker').spawn { name = 'idle', source = 'return function() end' }")
        .unwrap();
    assert!(recorder.of(ProfileKind::GenerationEnded).is_empty());
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    let ended = recorder.of(ProfileKind::GenerationEnded);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].name, "game");
    assert_eq!(ended[0].attribution.generation.get(), 1);
    assert_eq!(ended[0].attribution.actor, None);
    let stopped = recorder.of(ProfileKind::ActorStopped);
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].attribution.generation.get(), 1);
    // The worker had stopped before the generation's end was measured as over.
    assert!(stopped[0].start <= ended[0].start + ended[0].duration.as_micros() as u64);
    // A stop's ending is inside DomainStopped, not a second GenerationEnded.
    domain.stop();
    assert_eq!(recorder.of(ProfileKind::GenerationEnded).len(), 1);
}

#[test]
fn a_denial_is_an_instant_named_for_its_capability_wherever_it_happens() {
    let recorder = Arc::new(Recorder::default());
    let pool = Pool::new(1);
    let plan = skein::Plan::new().function("observe", |lua, _| {
        skein::capability::require_capability("input.observe")?;
        lua.pack_multi(())
    });
    let spec = DomainSpec::new("game")
        .plan(plan)
        .grant(grant_of(&["worker.spawn"]))
        .profile(recorder.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain.exec("pcall(observe)").unwrap();
    domain
        .eval(
            r#"
            local w = require('@skein/worker').spawn {
                name = 'peeker', source = 'return function() return (pcall(observe)) end',
            }
            w:send(1)
            return w:receive(5)
            "#,
        )
        .unwrap();
    let denials = recorder.of(ProfileKind::Denial);
    assert_eq!(denials.len(), 2, "{denials:?}");
    for d in &denials {
        assert_eq!(d.name, "input.observe");
        assert_eq!(d.duration, Duration::ZERO);
        assert_eq!(d.attribution.domain, domain.id());
    }
    assert_eq!(denials[0].attribution.actor, None);
    assert_eq!(
        denials[0].thread.name,
        std::thread::current().name().map(Arc::from)
    );
    assert_eq!(denials[1].attribution.actor.as_deref(), Some("peeker"));
    assert_eq!(
        denials[1].thread.name.as_deref(),
        Some("skein-actor peeker")
    );
    assert_eq!(domain.denials(), 2);
}
