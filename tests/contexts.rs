//! Contexts and the scheduler: `@skein/context` binding and its refusals, the run order
//! (priority, then declaration, then bind order), `advance`'s fixed steps and catch-up drops,
//! handler failures and budgets as diagnostics, the lifecycle states and re-entrancy.

use std::rc::{Rc, Weak};
use std::time::Duration;

use skein::frame::FixedStep;
use skein::lifecycle::DomainState;
use skein::{ContextSpec, DomainSpec, Error, Message, NativeMode, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, map, string, Tree};

fn game_spec() -> DomainSpec {
    DomainSpec::new("game")
        .context(ContextSpec::new("ui").phases([Phase::Update, Phase::Input]))
        .unwrap()
        .context(
            ContextSpec::new("world")
                .phases([Phase::FixedUpdate, Phase::Update])
                .priority(10),
        )
        .unwrap()
        .context(ContextSpec::new("audio").phases([Phase::Update]))
        .unwrap()
}

fn bind_error(domain: &ScriptDomain, body: &str) -> String {
    let source = format!("local context = require('@skein/context')\n{body}");
    match domain.eval(&source) {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_bind_refusal_names_what_is_wrong() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    assert_contains(
        &bind_error(&domain, "context.bind('physics', {})"),
        "context.bind: no context named 'physics' is declared (declared: ui, world, audio)",
    );
    assert_contains(
        &bind_error(&domain, "context.bind(7, {})"),
        "context.bind: name must be a string, got a number",
    );
    assert_contains(
        &bind_error(&domain, "context.bind('ui', function() end)"),
        "context.bind: handlers must be a table of phase = function, got a function",
    );
    assert_contains(
        &bind_error(&domain, "context.bind('ui', { render = function() end })"),
        "context.bind: 'render' is not a phase (phases: load, startup, fixedUpdate, update, \
         lateUpdate, input, renderPrepare, message, timer, event, onDemand, shutdown)",
    );
    assert_contains(
        &bind_error(
            &domain,
            "context.bind('ui', { fixedUpdate = function() end })",
        ),
        "context.bind: context 'ui' does not schedule the 'fixedUpdate' phase (it schedules: \
         update, input)",
    );
    assert_contains(
        &bind_error(&domain, "context.bind('ui', { update = 5 })"),
        "context.bind: the 'update' handler for context 'ui' must be a function, got a number",
    );
    assert_contains(
        &bind_error(&domain, "context.bind('ui', { [1] = function() end })"),
        "context.bind: handler keys are phase names, got a number",
    );
    // A refused bind binds nothing, not even its good entries.
    assert_contains(
        &bind_error(
            &domain,
            "context.bind('ui', { input = function() end, update = 'x' })",
        ),
        "the 'update' handler for context 'ui' must be a function, got a string",
    );
    let report = domain.run_phase(Phase::Input, &[]).unwrap();
    assert_eq!(report.calls, 0);
}

#[test]
fn a_bind_refusal_quotes_a_64_mib_name_in_part_and_names_the_least_bad_key() {
    // The refusal quoted the name whole: a 64 MiB name made a 64 MiB text, which a VM holding
    // more than half its limit could not make, so the script saw its memory run out instead.
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    let err = bind_error(
        &domain,
        "context.bind(string.rep('p', 64 * 1024 * 1024), {})",
    );
    assert_contains(
        &err,
        &format!(
            "context.bind: no context named '{}...' (67108864 bytes) is declared (declared: ui, \
             world, audio)",
            "p".repeat(256)
        ),
    );
    assert!(err.len() < 1024, "{}", err.len());
    // Of many faults the least key's is named, whatever the table's order, and a table of a
    // hundred thousand of them is read without keeping them.
    let err = bind_error(
        &domain,
        "local t = {} for i = 1, 100000 do t['k' .. i] = i end t.a = 1 t.update = 5 \
         context.bind('ui', t)",
    );
    assert_contains(
        &err,
        "context.bind: 'a' is not a phase (phases: load, startup, fixedUpdate, update, \
         lateUpdate, input, renderPrepare, message, timer, event, onDemand, shutdown)",
    );
}

#[test]
fn context_declarations_are_checked() {
    let spec = DomainSpec::new("x").context(ContextSpec::new("a")).unwrap();
    let dup = spec.clone().context(ContextSpec::new("a")).unwrap_err();
    assert_eq!(
        dup.to_string(),
        "context: a context named 'a' is declared already"
    );
    let empty = spec.clone().context(ContextSpec::new("")).unwrap_err();
    assert_eq!(
        empty.to_string(),
        "context: a context name is 1 to 64 bytes, got 0 bytes"
    );
    let long = spec
        .clone()
        .context(ContextSpec::new("n".repeat(65)))
        .unwrap_err();
    assert_eq!(
        long.to_string(),
        "context: a context name is 1 to 64 bytes, got 65 bytes"
    );
    assert!(spec
        .clone()
        .context(ContextSpec::new("n".repeat(64)))
        .is_ok());
    let zero = spec
        .context(ContextSpec::new("z").budget(Duration::ZERO))
        .unwrap_err();
    assert_contains(&zero.to_string(), "context 'z': a budget is more than 0");
    let pool = Pool::new(1);
    let step = FixedStep {
        step: Duration::ZERO,
        max_catch_up: 1,
    };
    let err = ScriptDomain::new(&pool, DomainSpec::new("x").fixed_step(step))
        .err()
        .expect("a zero step is refused");
    assert_eq!(
        err.to_string(),
        "fixed_step: the step must be longer than 0"
    );
}

#[test]
fn handlers_run_by_priority_then_declaration_then_bind_order() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            seen = {}
            local function note(tag) return function(dt) table.insert(seen, tag) end end
            context.bind("audio", { update = note("audio") })
            context.bind("ui", { update = note("ui 1") })
            context.bind("world", { update = note("world") })
            -- A second bind to the same context and phase appends.
            context.bind("ui", { update = note("ui 2") })
            "#,
        )
        .unwrap();
    let report = domain
        .run_phase(Phase::Update, &[Message::Number(0.5)])
        .unwrap();
    assert_eq!(report.phase, Phase::Update);
    assert_eq!(report.calls, 4);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // world (priority 10), then ui and audio (priority 0) as declared, ui's two in bind order.
    assert_eq!(
        domain.eval("return table.concat(seen, ',')").unwrap(),
        string("world,ui 1,ui 2,audio")
    );
    // A phase nobody bound calls nothing.
    assert_eq!(domain.run_phase(Phase::Timer, &[]).unwrap().calls, 0);
}

