//! `@skein/worker`: actors with their own VMs, spawned by a domain's code.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use skein::actor::FailurePolicy;
use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

use crate::support::{
    assert_contains, error_of, number, refusal, rss_pages, run_alone, text, wait_until, Gate,
    Marks, ThreadMark,
};

/// An error's text as the code that caught it sees it: the whole text, on one line.
#[track_caller]
fn clean(full: &str) -> String {
    assert!(
        !full.contains('\n'),
        "a caught error is its text alone: {full:?}"
    );
    full.to_owned()
}

/// The error `body` raises in the engine VM, cleaned.
fn raised(domain: &ScriptDomain, body: &str) -> String {
    clean(&refusal(domain, body))
}

fn grant(names: &[&str]) -> skein::capability::Grant {
    RootAuthority::new().grant(CapabilitySet::from_iter(
        names.iter().map(|n| CapabilityId::new(n).unwrap()),
    ))
}

fn spec(plan: Plan) -> DomainSpec {
    DomainSpec::new("actors")
        .plan(plan)
        .grant(grant(&["worker.spawn", "input.observe"]))
}

fn domain(pool: &Pool) -> ScriptDomain {
    ScriptDomain::new(pool, spec(Plan::new())).expect("domain")
}

/// A domain's own calls of `@skein/worker` that are refused before any worker starts: the row's
/// name, the Luau, and the whole error text (`{id}` stands for the domain's id).
const SPAWN_REFUSALS: &[(&str, &str, &str)] = &[
    (
        "an unknown option",
        "require('@skein/worker').spawn { source = 'return print', size = 3 }",
        "worker.spawn: unknown option 'size' in options: expected capabilities, memory, name, shareServices, or source",
    ),
    (
        "no source",
        "require('@skein/worker').spawn { name = 'x' }",
        "worker.spawn needs source, the worker module's Luau source",
    ),
    (
        "capabilities the domain does not hold",
        "require('@skein/worker').spawn { source = 'return print', capabilities = { 'net.connect', 'audio.play' } }",
        "worker.spawn: domain 'actors' ({id}, generation 1) cannot delegate capabilities it does not \
         hold: audio.play, net.connect",
    ),
    (
        "worker.send from a domain",
        "require('@skein/worker').send { progress = 1 }",
        "in a domain's own code, worker.send is for a worker's own code; a domain sends through the \
         handle worker.spawn returned",
    ),
    (
        "shareServices that is not a boolean",
        "require('@skein/worker').spawn { source = 'return print', shareServices = 'yes' }",
        "worker.spawn: shareServices must be a boolean, got a string",
    ),
    (
        "several unknown options name the least",
        "require('@skein/worker').spawn { source = 'return print', zeta = 1, alpha = 2 }",
        "worker.spawn: unknown option 'alpha' in options: expected capabilities, memory, name, \
         shareServices, or source",
    ),
    (
        "a key that is not a string",
        "require('@skein/worker').spawn { source = 'return print', 1 }",
        "worker.spawn: options has a number key, but options are named by strings: expected \
         capabilities, memory, name, shareServices, or source",
    ),
    (
        "a name past 256 bytes",
        "require('@skein/worker').spawn { source = 'return print', name = string.rep('n', 257) }",
        "worker.spawn: name must be a string of 1 to 256 bytes, got a string of 257 bytes",
    ),
    (
        "a source that is not UTF-8 text",
        "require('@skein/worker').spawn { source = '\\255\\254' }",
        "worker.spawn: source must be UTF-8 text",
    ),
    (
        "a capability name that is not UTF-8 text",
        "require('@skein/worker').spawn { source = 'return print', capabilities = { '\\255' } }",
        "worker.spawn: invalid capability name '\u{FFFD}': each dotted segment must be a lowercase \
         letter followed by lowercase letters, digits or '_'",
    ),
];

#[test]
fn options_of_any_size_are_refused_without_copying_them() {
    // A table of a million keys, a 64 MiB name and a source past 16 MiB: each refused at the
    // call in a short text. The keys of the table were once copied, all of them, to name the
    // least unknown one; under an address-space limit that copy aborted the process.
    let pool = Pool::new(1);
    let d = domain(&pool);
    for (body, expected) in [
        (
            "require('@skein/worker').spawn(table.create(1000000, true))",
            "worker.spawn: options has a number key, but options are named by strings: expected \
             capabilities, memory, name, shareServices, or source",
        ),
        (
            "require('@skein/worker').spawn { source = 'return print', name = string.rep('n', 64 * 1024 * 1024) }",
            "worker.spawn: name must be a string of 1 to 256 bytes, got a string of 67108864 bytes",
        ),
        (
            "require('@skein/worker').spawn { source = string.rep('-', 16 * 1024 * 1024 + 1) }",
            "worker.spawn: source must be at most 16777216 bytes of Luau source, got 16777217 bytes",
        ),
    ] {
        let err = clean(&error_of(&d, body).expect("refused"));
        assert_eq!(err, expected, "{body}");
        assert_eq!(d.live_actors().get(), 0, "{body} started a worker");
    }
    // A name at the bound is taken.
    let joined = d
        .eval(
            "local w = require('@skein/worker').spawn { source = 'return print', \
             name = string.rep('n', 256) } return w:join(10)",
        )
        .unwrap();
    assert_eq!(joined, skein::Message::String("stopped".into()));
}

