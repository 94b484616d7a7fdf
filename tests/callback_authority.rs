//! A callback runs with the authority of the code that registered it, never the domain's whole
//! grant. Each test registers a callback from a context whose grant is
//! narrower than its domain's, then has the callback try what only the domain holds: the named
//! capability `audio.play` and a `@skein/fs` read below the domain's root. Every try must be
//! denied naming the context, counted, and must read nothing.
//!
//! The callback kinds: `engine.on` watchers (in the engine VM and in a worker VM), Luau
//! registered jobs (`run`, and a worker job's `input` and `apply`), the items of registered
//! worker and kernel jobs, jobs registered from a worker VM (their calls and the commands those
//! record), `jobs.onRelease` watchers, `jobs.warm` entries, and `events.on` handlers bound
//! without a context. Binding to a context that holds more than the binding code is refused.
//! Every test but the first failed on the code before the fix: the callback did what only the
//! domain may (a registered worker job's `input` ran with no authority at all).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::{ContextSpec, DomainSpec, MapKey, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, text, wait_until, Tree};

const SECRET: &str = "the domain's secret";

/// What the worker VMs run: every callback records what it tried in the module's `seen`.
const PROBE: &str = r#"
local fs = require("@skein/fs")
local SECRET_PATH = "@SECRET@"
local M = {}
local seen = {}
local function try(name)
    local ok, err = pcall(need, name)
    return if ok then "ok" else tostring(err)
end
local function tryRead(path)
    local ok, v = pcall(fs.readFile, path)
    return if ok then v else tostring(v)
end
M.try = try
function M.check(name) return try(name) end
function M.read(path) return tryRead(path) end
function M.watch(secret)
    engine.on("tick", function()
        seen.watch = try("audio.play")
        seen.watchRead = tryRead(secret)
    end)
    return true
end
function M.onRelease(secret)
    jobs.onRelease(function()
        seen.release = try("audio.play")
        seen.releaseRead = tryRead(secret)
    end)
    return true
end
function M.register(secret)
    jobs.register({ name = "remoteLuau", phase = "main", executor = { kind = "luau", run = function()
        if seen.remoteRun then return end
        seen.remoteRun = try("audio.play")
        seen.remoteRead = tryRead(secret)
        world.note()
    end } })
    jobs.register({ name = "remoteWorker", phase = "main", executor = { kind = "worker",
        module = "./probe", entry = "check",
        input = function()
            if seen.remoteInput then return nil end
            seen.remoteInput = try("audio.play")
            return "audio.play"
        end,
        apply = function(r)
            seen.remoteItem = r
            seen.remoteApply = try("audio.play")
        end } })
    return true
end
function M.warm()
    seen.warm = try("audio.play")
    seen.warmRead = tryRead(SECRET_PATH)
end
function M.seen() return seen end
return M
"#;

/// The engine VM's helpers, run by the host before each test's own code.
const HELPERS: &str = r#"
local fs = require("@skein/fs")
function try(name)
    local ok, err = pcall(need, name)
    return if ok then "ok" else tostring(err)
end
function tryRead(path)
    local ok, v = pcall(fs.readFile, path)
    return if ok then v else tostring(v)
end
seen = {}
"#;

fn set(names: &[&str]) -> CapabilitySet {
    names
        .iter()
        .map(|n| CapabilityId::new(n).expect("valid name"))
        .collect()
}

/// Domain `game`, granted `input.observe`, `audio.play` and `filesystem.read` below the tree;
/// its context `ui` (input phase) holds only `input.observe`. `world.note` is a command that
/// records whether `audio.play` was granted where it applied.
struct Fixture {
    tree: Tree,
    domain: ScriptDomain,
    notes: Rc<RefCell<Vec<bool>>>,
}