#[test]
fn a_handler_bound_during_a_phase_runs_from_its_next_run() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            seen = {}
            context.bind("audio", { update = function()
                table.insert(seen, "audio")
                if #seen == 1 then
                    -- world runs before audio; bound now, it waits for the next update.
                    context.bind("world", { update = function() table.insert(seen, "world") end })
                end
            end })
            "#,
        )
        .unwrap();
    assert_eq!(domain.run_phase(Phase::Update, &[]).unwrap().calls, 1);
    assert_eq!(domain.run_phase(Phase::Update, &[]).unwrap().calls, 2);
    assert_eq!(
        domain.eval("return table.concat(seen, ',')").unwrap(),
        string("audio,world,audio")
    );
}

#[test]
fn handlers_receive_copies_of_the_arguments() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    domain
        .exec(
            r#"
            got = {}
            require("@skein/context").bind("ui", { input = function(key, t)
                t.n += 1
                table.insert(got, key .. t.n)
            end })
            require("@skein/context").bind("ui", { input = function(key, t)
                table.insert(got, key .. t.n)
            end })
            "#,
        )
        .unwrap();
    let args = [string("k"), map(&[("n", Message::Number(1.0))])];
    let report = domain.run_phase(Phase::Input, &args).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // The first handler's change to its table is not seen by the second.
    assert_eq!(
        domain.eval("return table.concat(got, ',')").unwrap(),
        string("k2,k1")
    );
}