#[test]
fn spawn_errors_carry_their_texts() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let id = d.id().to_string();
    for (name, body, expected) in SPAWN_REFUSALS {
        let err = error_of(&d, body).unwrap_or_else(|| panic!("row '{name}': no error was raised"));
        assert_eq!(clean(&err), expected.replace("{id}", &id), "row '{name}'");
        // No worker thread was started by the refusal.
        assert_eq!(d.live_actors().get(), 0, "row '{name}' started a worker");
    }

    let denied = ScriptDomain::new(&pool, DomainSpec::new("plain")).unwrap();
    let err = raised(
        &denied,
        "require('@skein/worker').spawn { source = 'return print' }",
    );
    assert_eq!(
        err,
        format!(
            "capability 'worker.spawn' denied to domain 'plain' ({}, generation 1)",
            denied.id()
        )
    );
    assert_eq!(denied.denials(), 1);
}

#[test]
fn a_worker_cannot_spawn_and_its_failure_is_structured() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let err = raised(
        &d,
        r#"
        local w = require('@skein/worker').spawn { name = 'nested', source = [[
            local worker = require('@skein/worker')
            return function() return worker.spawn { source = 'return print' } end
        ]] }
        w:send(1)
        w:receive(20)
        "#,
    );
    assert_eq!(
        err,
        format!(
            "{} generation 1 worker 'nested' (worker:nested) failed at handler: inside a worker, \
             worker.spawn is for a domain's own code",
            d.id()
        )
    );
    let failures = d.take_actor_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].stage, skein::actor::ActorStage::Handler);
    assert_eq!(failures[0].attribution.actor.as_deref(), Some("nested"));
    assert_eq!(failures[0].module, "worker:nested");
    assert_eq!(failures[0].to_string(), err);
}

#[test]
fn send_refuses_what_cannot_cross_and_sends_nothing() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { name = 'closer', source = 'return function(m) return m end' }
        local ok, err = pcall(function() w:send { items = { 1, 2, { callback = print } } } end)
        assert(not ok)
        w:send('after')
        local first = w:receive(20)
        local second = w:receive(0.05)
        assert(w:join(20) == 'stopped')
        local ok2, err2 = pcall(function() w:send(1) end)
        return { tostring(err), first, tostring(second), tostring(err2) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(
        clean(&text(&items[0])),
        "Worker:send: message.items[3].callback: a function can't cross a worker or event boundary"
    );
    assert_eq!(text(&items[1]), "after");
    assert_eq!(text(&items[2]), "nil");
    assert_eq!(
        clean(&text(&items[3])),
        "the worker is stopped; it takes no more messages (Worker:send to worker 'closer')"
    );
}

#[test]
fn a_method_called_on_a_userdata_names_it_with_its_article() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    assert_eq!(
        raised(
            &d,
            "local w = require('@skein/worker').spawn { source = 'return print' } \
             w.send(newproxy(), 1)"
        ),
        "Worker:send: self must be a worker, got a userdata; call it as worker:send(...)"
    );
}

#[test]
fn echo_round_trips_buffers_and_vectors() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { name = 'echo', source = 'return function(m) buffer.writeu8(m.bytes, 0, 122) return m end' }
        local bytes = buffer.fromstring('abc')
        w:send { name = 'ada', bytes = bytes, at = vector.create(1, 2, 3), n = 2^53, i = 7 }
        local reply = w:receive(20)
        assert(w:join(20) == 'stopped')
        return {
            reply.name, buffer.tostring(reply.bytes), buffer.tostring(bytes),
            reply.at == vector.create(1, 2, 3), reply.n == 2^53, reply.bytes ~= bytes,
        }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(text(&items[0]), "ada");
    // The worker wrote its own copy; the sender's buffer is unchanged.
    assert_eq!(text(&items[1]), "zbc");
    assert_eq!(text(&items[2]), "abc");
    for flag in &items[3..] {
        assert_eq!(flag, &Message::Boolean(true));
    }
}

#[test]
fn a_thousand_sends_arrive_in_order() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { source = 'return function(m) return m * 2 end' }
        for i = 1, 1000 do w:send(i) end
        for i = 1, 1000 do
            local r = w:receive(20)
            if r ~= i * 2 then return 'out of order at ' .. i .. ': ' .. tostring(r) end
        end
        return w:join(20)
        "#,
        )
        .unwrap();
    assert_eq!(text(&out), "stopped");
}

#[test]
fn the_queue_holds_1024_waiting_then_refuses() {
    let pool = Pool::new(1);
    let gate = Gate::default();
    let d = ScriptDomain::new(&pool, spec(gate.plan(Plan::new()))).unwrap();
    d.exec(
        r#"
        w = require('@skein/worker').spawn { name = 'slow', source = 'return function(m) gate() return m end' }
        w:send(0)
        "#,
    )
    .unwrap();
    // The handler holds message 0: from now on every message sent waits.
    assert!(
        wait_until(Duration::from_secs(10), || gate.arrived() == 1),
        "the handler never started"
    );
    let at_limit = d
        .eval("for i = 1, 1024 do w:send(i) end return 'ok'")
        .unwrap();
    assert_eq!(text(&at_limit), "ok");
    assert_eq!(
        raised(&d, "w:send(1025)"),
        "the worker's queue is full: 1024 messages wait for its handler; receive its replies, or \
         send fewer (Worker:send to worker 'slow')"
    );
    gate.open();
    let out = d
        .eval(
            r#"
        for i = 0, 1024 do
            local r = w:receive(20)
            if r ~= i then return 'got ' .. tostring(r) .. ' for ' .. i end
        end
        return w:join(20)
        "#,
        )
        .unwrap();
    // Nothing of the refused send arrived.
    assert_eq!(text(&out), "stopped");
}