impl Fixture {
    fn new(pool: &Pool) -> Fixture {
        let tree = Tree::new(&[("secret.txt", SECRET)]);
        let secret = tree.path().join("secret.txt").display().to_string();
        tree.write("probe.luau", &PROBE.replace("@SECRET@", &secret));
        let plan = Plan::new().root(tree.path()).function("need", |lua, args| {
            let name: String = lua.unpack_multi(args)?;
            skein::capability::require_capability(&name)?;
            lua.pack_multi(true)
        });
        let grant = RootAuthority::new()
            .grant(set(&["input.observe", "audio.play"]))
            .read_root(tree.path())
            .expect("root");
        let spec = DomainSpec::new("game")
            .plan(plan)
            .grant(grant)
            .context(
                ContextSpec::new("ui")
                    .phases([Phase::Input])
                    .capabilities(set(&["input.observe"])),
            )
            .unwrap()
            .context(ContextSpec::new("all").phases([Phase::Update]))
            .unwrap();
        let domain = ScriptDomain::new(pool, spec).expect("domain");
        let notes = Rc::new(RefCell::new(Vec::new()));
        let seen = notes.clone();
        domain
            .register_command("world.note", move |()| {
                seen.borrow_mut()
                    .push(skein::capability::require_capability("audio.play").is_ok());
                Ok(())
            })
            .unwrap();
        domain.exec(HELPERS).unwrap();
        Fixture {
            tree,
            domain,
            notes,
        }
    }

    fn secret(&self) -> String {
        self.tree.path().join("secret.txt").display().to_string()
    }

    /// Binds `body` as a `ui` input handler (with `secret` in scope) and runs the input phase.
    fn as_ui(&self, body: &str) {
        let source = format!(
            "local secret = {:?}\nrequire(\"@skein/context\").bind(\"ui\", {{ input = function()\n{body}\nend }})",
            self.secret()
        );
        self.domain.exec(&source).unwrap();
        let report = self.domain.run_phase(Phase::Input, &[]).unwrap();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
    }

    /// The denial of `capability` to the `ui` context.
    fn denied(&self, capability: &str) -> String {
        format!(
            "capability '{capability}' denied to domain 'game' ({}, generation 1, context 'ui')",
            self.domain.id()
        )
    }

    /// Runs frames until the engine VM's `expr` is true, failing after 10 s.
    #[track_caller]
    fn frames_until(&self, expr: &str) {
        let source = format!("return {expr}");
        let held = wait_until(Duration::from_secs(10), || {
            self.domain.frame(Duration::from_millis(1));
            self.domain.eval(&source).unwrap() == Message::Boolean(true)
        });
        assert!(
            held,
            "`{expr}` never held: {:?}",
            self.domain.take_reports()
        );
    }

    /// The engine VM's `seen[key]`, which must be a string.
    #[track_caller]
    fn seen(&self, key: &str) -> String {
        text(&self.domain.eval(&format!("return seen.{key}")).unwrap())
    }

    /// The probe module's `seen[key]` in the (only) worker VM, read by a host dispatch.
    #[track_caller]
    fn worker_seen(&self, key: &str) -> String {
        let seen = self
            .domain
            .dispatch("./probe", "seen", Message::Nil)
            .unwrap()
            .wait()
            .unwrap();
        text(crate::support::field(&seen, key))
    }

    /// Asserts that what a callback tried was denied to `ui` and read nothing, and that the
    /// domain counted `denials` in all.
    #[track_caller]
    fn assert_denied(&self, tried: &str, read: &str, denials: u64) {
        assert_contains(tried, &self.denied("audio.play"));
        assert_contains(read, &self.denied("filesystem.read"));
        assert!(!read.contains(SECRET), "the secret was read: {read}");
        assert_eq!(self.domain.denials(), denials);
    }
}

/// The host's own code holds the whole grant: the same tries succeed, so a denial in a test
/// below is the context's, not a missing grant.
#[test]
fn the_domains_own_code_holds_what_the_callbacks_below_are_denied() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    let got = f
        .domain
        .eval(&format!(
            "return {{ try('audio.play'), tryRead({:?}) }}",
            f.secret()
        ))
        .unwrap();
    assert_eq!(
        got,
        Message::List(vec![
            Message::String("ok".into()),
            Message::String(SECRET.into())
        ])
    );
    assert_eq!(f.domain.denials(), 0);
}

#[test]
fn an_engine_watcher_a_context_registers_in_the_engine_vm_runs_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        engine.on("tick", function()
            seen.watch = try("audio.play")
            seen.watchRead = tryRead(secret)
            seen.watchOwn = try("input.observe")
        end)
        "#,
    );
    f.domain.raise_engine_event("tick", Message::Nil).unwrap();
    f.frames_until("seen.watch ~= nil");
    assert_eq!(f.seen("watchOwn"), "ok");
    f.assert_denied(&f.seen("watch"), &f.seen("watchRead"), 2);
}