#[test]
fn advance_runs_the_owed_fixed_steps_and_drops_past_the_catch_up_limit() {
    let pool = Pool::new(1);
    let spec = game_spec().fixed_step(FixedStep {
        step: Duration::from_millis(10),
        max_catch_up: 3,
    });
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            log = {}
            context.bind("world", {
                fixedUpdate = function(dt) table.insert(log, "fixed " .. dt) end,
                update = function(dt) table.insert(log, "update " .. dt) end,
            })
            "#,
        )
        .unwrap();
    let r = domain.advance(Duration::from_millis(25)).unwrap();
    assert_eq!((r.fixed_steps, r.dropped_steps), (2, 0));
    // The first frame's startup, 2 fixed, update, lateUpdate.
    let names: Vec<Phase> = r.phases.iter().map(|p| p.phase).collect();
    assert_eq!(
        names,
        [
            Phase::Startup,
            Phase::FixedUpdate,
            Phase::FixedUpdate,
            Phase::Update,
            Phase::LateUpdate
        ]
    );
    assert_eq!(
        domain.eval("return table.concat(log, ',')").unwrap(),
        string("fixed 0.01,fixed 0.01,update 0.025")
    );
    // 5 ms carried over: +4 ms owes nothing.
    let r = domain.advance(Duration::from_millis(4)).unwrap();
    assert_eq!((r.fixed_steps, r.dropped_steps), (0, 0));
    // 9 ms carried: +101 ms = 110 ms owes 11 steps; 3 run, 8 are dropped.
    let r = domain.advance(Duration::from_millis(101)).unwrap();
    assert_eq!((r.fixed_steps, r.dropped_steps), (3, 8));
    // The dropped time is gone: only a step's remainder (0) carries, so +10 ms owes exactly 1.
    let r = domain.advance(Duration::from_millis(10)).unwrap();
    assert_eq!((r.fixed_steps, r.dropped_steps), (1, 0));
    assert_eq!(
        domain
            .eval("local n = 0 for _, l in log do if l:sub(1, 5) == 'fixed' then n += 1 end end return n")
            .unwrap(),
        Message::Number(6.0)
    );
    // The frame at the end of each advance ran.
    assert_eq!(r.frame.time, Duration::from_millis(140));
    assert!(r.errors().next().is_none());
}

#[test]
fn advance_ends_with_an_engine_frame() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    // The behaviour under test: a wait of one frame ends at the advance's frame.
    domain.exec("task.waitFrames(1) woke = true").unwrap();
    let before = domain.frames();
    let r = domain.advance(Duration::from_millis(16)).unwrap();
    assert_eq!(r.frame.frame, before + 1);
    assert_eq!(domain.eval("return woke").unwrap(), Message::Boolean(true));
}

#[test]
fn a_failing_handler_is_a_diagnostic_and_the_next_handler_runs() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            ran = {}
            context.bind("world", { update = function() error("world broke") end })
            context.bind("ui", { update = function() table.insert(ran, "ui") end })
            context.bind("audio", { update = function() table.insert(ran, "audio") end })
            "#,
        )
        .unwrap();
    for _ in 0..2 {
        let report = domain.run_phase(Phase::Update, &[]).unwrap();
        assert_eq!(report.calls, 3);
        assert_eq!(report.errors.len(), 1);
        let d = &report.errors[0];
        assert_eq!(d.attribution.domain, domain.id());
        assert_eq!(d.attribution.generation, domain.generation());
        assert_eq!(d.attribution.context.as_deref(), Some("world"));
        assert_eq!(d.phase, Some(Phase::Update));
        assert_contains(&d.message, "world broke");
        assert_contains(
            &d.to_string(),
            &format!(
                "domain '{}' ({}, generation 1, context 'world'): update handler failed: ",
                domain.name(),
                domain.id()
            ),
        );
    }
    assert_eq!(
        domain.eval("return table.concat(ran, ',')").unwrap(),
        string("ui,audio,ui,audio")
    );
    // The domain is still up.
    assert_eq!(domain.state(), DomainState::Running);
}