#[test]
fn receive_times_out_with_nil_and_join_can_time_out() {
    let pool = Pool::new(1);
    let gate = Gate::default();
    let d = ScriptDomain::new(&pool, spec(gate.plan(Plan::new()))).unwrap();
    let started = Instant::now();
    let out = d
        .eval(
            r#"
        local quiet = require('@skein/worker').spawn { source = 'return function() end' }
        quiet:send(1)
        -- The behaviour under test: a receive that times out after 0.1 s.
        local none = quiet:receive(0.1)
        local now = quiet:receive()
        return { tostring(none), tostring(now), quiet:join(20) }
        "#,
        )
        .unwrap();
    // The timeout under test: the first receive waited its 0.1 s.
    assert!(started.elapsed() >= Duration::from_millis(100));
    let items = crate::support::list(&out);
    assert_eq!(text(&items[0]), "nil");
    assert_eq!(text(&items[1]), "nil");
    assert_eq!(text(&items[2]), "stopped");
    let late = raised(
        &d,
        r#"
        local held = require('@skein/worker').spawn { name = 'held', source = 'return function() gate() end' }
        held:send(1)
        held:join(0.1)
        "#,
    );
    assert_eq!(
        late,
        "Worker:join: worker 'held' did not end within the timeout"
    );
    gate.open();
}

#[test]
fn a_failure_is_read_once_then_join_says_failed() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { name = 'bad', source = 'return function(m) error("boom " .. m, 0) end' }
        w:send(1)
        -- The actor may already have failed on 1 and stopped, and then refuses this one.
        pcall(w.send, w, 2)
        local ok, err = pcall(function() return w:receive(20) end)
        local again = w:receive(0.05)
        return { tostring(ok), tostring(err), tostring(again), w:join(20) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(text(&items[0]), "false");
    assert_eq!(
        clean(&text(&items[1])),
        format!(
            "{} generation 1 worker 'bad' (worker:bad) failed at handler: boom 1",
            d.id()
        )
    );
    // Stopped on the first failure: message 2 was never handled.
    assert_eq!(text(&items[2]), "nil");
    assert_eq!(text(&items[3]), "failed");
    // The script received the failure: it is not reported, even once the run ends.
    d.run_until_idle().unwrap();
    assert_eq!(d.take_reports(), []);
    // The host still has it, structured.
    assert_eq!(d.take_actor_failures().len(), 1);
    // The domain is untouched.
    assert_eq!(d.eval("return 1 + 1").unwrap(), Message::Number(2.0));
}

#[test]
fn a_failure_nobody_received_or_joined_is_reported_when_the_run_ends_and_only_then() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    // Joined: observed, never reported.
    d.exec(
        r#"
        local joined = require('@skein/worker').spawn { name = 'joined', source = 'error("at load", 0)' }
        task.spawn(function() status = joined:join(20) end)
        "#,
    )
    .unwrap();
    d.run_until_idle().unwrap();
    assert_eq!(text(&d.eval("return status").unwrap()), "failed");
    assert_eq!(d.take_reports(), []);
    assert_eq!(d.take_actor_failures().len(), 1, "the host still has it");
    // Never looked at: reported once the run ends, once.
    d.exec(
        r#"
        loose = require('@skein/worker').spawn { name = 'loose', source = 'return function(m) error("boom " .. m, 0) end' }
        loose:send(7)
        "#,
    )
    .unwrap();
    assert!(wait_until(std::time::Duration::from_secs(20), || {
        d.take_actor_failures().len() == 1
    }));
    assert_eq!(d.take_reports(), [], "not before the run ends");
    d.run_until_idle().unwrap();
    let reports = d.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].kind, skein::ReportKind::Actor);
    assert_eq!(reports[0].source, "worker 'loose'");
    assert_eq!(
        reports[0].message,
        format!(
            "{} generation 1 worker 'loose' (worker:loose) failed at handler: boom 7",
            d.id()
        )
    );
    d.run_until_idle().unwrap();
    assert_eq!(d.take_reports(), [], "each failure is reported once");
    // The failure stays readable: a receive after the report still raises it.
    let err = crate::support::refusal(&d, "loose:receive()");
    assert_eq!(err, reports[0].message);
}

/// A worker's code that fails, and the failure the domain's `receive` raises for it: the row's
/// name, the Luau, and the whole first line of the error (`{id}` stands for the domain's id).
const WORKER_FAILURES: &[(&str, &str, &str)] = &[
    (
        "a module that returns no handler fails at load",
        "local w = require('@skein/worker').spawn { name = 'n', source = 'return 42' } w:receive(20)",
        "{id} generation 1 worker 'n' (worker:n) failed at load: the module returned a number, \
         not a handler function(message)",
    ),
    (
        "a module that does not compile fails at load",
        "local w = require('@skein/worker').spawn { name = 's', source = 'return function(' } w:receive(20)",
        "{id} generation 1 worker 's' (worker:s) failed at load: worker:s:1: Expected identifier \
         when parsing variable name, got <eof>",
    ),
    (
        "jobs.register in a handler fails at handler",
        r#"
        local w = require('@skein/worker').spawn {
            name = 'reg',
            source = 'return function() jobs.register { name = "x", executor = { kind = "luau", run = function() end } } end',
        }
        w:send(1)
        w:receive(5)
        "#,
        "{id} generation 1 worker 'reg' (worker:reg) failed at handler: jobs.register: a \
         @skein/worker worker's VM can't register jobs: its functions would end with the worker; \
         register them from the domain's own code or a job",
    ),
];

#[test]
fn a_worker_s_failure_names_its_stage_and_cause() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let id = d.id().to_string();
    for (name, body, expected) in WORKER_FAILURES {
        let err = error_of(&d, body).unwrap_or_else(|| panic!("row '{name}': no error was raised"));
        assert_eq!(clean(&err), expected.replace("{id}", &id), "row '{name}'");
    }
}