#[test]
fn an_engine_watcher_an_item_of_a_context_registers_in_a_worker_vm_runs_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        seen.watching = jobs.dispatch("./probe", "watch", secret):await()
        "#,
    );
    f.frames_until("seen.watching == true");
    f.domain.raise_engine_event("tick", Message::Nil).unwrap();
    // The host's next item on that worker VM is its start point: the watcher runs before it.
    let watch = f.worker_seen("watch");
    let read = f.worker_seen("watchRead");
    f.assert_denied(&watch, &read, 2);
}

#[test]
fn a_luau_job_a_context_registers_runs_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        jobs.register({ name = "fromUi", phase = "main", executor = { kind = "luau", run = function()
            if seen.run then return end
            seen.run = try("audio.play")
            seen.runRead = tryRead(secret)
        end } })
        "#,
    );
    f.frames_until("seen.run ~= nil");
    f.assert_denied(&f.seen("run"), &f.seen("runRead"), 2);
}

#[test]
fn a_worker_job_a_context_registers_runs_its_input_item_and_apply_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        jobs.register({ name = "fromUi", phase = "main", executor = { kind = "worker",
            module = "./probe", entry = "read",
            input = function()
                if seen.input then return nil end
                seen.input = try("audio.play")
                return secret
            end,
            apply = function(r)
                seen.item = r
                seen.apply = try("audio.play")
            end } })
        "#,
    );
    f.frames_until("seen.apply ~= nil");
    // input (engine thread, called directly), the item's entry (a worker), apply (a task).
    assert_contains(&f.seen("input"), &f.denied("audio.play"));
    f.assert_denied(&f.seen("apply"), &f.seen("item"), 3);
}

#[test]
fn a_kernel_job_a_context_registers_runs_its_kernel_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.domain
        .register_kernel("play", |_| {
            Ok(Message::String(
                match skein::capability::require_capability("audio.play") {
                    Ok(()) => "ok".into(),
                    Err(e) => e.to_string().into(),
                },
            ))
        })
        .unwrap();
    f.as_ui(
        r#"
        local job
        job = jobs.register({ name = "fromUi", phase = "main", executor = { kind = "kernel",
            kernel = "play",
            apply = function(r) seen.kernel = r job:pause() end } })
        "#,
    );
    f.frames_until("seen.kernel ~= nil");
    assert_eq!(f.seen("kernel"), f.denied("audio.play"));
    assert_eq!(f.domain.denials(), 1);
}

#[test]
fn jobs_an_item_of_a_context_registers_in_a_worker_vm_run_and_record_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        seen.registered = jobs.dispatch("./probe", "register", secret):await()
        "#,
    );
    f.frames_until("seen.registered == true");
    let recorded = wait_until(Duration::from_secs(10), || {
        f.domain.frame(Duration::from_millis(1));
        !f.notes.borrow().is_empty() && f.worker_seen_opt("remoteApply").is_some()
    });
    assert!(recorded, "{:?}", f.domain.take_reports());
    // The luau job's run, and the command it recorded (applied on the engine thread).
    let run = f.worker_seen("remoteRun");
    let read = f.worker_seen("remoteRead");
    assert_contains(&run, &f.denied("audio.play"));
    assert_contains(&read, &f.denied("filesystem.read"));
    assert!(!read.contains(SECRET), "the secret was read: {read}");
    assert_eq!(*f.notes.borrow(), [false]);
    // The worker job's input, entry and apply, all in that VM.
    for key in ["remoteInput", "remoteItem", "remoteApply"] {
        assert_contains(&f.worker_seen(key), &f.denied("audio.play"));
    }
    // Five tries in the VM, and the command's check on the engine thread.
    assert_eq!(f.domain.denials(), 6);
}

#[test]
fn a_release_watcher_an_item_of_a_context_registers_runs_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        seen.watching = jobs.dispatch("./probe", "onRelease", secret, { key = "k" }):await()
        "#,
    );
    f.frames_until("seen.watching == true");
    assert!(f.domain.release("k").unwrap());
    let released = wait_until(Duration::from_secs(10), || {
        f.worker_seen_opt("release").is_some()
    });
    assert!(released, "{:?}", f.domain.take_reports());
    let release = f.worker_seen("release");
    let read = f.worker_seen("releaseRead");
    f.assert_denied(&release, &read, 2);
}