in_both_modes!(a_handler_past_its_context_budget_is_stopped_and_reported);
fn a_handler_past_its_context_budget_is_stopped_and_reported(mode: NativeMode) {
    let pool = Pool::new(1);
    let spec = DomainSpec::new("game")
        .context(
            ContextSpec::new("spin")
                .phases([Phase::OnDemand])
                .priority(1)
                .budget(Duration::from_millis(50)),
        )
        .unwrap()
        .context(ContextSpec::new("after").phases([Phase::OnDemand]))
        .unwrap()
        .plan(Plan::new().native(mode));
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .exec(
            r#"
            local context = require("@skein/context")
            context.bind("spin", { onDemand = function() while true do end end })
            context.bind("after", { onDemand = function() after = true end })
            "#,
        )
        .unwrap();
    let report = domain.run_phase(Phase::OnDemand, &[]).unwrap();
    assert_eq!(report.calls, 2);
    assert_eq!(report.errors.len(), 1);
    assert_eq!(
        report.errors[0].attribution.context.as_deref(),
        Some("spin")
    );
    assert_contains(&report.errors[0].message, "deadline");
    // The budget under test: spin ran its 50 ms.
    assert!(report.elapsed >= Duration::from_millis(50));
    let timed: Vec<&str> = report.timings.iter().map(|t| &*t.context).collect();
    assert_eq!(timed, ["spin", "after"]);
    assert!(report.timings[0].elapsed >= Duration::from_millis(50));
    // Each handler's timing is its own: the two fit in the phase, so after's does not carry
    // spin's 50 ms.
    assert!(
        report.timings[0].elapsed + report.timings[1].elapsed <= report.elapsed,
        "{report:?}"
    );
    // A hang guard, not a timing claim: the budget ended the spin long before this.
    assert!(
        report.elapsed < Duration::from_secs(10),
        "{:?}",
        report.elapsed
    );
    assert_eq!(domain.eval("return after").unwrap(), Message::Boolean(true));
}

#[test]
fn a_handler_that_yields_goes_on_as_a_task_and_its_later_failure_is_reported() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, game_spec()).unwrap();
    domain
        .exec(
            r#"
            require("@skein/context").bind("ui", { input = function()
                task.waitFrames(1) -- the yield under test: the handler goes on as a task
                error("late failure")
            end })
            "#,
        )
        .unwrap();
    let report = domain.run_phase(Phase::Input, &[]).unwrap();
    assert_eq!((report.calls, report.errors.len()), (1, 0));
    domain.frame(Duration::from_millis(1));
    domain.frame(Duration::from_millis(1));
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "context 'ui' input handler");
    assert_contains(&reports[0].message, "late failure");
}

#[test]
fn lifecycle_states_through_a_scripts_life() {
    let pool = Pool::new(1);
    let tree = Tree::new(&[
        (
            "main.luau",
            // The wait is under test: a script that waits is still loading.
            "require('@skein/context').bind('ui', { update = function() end }) task.wait(0.02)",
        ),
        ("bad.luau", "error('bad script')"),
    ]);
    let spec = game_spec().plan(Plan::new().root(tree.path()));
    let mut domain = ScriptDomain::new(&pool, spec).unwrap();
    assert_eq!(domain.state(), DomainState::Ready);
    domain.run_file(tree.path().join("main.luau"), &[]).unwrap();
    // The script waits: it is still loading.
    assert_eq!(domain.state(), DomainState::Loading);
    domain.run_until_idle().unwrap();
    assert_eq!(domain.state(), DomainState::Ready);
    domain.advance(Duration::from_millis(16)).unwrap();
    assert_eq!(domain.state(), DomainState::Running);
    // More code for a running domain leaves it running, even when it fails.
    domain.exec("error('oops')").unwrap();
    assert_eq!(domain.state(), DomainState::Running);
    domain.stop();
    assert_eq!(domain.state(), DomainState::Stopped);
    let err = domain.advance(Duration::from_millis(16)).unwrap_err();
    assert_eq!(err.to_string(), "advance: domain 'game' is stopped");
    domain.stop();
    assert_eq!(domain.state(), DomainState::Stopped);

    let failing =
        ScriptDomain::new(&pool, game_spec().plan(Plan::new().root(tree.path()))).unwrap();
    failing.run_file(tree.path().join("bad.luau"), &[]).unwrap();
    assert_eq!(failing.state(), DomainState::Failed);
    let syntax = ScriptDomain::new(&pool, game_spec()).unwrap();
    assert!(syntax.exec("this is not luau").is_err());
    assert_eq!(syntax.state(), DomainState::Failed);
    syntax.exec("x = 1").unwrap();
    assert_eq!(syntax.state(), DomainState::Ready);
}