#[test]
fn continue_policy_keeps_handling() {
    let pool = Pool::new(1);
    let d = ScriptDomain::new(
        &pool,
        spec(Plan::new()).actor_failures(FailurePolicy::Continue),
    )
    .unwrap();
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { name = 'odd', source = [[
            return function(m) if m % 2 == 1 then error('odd', 0) end return m end
        ]] }
        for i = 1, 4 do w:send(i) end
        local seen = {}
        for _ = 1, 4 do
            local ok, r = pcall(function() return w:receive(20) end)
            table.insert(seen, if ok then tostring(r) else 'failed')
        end
        table.insert(seen, w:join(20))
        return table.concat(seen, ' ')
        "#,
        )
        .unwrap();
    assert_eq!(text(&out), "failed 2 failed 4 stopped");
    assert_eq!(d.take_actor_failures().len(), 2);
}

#[test]
fn worker_send_reports_progress_before_the_reply() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { source = [[
            local worker = require('@skein/worker')
            return function(count)
                for index = 1, count do worker.send { progress = index } end
                return 'done'
            end
        ]] }
        w:send(3)
        local seen = {}
        for _ = 1, 3 do table.insert(seen, w:receive(20).progress) end
        table.insert(seen, w:receive(20))
        w:join(20)
        return table.concat(seen, ' ')
        "#,
        )
        .unwrap();
    assert_eq!(text(&out), "1 2 3 done");
}

#[test]
fn worker_send_is_bounded_at_1024() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { source = [[
            local worker = require('@skein/worker')
            return function()
                for index = 1, 1024 do worker.send(index) end
                local ok, err = pcall(worker.send, 1025)
                return tostring(err)
            end
        ]] }
        w:send(true)
        -- Nothing is received until the handler is done: its sends pile up.
        local state = w:join(20)
        if state ~= 'stopped' then return state .. ': ' .. tostring(select(2, pcall(w.receive, w))) end
        local last
        for _ = 1, 1025 do last = w:receive() end
        return tostring(last)
        "#,
        )
        .unwrap();
    assert_eq!(
        clean(&text(&out)),
        "worker.send: the domain's queue is full: 1024 messages wait for it to receive them; \
         send fewer, or reply less often"
    );
}