#[test]
fn a_warm_entry_a_context_asks_for_runs_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        jobs.warm("./probe", "warm"):await()
        seen.warmed = true
        "#,
    );
    f.frames_until("seen.warmed == true");
    let warm = f.worker_seen("warm");
    let read = f.worker_seen("warmRead");
    f.assert_denied(&warm, &read, 2);
}

#[test]
fn an_event_handler_a_context_binds_without_naming_one_runs_as_that_context() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        require("@skein/events").on("hit", function()
            seen.hit = try("audio.play")
            seen.hitRead = tryRead(secret)
            seen.hitOwn = try("input.observe")
        end)
        "#,
    );
    f.domain
        .exec(r#"require("@skein/events").emit("hit", 1)"#)
        .unwrap();
    let report = f.domain.drain_events();
    assert_eq!(report.delivered, 1);
    assert_eq!(f.seen("hitOwn"), "ok");
    f.assert_denied(&f.seen("hit"), &f.seen("hitRead"), 2);
    // Bound by the domain's own code, the same handler holds the whole grant.
    f.domain
        .exec(
            r#"
            require("@skein/events").on("host", function() seen.host = try("audio.play") end)
            require("@skein/events").emit("host", 1)
            "#,
        )
        .unwrap();
    f.domain.drain_events();
    assert_eq!(f.seen("host"), "ok");
    assert_eq!(f.domain.denials(), 2);
}

impl Fixture {
    /// The probe module's `seen[key]` in the worker VM, or `None` while it is unset.
    fn worker_seen_opt(&self, key: &str) -> Option<String> {
        let seen = self
            .domain
            .dispatch("./probe", "seen", Message::Nil)
            .unwrap()
            .wait()
            .unwrap();
        match seen {
            Message::Map(entries) => entries.iter().find_map(|(k, v)| match (k, v) {
                (MapKey::String(k), Message::String(v)) if &k[..] == key.as_bytes() => {
                    Some(String::from_utf8_lossy(v).into_owned())
                }
                _ => None,
            }),
            _ => None,
        }
    }
}

/// Naming a context that holds more than the binding code is refused at the call, and nothing
/// is bound: otherwise a narrow context's handler could bind to a wider one and run there.
#[test]
fn binding_to_a_context_that_holds_more_than_the_binding_code_is_refused_and_binds_nothing() {
    let pool = Pool::new(1);
    let f = Fixture::new(&pool);
    f.as_ui(
        r#"
        local function refused(ok, err)
            return if ok then "bound" else tostring(err)
        end
        seen.onAll = refused(pcall(require("@skein/events").on, "wide", function()
            seen.wide = try("audio.play")
        end, "all"))
        seen.bindAll = refused(pcall(require("@skein/context").bind, "all", { update = function()
            seen.update = try("audio.play")
        end }))
        -- Its own context, or one that holds no more than it, is fine.
        seen.onUi = refused(pcall(require("@skein/events").on, "narrow", function()
            seen.narrow = try("audio.play")
        end, "ui"))
        "#,
    );
    let wider = "would hold capabilities the binding code does not: audio.play, filesystem.read";
    assert_contains(
        &f.seen("onAll"),
        &format!("events.on: a handler bound to context 'all' {wider}"),
    );
    assert_contains(
        &f.seen("bindAll"),
        &format!("context.bind: a handler bound to context 'all' {wider}"),
    );
    assert_eq!(f.seen("onUi"), "bound");
    f.domain
        .exec(
            r#"
            require("@skein/events").emit("wide", 1)
            require("@skein/events").emit("narrow", 1)
            "#,
        )
        .unwrap();
    let report = f.domain.drain_events();
    assert_eq!((report.delivered, report.unhandled), (1, 1));
    let update = f.domain.run_phase(Phase::Update, &[]).unwrap();
    assert_eq!(update.calls, 0);
    assert_eq!(
        f.domain
            .eval("return { seen.wide == nil, seen.update == nil }")
            .unwrap(),
        Message::List(vec![Message::Boolean(true), Message::Boolean(true)])
    );
    assert_contains(&f.seen("narrow"), &f.denied("audio.play"));
    // A refused bind is not a capability check: only the narrow handler's try counted.
    assert_eq!(f.domain.denials(), 1);
}