#[test]
fn stop_and_restart_run_shutdown_handlers_and_drop_bindings() {
    let pool = Pool::new(1);
    let spec = game_spec()
        .context(ContextSpec::new("end").phases([Phase::Shutdown]))
        .unwrap();
    let mut domain = ScriptDomain::new(&pool, spec).unwrap();
    let log = Rc::new(std::cell::RefCell::new(Vec::new()));
    let sink = log.clone();
    domain
        .register_command("host.note", move |note: Message| {
            sink.borrow_mut().push(note);
            Ok(())
        })
        .unwrap();
    domain
        .exec("require('@skein/context').bind('ui', { update = function() end })")
        .unwrap();
    domain
        .exec(
            "require('@skein/context').bind('end', { shutdown = function() host.note('restarting') end })",
        )
        .unwrap();
    domain.run_phase(Phase::Update, &[]).unwrap();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    // The old generation's shutdown handler ran, once, before it ended.
    assert_eq!(*log.borrow(), vec![string("restarting")]);
    log.borrow_mut().clear();
    // It was running, so it starts again (an empty load binds nothing for `startup`).
    assert_eq!(domain.state(), DomainState::Running);
    assert_eq!(domain.run_phase(Phase::Update, &[]).unwrap().calls, 0);
    assert_eq!(domain.contexts().len(), 4);
    domain
        .exec(
            "require('@skein/context').bind('end', { shutdown = function() host.note('bye') end })",
        )
        .unwrap();
    drop(domain);
    assert_eq!(*log.borrow(), vec![string("bye")]);
}

#[test]
fn a_worker_vm_cannot_bind() {
    let pool = Pool::new(1);
    let tree = Tree::new(&[(
        "w.luau",
        "return { go = function() require('@skein/context').bind('ui', {}) end }",
    )]);
    let domain = ScriptDomain::new(&pool, game_spec().plan(Plan::new().root(tree.path()))).unwrap();
    let err = domain
        .eval("return jobs.dispatch('./w', 'go'):await()")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "context.bind: handlers bind only in the engine VM; a worker VM runs jobs, not phases",
    );
}

#[test]
fn a_handler_re_entering_the_scheduler_gets_reentrant() {
    let pool = Pool::new(1);
    let domain = Rc::new(ScriptDomain::new(&pool, game_spec()).unwrap());
    let weak: Weak<ScriptDomain> = Rc::downgrade(&domain);
    domain
        .register_query(
            "host.tick",
            move |()| -> Result<Message, skein::ServiceError> {
                let domain = weak.upgrade().expect("domain alive");
                let a = domain.run_phase(Phase::Input, &[]).unwrap_err();
                let b = domain.advance(Duration::from_millis(1)).unwrap_err();
                assert!(matches!(a, Error::Reentrant("run_phase")));
                assert!(matches!(b, Error::Reentrant("advance")));
                let frame = domain.frame(Duration::from_millis(1));
                assert_eq!(frame.commands_applied, 0);
                Err(b.to_string().into())
            },
        )
        .unwrap();
    domain
        .exec(
            r#"
            require("@skein/context").bind("ui", { update = function() host.tick() end })
            "#,
        )
        .unwrap();
    let report = domain.run_phase(Phase::Update, &[]).unwrap();
    assert_eq!(report.errors.len(), 1);
    assert_contains(
        &report.errors[0].message,
        "advance: re-entered the scheduler of a domain from one of its own handlers; queue an \
         event or a task for the next frame instead",
    );
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "frame");
    assert_contains(&reports[0].message, "frame: re-entered the scheduler");
    // Once the phase is over the scheduler is free again.
    assert!(domain.run_phase(Phase::Input, &[]).is_ok());
}

/// The `@skein/context` example of docs/luau-api.md, run with the context it needs.
#[test]
fn the_luau_api_context_example_runs() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/luau-api.md"),
    )
    .unwrap();
    let start = text
        .find("```luau\nlocal context = require(\"@skein/context\")")
        .expect("the example is in docs/luau-api.md");
    let body = &text[start + "```luau\n".len()..];
    let body = &body[..body.find("\n```").unwrap()];
    let pool = Pool::new(1);
    let spec = DomainSpec::new("docs")
        .context(ContextSpec::new("main").phases([
            Phase::Startup,
            Phase::FixedUpdate,
            Phase::Update,
        ]))
        .unwrap();
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain.eval(body).unwrap();
    let startup = domain.run_phase(Phase::Startup, &[]).unwrap();
    assert_eq!((startup.calls, startup.errors.len()), (1, 0));
    let advance = domain.advance(Duration::from_millis(40)).unwrap();
    assert_eq!(advance.fixed_steps, 2);
    assert_eq!(advance.errors().count(), 0);
}