#[test]
fn a_worker_runs_under_its_own_narrower_authority() {
    let pool = Pool::new(1);
    let plan = Plan::new().function("observe", |lua, _| {
        skein::capability::require_capability("input.observe")?;
        lua.pack_multi("observed")
    });
    let d = ScriptDomain::new(&pool, spec(plan)).unwrap();
    let out = d
        .eval(
            r#"
        local worker = require('@skein/worker')
        local source = 'return function() local ok, e = pcall(observe) return tostring(e) end'
        local full = worker.spawn { name = 'full', source = source }
        local bare = worker.spawn { name = 'bare', source = source, capabilities = {} }
        full:send(1) bare:send(1)
        return { full:receive(20), bare:receive(20) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(text(&items[0]), "observed");
    assert_eq!(
        clean(&text(&items[1])),
        format!(
            "capability 'input.observe' denied to domain 'actors' ({}, generation 1, worker 'bare')",
            d.id()
        )
    );
}

#[test]
fn two_workers_run_at_the_same_time() {
    let pool = Pool::new(1);
    // Each handler waits for the other at a rendezvous; one at a time, neither would arrive.
    let meeting = Arc::new((Mutex::new(0usize), Condvar::new()));
    let plan = Plan::new().function("meet", move |lua, _| {
        let (lock, cv) = &*meeting;
        let mut count = lock.lock().unwrap();
        *count += 1;
        cv.notify_all();
        let (count, _) = cv
            .wait_timeout_while(count, Duration::from_secs(10), |c| *c < 2)
            .unwrap();
        lua.pack_multi(*count >= 2)
    });
    let d = ScriptDomain::new(&pool, spec(plan)).unwrap();
    let out = d
        .eval(
            r#"
        local worker = require('@skein/worker')
        local a = worker.spawn { name = 'a', source = 'return function() return meet() end' }
        local b = worker.spawn { name = 'b', source = 'return function() return meet() end' }
        a:send(1) b:send(1)
        return { a:receive(20), b:receive(20) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(items, &[Message::Boolean(true), Message::Boolean(true)]);
}

#[test]
fn stop_restart_and_drop_join_every_worker() {
    let pool = Pool::new(1);
    let mut d = domain(&pool);
    let live = d.live_actors();
    // A handler in an endless loop is interrupted, not waited for.
    d.exec(
        r#"
        local worker = require('@skein/worker')
        spinner = worker.spawn { source = 'return function() while true do end end' }
        spinner:send(1)
        idle = worker.spawn { source = 'return function() end' }
        "#,
    )
    .unwrap();
    assert_eq!(live.get(), 2);
    d.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(live.get(), 0);
    d.exec("require('@skein/worker').spawn { source = 'return function() end' }")
        .unwrap();
    assert_eq!(live.get(), 1);
    d.stop();
    assert_eq!(live.get(), 0);
    let refused = d.eval("return 1");
    drop(refused);
    let d = domain(&pool);
    let live = d.live_actors();
    d.exec("require('@skein/worker').spawn { source = 'return function() end' }")
        .unwrap();
    assert_eq!(live.get(), 1);
    drop(d);
    assert_eq!(live.get(), 0);
}

/// The stress loop measures the process's memory, so it runs alone in a child process: other
/// tests of this binary running beside it would move the figure.
#[test]
fn create_spawn_message_stop_leaves_no_thread_and_flat_memory() {
    run_alone("actors::stress_rounds_alone");
}

#[test]
#[ignore = "run by create_spawn_message_stop_leaves_no_thread_and_flat_memory, alone"]
fn stress_rounds_alone() {
    let pool = Pool::new(1);
    let round = |i: usize| {
        let d = domain(&pool);
        let live = d.live_actors();
        let out = d
            .eval(&format!(
                "local w = require('@skein/worker').spawn {{ source = 'return function(m) return m + 1 end' }} \
                 w:send({i}) return w:receive(20)"
            ))
            .unwrap();
        assert_eq!(out, Message::Number((i as i64 + 1) as f64));
        assert_eq!(live.get(), 1);
        drop(d);
        assert_eq!(live.get(), 0, "a worker thread outlived its domain");
    };
    for i in 0..100 {
        round(i);
    }
    let before = rss_pages();
    let started = Instant::now();
    for i in 0..1000 {
        round(i);
    }
    let after = rss_pages();
    // Generous: 32 MiB of 4 KiB pages over 1,000 rounds (a VM leaked per round is far more).
    assert!(
        after < before + 8 * 1024,
        "memory grew from {before} to {after} pages"
    );
    eprintln!(
        "1,000 create-spawn-message-stop rounds: {:?}",
        started.elapsed()
    );
}

/// The example of docs/luau-api.md, which the docs harness can't run (it grants nothing).
#[test]
fn the_luau_api_example_runs() {
    assert_eq!(
        run_example("local worker = require(\"@skein/worker\")"),
        "progress 1; progress 2; progress 3; 6; stopped"
    );
}

/// The example of `worker.spawn`'s `memory` option in docs/luau-api.md.
#[test]
fn the_luau_api_memory_example_runs() {
    assert_eq!(
        run_example(
            "-- A small VM for a small job: 64 of these fit where 64 of the domain's own would not."
        ),
        "42"
    );
}

/// Runs the `luau no-run` block of docs/luau-api.md whose first line is `first` in a domain
/// that may spawn workers, and answers what it printed, its lines joined by `; `.
fn run_example(first: &str) -> String {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/luau-api.md")).unwrap();
    let source = body_of_example(&doc, first);
    let printed = d
        .eval(&format!(
            "local out = {{}}\nlocal function print(...) table.insert(out, table.concat({{...}}, ' ')) end\n{source}\nreturn table.concat(out, '; ')"
        ))
        .unwrap();
    text(&printed).to_owned()
}

/// The body of the `luau no-run` block of `doc` whose first line is `first`.
fn body_of_example(doc: &str, first: &str) -> String {
    let start = doc.find(&format!("```luau no-run\n{first}\n")).unwrap();
    let body = &doc[start + "```luau no-run\n".len()..];
    body[..body.find("```").unwrap()].to_owned()
}

#[test]
fn a_handler_past_the_host_budget_fails_and_the_domain_goes_on() {
    let pool = Pool::new(1);
    let d = ScriptDomain::new(
        &pool,
        spec(Plan::new()).actor_budget(Duration::from_millis(100)),
    )
    .unwrap();
    let err = raised(
        &d,
        "local w = require('@skein/worker').spawn { name = 'spin', source = 'return function() while true do end end' } \
         w:send(1) w:receive(20)",
    );
    assert_contains(&err, "worker 'spin' (worker:spin) failed at handler: ");
    assert_contains(&err, "0.1");
    assert_eq!(
        d.eval("return 'alive'").unwrap(),
        Message::String("alive".into())
    );
}

#[test]
fn a_pool_worker_vm_says_where_worker_functions_belong() {
    let tree = crate::support::Tree::new(&[(
        "probe.luau",
        "local worker = require('@skein/worker') return { \
           spawn = function() local ok, e = pcall(worker.spawn, { source = '' }) return tostring(e) end, \
           send = function() local ok, e = pcall(worker.send, 1) return tostring(e) end }",
    )]);
    let pool = Pool::new(1);
    let d = ScriptDomain::new(&pool, spec(Plan::new().root(tree.path()))).unwrap();
    let spawn = d
        .eval("return jobs.dispatch('./probe', 'spawn'):await()")
        .unwrap();
    assert_eq!(
        clean(&text(&spawn)),
        "worker.spawn: this VM is no domain's engine VM; only a domain's own code spawns workers"
    );
    let send = d
        .eval("return jobs.dispatch('./probe', 'send'):await()")
        .unwrap();
    assert_eq!(
        clean(&text(&send)),
        "in a domain's own code, worker.send is for a worker's own code; a domain sends through the \
         handle worker.spawn returned"
    );
}

#[test]
fn a_handler_may_yield_and_its_worker_keeps_its_own_state() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let out = d
        .eval(
            r#"
        counter = 100
        local w = require('@skein/worker').spawn { source = [[
            local count = 0
            return function(m)
                task.wait(0.01) -- the behaviour under test: a handler that yields
                count += m
                return { count = count, seen = counter }
            end
        ]] }
        w:send(1) w:send(2)
        local a, b = w:receive(20), w:receive(20)
        w:join(20)
        return { a.count, b.count, tostring(b.seen) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(number(&items[0]), 1.0);
    assert_eq!(number(&items[1]), 3.0);
    // The domain's globals are not the worker's.
    assert_eq!(text(&items[2]), "nil");
}

/// A domain with `world.get` / `world.set` over `world`, and `hostMark()` counting into `marks`.
fn world_domain(pool: &Pool, marks: &Marks) -> (ScriptDomain, crate::support::World) {
    world_domain_with(pool, marks.plan())
}

/// As `world_domain`, over `plan`.
fn world_domain_with(pool: &Pool, plan: Plan) -> (ScriptDomain, crate::support::World) {
    let d = ScriptDomain::new(pool, spec(plan)).unwrap();
    let world = crate::support::World::default();
    world.borrow_mut().insert(2, Message::Integer(41));
    d.register_query("world.get", crate::support::world_get(&world))
        .unwrap();
    d.register_command("world.set", crate::support::world_set(&world))
        .unwrap();
    (d, world)
}

#[test]
fn share_services_answers_a_query_from_the_engine_thread() {
    let pool = Pool::new(1);
    let marks = Marks::default();
    let (d, _world) = world_domain(&pool, &marks);
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn {
            name = 'reader', shareServices = true,
            source = 'return function(id) return world.get(id) end',
        }
        w:send(2)
        w:send(3)
        return { w:receive(5), tostring(w:receive(5)), w:join(5) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_eq!(number(&items[0]), 41.0);
    assert_eq!(text(&items[1]), "nil");
    assert_eq!(text(&items[2]), "stopped");
}

#[test]
fn share_services_commands_apply_at_the_next_frame() {
    let pool = Pool::new(1);
    let marks = Marks::default();
    let (d, world) = world_domain(&pool, &marks);
    d.exec(
        r#"
        writer = require('@skein/worker').spawn {
            name = 'writer', shareServices = true,
            source = 'return function(v) world.set(7, v) hostMark() return "done" end',
        }
        writer:send('written')
        "#,
    )
    .unwrap();
    // `hostMark` runs after `world.set` returned: the command is recorded.
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 1));
    // Recorded, not applied: only the engine thread applies (the world is not `Send`), and it
    // has not drained its mailbox since.
    assert!(world.borrow().get(&7).is_none());
    let report = d.frame(Duration::from_millis(16));
    assert_eq!(report.commands_applied, 1);
    assert_eq!(
        world.borrow().get(&7),
        Some(&Message::String("written".into()))
    );
    assert_eq!(text(&d.eval("return writer:receive(5)").unwrap()), "done");
}

#[test]
fn without_share_services_a_worker_has_no_service_names() {
    let pool = Pool::new(1);
    let marks = Marks::default();
    let (d, _world) = world_domain(&pool, &marks);
    for share in ["", "shareServices = false,"] {
        let out = d
            .eval(&format!(
                r#"
            local w = require('@skein/worker').spawn {{
                {share} source = 'return function() return type(world) end',
            }}
            w:send(1)
            return w:receive(5)
            "#
            ))
            .unwrap();
        assert_eq!(text(&out), "nil", "{share}");
    }
}

#[test]
fn a_service_denies_a_worker_by_the_worker_s_grant() {
    let pool = Pool::new(1);
    let marks = Marks::default();
    let (d, _world) = world_domain(&pool, &marks);
    d.register_query("input.peek", |()| {
        skein::capability::require_capability("input.observe").map_err(|e| e.to_string())?;
        Ok(Message::Boolean(true))
    })
    .unwrap();
    // The domain holds input.observe, so its own call passes; a worker given none is denied.
    assert_eq!(
        d.eval("return input.peek()").unwrap(),
        Message::Boolean(true)
    );
    let err = raised(
        &d,
        r#"
        local w = require('@skein/worker').spawn {
            name = 'nosy', shareServices = true, capabilities = { 'worker.spawn' },
            source = 'return function() return input.peek() end',
        }
        w:send(1)
        w:receive(5)
        "#,
    );
    assert_contains(&err, "worker 'nosy' (worker:nosy) failed at handler: ");
    assert_contains(
        &err,
        &format!(
            "engine service 'input.peek' failed: capability 'input.observe' \
             denied to domain 'actors' ({}, generation 1, worker 'nosy')",
            d.id()
        ),
    );
    assert_eq!(d.denials(), 1);
}

#[test]
fn a_command_that_requires_a_capability_refuses_the_worker_s_call_and_posts_nothing() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    let noted = std::rc::Rc::new(std::cell::Cell::new(0));
    let n = noted.clone();
    let observe = CapabilityId::new("input.observe").unwrap();
    d.register_command_requiring("input.note", observe, move |()| {
        n.set(n.get() + 1);
        Ok(())
    })
    .unwrap();
    // The worker, granted no input.observe, sees its own call refused with the text the
    // engine thread's caller would get, named for the worker.
    let seen = d
        .eval(
            r#"
            local w = require('@skein/worker').spawn {
                name = 'nosy', shareServices = true, capabilities = { 'worker.spawn' },
                source = 'return function() local _, err = pcall(input.note) return err end',
            }
            w:send(1)
            return w:receive(5)
            "#,
        )
        .unwrap();
    let refused = format!(
        "engine service 'input.note' failed: capability 'input.observe' denied to domain \
         'actors' ({}, generation 1, worker 'nosy')",
        d.id()
    );
    assert_eq!(text(&seen), refused);
    d.frame(Duration::from_millis(1));
    assert_eq!(noted.get(), 0, "a refused call was applied");
    assert_eq!(d.denials(), 1);
    let reports = d.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "capability");
    // The domain's own call passes, and applies.
    d.exec("input.note()").unwrap();
    assert_eq!(noted.get(), 1);
}

#[test]
fn a_restart_ends_a_query_wait_and_reports_the_worker_s_failure() {
    let pool = Pool::new(1);
    let mark = ThreadMark::default();
    let (mut d, _world) = world_domain_with(&pool, mark.plan(Plan::new()));
    let live = d.live_actors();
    d.exec(
        r#"
        local w = require('@skein/worker').spawn {
            name = 'waiter', shareServices = true,
            source = 'return function(id) threadMark() return world.get(id) end',
        }
        w:send(2)
        "#,
    )
    .unwrap();
    // The worker marked, then asked: once its thread sleeps, it is blocked on its query, and
    // nothing drains the mailbox until the restart.
    assert!(wait_until(Duration::from_secs(10), || mark.asleep()));
    d.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(live.get(), 0);
    let failures = d.take_actor_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].attribution.actor.as_deref(), Some("waiter"));
    assert_eq!(failures[0].stage, skein::actor::ActorStage::Handler);
    // The restart ended the wait: not an answer, and not the run budget (60 s by default).
    assert_eq!(
        failures[0].message,
        "world.get: worker 'waiter' waited for the engine's answer, but the domain ended it: \
         domain 'actors' restarted"
    );
}

#[test]
fn a_query_wait_never_outlasts_the_worker_s_run_budget() {
    let pool = Pool::new(1);
    let marks = Marks::default();
    let d = ScriptDomain::new(
        &pool,
        spec(marks.plan()).actor_budget(Duration::from_millis(100)),
    )
    .unwrap();
    d.register_query("world.get", |()| Ok(Message::Nil))
        .unwrap();
    d.exec(
        r#"
        local w = require('@skein/worker').spawn {
            name = 'patient', shareServices = true,
            source = 'return function() return world.get(1) end',
        }
        w:send(1)
        "#,
    )
    .unwrap();
    // Nothing drains the mailbox: the query is never answered, and the budget ends the wait.
    let failures = std::cell::RefCell::new(Vec::new());
    assert!(wait_until(Duration::from_secs(10), || {
        failures.borrow_mut().extend(d.take_actor_failures());
        !failures.borrow().is_empty()
    }));
    let failures = failures.into_inner();
    assert_eq!(failures[0].attribution.actor.as_deref(), Some("patient"));
    assert_eq!(
        failures[0].message,
        "deadline exceeded: one run took longer than 0.1 s"
    );
}

/// A domain whose context `waiter` (on demand) runs under a budget of `budget`, with a gate.
fn budgeted_domain(pool: &Pool, gate: &Gate, budget: Duration) -> ScriptDomain {
    let spec = spec(gate.plan(Plan::new()))
        .context(
            skein::ContextSpec::new("waiter")
                .phases([skein::Phase::OnDemand])
                .budget(budget),
        )
        .unwrap();
    ScriptDomain::new(pool, spec).unwrap()
}

/// Runs the `waiter` context's handler, then frames until the domain reports something (at
/// most 10 s); answers the reports and how long that took.
fn run_waiter(d: &ScriptDomain) -> (Vec<skein::Report>, Duration) {
    let started = Instant::now();
    d.run_phase(skein::Phase::OnDemand, &[]).unwrap();
    let reports = std::cell::RefCell::new(Vec::new());
    wait_until(Duration::from_secs(10), || {
        d.frame(Duration::from_millis(1));
        reports.borrow_mut().extend(d.take_reports());
        !reports.borrow().is_empty()
    });
    (reports.into_inner(), started.elapsed())
}

#[test]
fn receive_and_join_never_outlast_the_waiting_code_s_budget() {
    let pool = Pool::new(1);
    let gate = Gate::default();
    let d = budgeted_domain(&pool, &gate, Duration::from_millis(50));
    d.exec(
        r#"
        local worker = require('@skein/worker')
        quiet = worker.spawn { name = 'quiet', source = 'return function() end' }
        held = worker.spawn { name = 'held', source = 'return function() gate() end' }
        held:send(1)
        require('@skein/context').bind('waiter', { onDemand = function() wait() end })
        "#,
    )
    .unwrap();
    // Each wait asks for far longer than run_waiter waits for a report (10 s): a report at all
    // proves the budget ended it.
    for wait in ["quiet:receive(30)", "held:join(30)", "held:join()"] {
        d.exec(&format!("function wait() {wait} end")).unwrap();
        let (reports, took) = run_waiter(&d);
        assert_eq!(reports.len(), 1, "{wait}: {reports:?}");
        assert_eq!(reports[0].source, "context 'waiter' onDemand handler");
        assert_contains(
            &reports[0].message,
            "deadline exceeded: one run took longer than 0.05 s",
        );
        // The behaviour under test: the budget of 50 ms ran out.
        assert!(took >= Duration::from_millis(45), "{wait}: {took:?}");
    }
    gate.open();
}

#[test]
fn a_wait_shorter_than_the_budget_ends_as_before() {
    let pool = Pool::new(1);
    let gate = Gate::default();
    let d = budgeted_domain(&pool, &gate, Duration::from_millis(500));
    d.exec(
        r#"
        quiet = require('@skein/worker').spawn { name = 'quiet', source = 'return function() end' }
        require('@skein/context').bind('waiter', { onDemand = function()
            got = tostring(quiet:receive(0.05))
            local ok, err = pcall(function() quiet:join(0) end)
            joined = if ok then 'joined' else err
        end })
        "#,
    )
    .unwrap();
    let started = Instant::now();
    d.run_phase(skein::Phase::OnDemand, &[]).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        d.frame(Duration::from_millis(1));
        d.eval("return joined").unwrap() != Message::Nil
    }));
    // The behaviour under test: the receive waited its own 0.05 s.
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(text(&d.eval("return got").unwrap()), "nil");
    assert!(d.take_reports().is_empty());
    gate.open();
}

const WORK: &str = r#"
return {
    double = function(n) return n * 2 end,
    count = function(c) return c.last - c.first + 1 end,
}
"#;

#[test]
fn a_worker_dispatches_jobs_to_the_pool_and_awaits_them() {
    let tree = crate::support::Tree::new(&[("work.luau", WORK)]);
    let pool = Pool::new(2);
    let d = ScriptDomain::new(&pool, spec(Plan::new().root(tree.path()))).unwrap();
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn {
            name = 'boss',
            source = [[
                return function(n)
                    local doubled = jobs.dispatch('./work', 'double', n):await()
                    local parts = jobs.parallelFor('./work', 'count', 100, nil, { chunks = 4 }):await()
                    local total = 0
                    for _, part in parts do total += part end
                    return { doubled = doubled, total = total, chunks = #parts, context = tostring(jobs.context()) }
                end
            ]],
        }
        w:send(21)
        return w:receive(5)
        "#,
        )
        .unwrap();
    assert_eq!(number(crate::support::field(&out, "doubled")), 42.0);
    assert_eq!(number(crate::support::field(&out, "total")), 100.0);
    assert_eq!(number(crate::support::field(&out, "chunks")), 4.0);
    assert_eq!(text(crate::support::field(&out, "context")), "nil");
}

#[test]
fn a_worker_s_shared_queue_pop_is_woken_by_the_domain_s_push() {
    let pool = Pool::new(1);
    let mark = ThreadMark::default();
    let d = ScriptDomain::new(&pool, spec(mark.plan(Plan::new()))).unwrap();
    d.exec(
        r#"
        popper = require('@skein/worker').spawn {
            name = 'popper',
            source = 'return function() local q = jobs.shared.queue("work") threadMark() return q:pop() end',
        }
        popper:send(1)
        "#,
    )
    .unwrap();
    // The worker's pop parks until the domain pushes: it marked, then its thread sleeps.
    assert!(wait_until(Duration::from_secs(10), || mark.asleep()));
    let out = d
        .eval(
            r#"
        assert(popper:receive() == nil, 'nothing popped yet')
        jobs.shared.queue("work"):push({ job = 7 })
        return popper:receive(5)
        "#,
        )
        .unwrap();
    assert_eq!(number(crate::support::field(&out, "job")), 7.0);
}

#[test]
fn a_worker_waiting_on_a_job_is_torn_down_without_waiting_for_it() {
    // The job holds at the host's gate, and marks once it passes: the gate opens only after
    // the restart returned, so a restart that waited for the job would wait out the gate's
    // 10 s and find the job marked.
    let tree = crate::support::Tree::new(&[(
        "slow.luau",
        "return { nap = function() gate() hostMark() return 1 end }",
    )]);
    let pool = Pool::new(1);
    let (gate, marks, mark) = (Gate::default(), Marks::default(), ThreadMark::default());
    let plan = mark.plan(gate.plan(marks.plan().root(tree.path())));
    let mut d = ScriptDomain::new(&pool, spec(plan)).unwrap();
    let live = d.live_actors();
    d.exec(
        r#"
        local w = require('@skein/worker').spawn {
            name = 'waiting', source = "return function() local p = jobs.dispatch('./slow', 'nap') threadMark() return p:await() end",
        }
        w:send(1)
        "#,
    )
    .unwrap();
    // The job runs, and the worker that dispatched it sleeps in its await.
    assert!(wait_until(Duration::from_secs(10), || gate.arrived() == 1
        && mark.asleep()));
    d.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(live.get(), 0);
    assert_eq!(marks.count(), 0, "the restart waited for the job");
    gate.open();
}

#[test]
fn a_worker_s_engine_watchers_see_events_raised_before_its_next_message() {
    let pool = Pool::new(1);
    let d = domain(&pool);
    d.exec(
        r#"w = require('@skein/worker').spawn { name = 'watcher', source = [[
            local seen = {}
            engine.on('spawned', function(name) table.insert(seen, name) end)
            return function() return table.concat(seen, ',') end
        ]] }"#,
    )
    .unwrap();
    // The first message loads nothing new: no event yet.
    assert_eq!(text(&d.eval("w:send(1) return w:receive(10)").unwrap()), "");
    d.raise_engine_event("spawned", Message::String("orc".into()))
        .unwrap();
    d.raise_engine_event("spawned", Message::String("elf".into()))
        .unwrap();
    // The next message is the worker's start point: both watchers ran before its handler.
    assert_eq!(
        text(&d.eval("w:send(2) return w:receive(10)").unwrap()),
        "orc,elf"
    );
    assert_eq!(
        text(&d.eval("w:send(3) return w:receive(10)").unwrap()),
        "orc,elf",
        "each event is delivered once"
    );
}

#[test]
fn a_worker_whose_vm_reached_its_memory_limit_stops_even_when_failures_continue() {
    let pool = Pool::new(1);
    let d = ScriptDomain::new(
        &pool,
        spec(Plan::new().memory_limit(16 * 1024 * 1024)).actor_failures(FailurePolicy::Continue),
    )
    .unwrap();
    let out = d
        .eval(
            r#"
        local w = require('@skein/worker').spawn { name = 'hog', source = [[
            held = {}
            return function(m)
                if m == "bomb" then
                    -- Spawned tasks keep what they hold alive past the handler's failure.
                    for i = 1, 1e9 do
                        local hold = string.rep("x", 64 * 1024) .. i
                        -- The wait only keeps `hold` alive: the memory is what is under test.
                        task.spawn(function() task.wait(30) return hold end)
                    end
                end
                return m
            end
        ]] }
        w:send("bomb")
        w:send("after")
        local first = select(2, pcall(function() return w:receive(20) end))
        local second = select(2, pcall(function() return w:receive(20) end))
        return { tostring(first), tostring(second), w:join(20) }
        "#,
        )
        .unwrap();
    let items = crate::support::list(&out);
    assert_contains(
        &text(&items[0]),
        "worker 'hog' (worker:hog) failed at handler: ",
    );
    assert_contains(
        &text(&items[0]),
        "out of memory: the VM of a @skein/worker reached its memory limit of 16 MiB",
    );
    assert_contains(
        &text(&items[1]),
        "out of memory: the VM of a @skein/worker reached its memory limit of 16 MiB; the worker \
         stops, since its VM can't serve on",
    );
    assert_eq!(text(&items[2]), "failed");
    // The domain and its pool are untouched.
    assert_eq!(d.eval("return 1 + 1").unwrap(), Message::Number(2.0));
}
