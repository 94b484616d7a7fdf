//! Capabilities: the name rules, the delegation math, deny by default, authority that follows
//! a task across yields and onto workers, and the runner's grant flags with `@skein/fs`.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use skein::capability::{CapabilityError, CapabilityId, CapabilitySet, RootAuthority};
use skein::{ContextSpec, DomainSpec, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, skein_in, wait_until, Tree};

fn id(name: &str) -> CapabilityId {
    CapabilityId::new(name).expect("valid name")
}

fn set(names: &[&str]) -> CapabilitySet {
    names.iter().map(|n| id(n)).collect()
}

/// A plan with `need(name)`: a host function that checks `name` at its entry, as a native
/// service would.
fn plan(tree: &Tree) -> Plan {
    Plan::new().root(tree.path()).function("need", |lua, args| {
        let name: String = lua.unpack_multi(args)?;
        skein::capability::require_capability(&name)?;
        lua.pack_multi(true)
    })
}

fn domain(pool: &Pool, tree: &Tree, name: &str, granted: &[&str]) -> ScriptDomain {
    let grant = RootAuthority::new().grant(set(granted));
    ScriptDomain::new(pool, DomainSpec::new(name).plan(plan(tree)).grant(grant)).expect("domain")
}

const PROBE: &str = r#"
return {
    probe = function(args)
        local a = pcall(need, args.own)
        local b = pcall(need, args.other)
        mark(args.own .. ":before")
        -- The yield under test: parked until the host pushes to its domain's queue "go".
        jobs.shared.queue("go"):pop()
        mark(args.own .. ":after")
        local c = pcall(need, args.own)
        local d = pcall(need, args.other)
        return { a, b, c, d }
    end,
    check = function(name) return need(name) end,
    query = function() return world.check() end,
}
"#;

fn denial_text(domain: &ScriptDomain, capability: &str) -> String {
    format!(
        "capability '{capability}' denied to domain '{}' (domain#{}, generation 1)",
        domain.name(),
        domain.id().get()
    )
}

#[test]
fn names_are_checked_and_a_bad_one_is_named() {
    assert_eq!(id("filesystem.read").as_str(), "filesystem.read");
    let at = "a".repeat(CapabilityId::MAX_LEN);
    assert!(CapabilityId::new(&at).is_ok());
    let past = "a".repeat(CapabilityId::MAX_LEN + 1);
    assert_eq!(
        CapabilityId::new(&past).unwrap_err().to_string(),
        format!("invalid capability name '{past}': a name is 1 to 128 bytes")
    );
    for bad in ["Filesystem.read", "filesystem..read", "9lives", "a-b", ""] {
        let err = CapabilityId::new(bad).unwrap_err();
        assert_eq!(err.name, bad);
        assert_contains(
            &err.to_string(),
            &format!("invalid capability name '{bad}'"),
        );
    }
}

#[test]
fn delegation_only_shrinks_and_names_every_missing_capability() {
    let held = set(&["filesystem.read", "input.observe", "worker.spawn"]);
    let child = held.delegate(&set(&["worker.spawn"])).expect("a subset");
    assert!(child.is_subset(&held));
    assert!(!held.is_subset(&child));
    assert!(set(&[]).is_subset(&child));
    assert_eq!(
        child.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        ["worker.spawn"]
    );
    let err = held
        .delegate_as(
            "domain 'editor'",
            &set(&["worker.spawn", "net.connect", "audio.play"]),
        )
        .unwrap_err();
    assert_eq!(err.missing, vec![id("audio.play"), id("net.connect")]);
    assert_eq!(
        err.to_string(),
        "domain 'editor' cannot delegate capabilities it does not hold: audio.play, net.connect"
    );
}

#[test]
fn a_domain_holds_nothing_by_default_and_denials_are_counted_and_reported() {
    let tree = Tree::new(&[]);
    let pool = Pool::new(1);
    let d = ScriptDomain::new(&pool, DomainSpec::new("plain").plan(plan(&tree))).unwrap();
    assert!(d.grant().capabilities().is_empty());
    let err = d
        .eval("return need('input.observe')")
        .unwrap_err()
        .to_string();
    assert_contains(&err, &denial_text(&d, "input.observe"));
    assert_eq!(d.denials(), 1);
    let reports = d.take_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].source, "capability");
    assert_eq!(reports[0].message, denial_text(&d, "input.observe"));
    assert!(d.take_reports().is_empty());
    // Outside any task, no authority is installed: a distinct answer, not counted.
    let outside = skein::capability::require_capability("input.observe").unwrap_err();
    assert!(matches!(outside, CapabilityError::NoAuthority(_)));
    assert_eq!(
        outside.to_string(),
        "capability 'input.observe' was checked outside any task: no authority is installed on this thread"
    );
    assert_eq!(d.denials(), 1);
}

#[test]
fn a_restart_keeps_the_grant_and_attributes_denials_to_the_new_generation() {
    let tree = Tree::new(&[("probe.luau", PROBE)]);
    let pool = Pool::new(1);
    let mut d = domain(&pool, &tree, "a", &["x.a"]);
    assert!(d.eval("return need('x.b')").is_err());
    d.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(
        d.eval("return need('x.a')").unwrap(),
        Message::Boolean(true)
    );
    let err = d
        .dispatch("./probe", "check", Message::String("x.b".into()))
        .unwrap()
        .wait()
        .unwrap_err()
        .to_string();
    let text = format!(
        "capability 'x.b' denied to domain 'a' (domain#{}, generation 2)",
        d.id().get()
    );
    assert_contains(&err, &text);
    assert_eq!(d.denials(), 2);
}

#[test]
fn a_grant_holds_in_the_engine_vm_and_in_dispatched_items() {
    let tree = Tree::new(&[("probe.luau", PROBE)]);
    let pool = Pool::new(1);
    // The domain holds x.a and x.b; its context `narrow` only x.a, so an item's authority (the
    // dispatching task's) and the domain's grant answer differently for x.b.
    let spec = DomainSpec::new("a")
        .plan(plan(&tree))
        .grant(RootAuthority::new().grant(set(&["x.a", "x.b"])))
        .context(
            ContextSpec::new("narrow")
                .phases([Phase::OnDemand])
                .capabilities(set(&["x.a"])),
        )
        .unwrap();
    let d = ScriptDomain::new(&pool, spec).unwrap();
    assert_eq!(
        d.eval("return need('x.a') and need('x.b')").unwrap(),
        Message::Boolean(true)
    );
    // Dispatched from Luau: the item carries the authority of the task that dispatched it. The
    // engine VM's own code holds the domain's grant.
    let from_luau = d.eval("return jobs.dispatch('./probe', 'check', 'x.b'):await()");
    assert_eq!(from_luau.unwrap(), Message::Boolean(true));
    // A task of the narrow context: its items hold its x.a, not the domain's x.b.
    d.exec(
        r#"require('@skein/context').bind('narrow', { onDemand = function()
            own = jobs.dispatch('./probe', 'check', 'x.a')
            wider = jobs.dispatch('./probe', 'check', 'x.b')
        end })"#,
    )
    .unwrap();
    let report = d.run_phase(Phase::OnDemand, &[]).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        d.eval("return own:await()").unwrap(),
        Message::Boolean(true)
    );
    let err = d
        .eval("local ok, e = pcall(function() return wider:await() end) assert(not ok) return tostring(e)")
        .unwrap();
    assert_contains(
        &crate::support::text(&err),
        &format!(
            "capability 'x.b' denied to domain 'a' (domain#{}, generation 1, context 'narrow')",
            d.id().get()
        ),
    );
    // Dispatched by the host: the domain's grant.
    let from_host = d
        .dispatch("./probe", "check", Message::String("x.b".into()))
        .unwrap();
    assert_eq!(from_host.wait().unwrap(), Message::Boolean(true));
    let denied = d
        .dispatch("./probe", "check", Message::String("x.c".into()))
        .unwrap();
    let err = denied.wait().unwrap_err().to_string();
    assert_contains(&err, &denial_text(&d, "x.c"));
    assert_eq!(d.denials(), 2);
}

#[test]
fn a_forwarded_service_call_runs_under_the_items_authority() {
    let tree = Tree::new(&[("probe.luau", PROBE)]);
    let pool = Pool::new(1);
    for (name, granted, expected) in [("yes", &["x.a"][..], true), ("no", &[][..], false)] {
        let d = domain(&pool, &tree, name, granted);
        d.register_query("world.check", |()| {
            Ok(Message::Boolean(
                skein::capability::require_capability("x.a").is_ok(),
            ))
        })
        .unwrap();
        let answer = d
            .eval("return jobs.dispatch('./probe', 'query'):await()")
            .unwrap();
        assert_eq!(answer, Message::Boolean(expected), "domain {name}");
    }
}

/// Two domains with different grants share one worker thread; their items interleave across
/// a yield, and each sees only its own grant before and after every yield. Nothing about
/// authority lives in a process-global.
#[test]
fn interleaved_items_of_two_domains_on_one_worker_each_see_their_own_grant() {
    let tree = Tree::new(&[("probe.luau", PROBE)]);
    let pool = Pool::new(1);
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = log.clone();
    let marked = plan(&tree).function("mark", move |_, args| {
        let tag = args
            .into_iter()
            .next()
            .and_then(|v| v.as_string().map(|s| s.to_string_lossy()));
        sink.lock().unwrap().push(tag.unwrap_or_default());
        Ok(skein::mlua::MultiValue::new())
    });
    let make = |name: &str, granted: &[&str]| {
        let grant = RootAuthority::new().grant(set(granted));
        let spec = DomainSpec::new(name).plan(marked.clone()).grant(grant);
        ScriptDomain::new(&pool, spec).expect("domain")
    };
    let a = make("a", &["x.a"]);
    let b = make("b", &["x.b"]);
    fn args(own: &'static str, other: &'static str) -> Message {
        Message::Map(
            [("own", own), ("other", other)]
                .into_iter()
                .map(|(k, v)| (skein::MapKey::String(k.into()), Message::String(v.into())))
                .collect(),
        )
    }
    let mut promises = Vec::new();
    for _ in 0..4 {
        promises.push(a.dispatch("./probe", "probe", args("x.a", "x.b")).unwrap());
        promises.push(b.dispatch("./probe", "probe", args("x.b", "x.a")).unwrap());
    }
    // All eight items started and parked on the one worker before any went on: they
    // interleave by construction, not by timing.
    let befores = || {
        let log = log.lock().unwrap();
        log.iter().filter(|t| t.ends_with(":before")).count()
    };
    assert!(wait_until(Duration::from_secs(10), || befores() == 8));
    for d in [&a, &b] {
        d.exec(r#"for _ = 1, 4 do jobs.shared.queue("go"):push(true) end"#)
            .unwrap();
    }
    let expected = Message::List(vec![
        Message::Boolean(true),
        Message::Boolean(false),
        Message::Boolean(true),
        Message::Boolean(false),
    ]);
    for p in promises {
        assert_eq!(p.wait().unwrap(), expected);
    }
    // The one worker started items of the other domain while the first waited: they
    // interleaved on one thread.
    let log = log.lock().unwrap().clone();
    let first_a_after = log.iter().position(|t| t == "x.a:after").expect("a ran");
    let b_before = log.iter().position(|t| t == "x.b:before").expect("b ran");
    assert!(b_before < first_a_after, "{log:?}");
    assert_eq!(log.len(), 16, "{log:?}");
    assert_eq!(a.denials(), 8);
    assert_eq!(b.denials(), 8);
}

#[test]
fn engine_tasks_of_two_domains_keep_their_authority_across_a_wait() {
    let tree = Tree::new(&[]);
    let pool = Pool::new(1);
    let a = domain(&pool, &tree, "a", &["x.a"]);
    let b = domain(&pool, &tree, "b", &["x.b"]);
    // The yield under test is a timer's: both domains' tasks wait across each other's runs.
    let script = |own: &str, other: &str| {
        format!(
            "r1 = pcall(need, '{own}') task.wait(0.02) r2 = pcall(need, '{own}') r3 = pcall(need, '{other}')"
        )
    };
    a.exec(&script("x.a", "x.b")).unwrap();
    b.exec(&script("x.b", "x.a")).unwrap();
    assert_eq!((a.tasks(), b.tasks()), (1, 1), "both wait");
    assert!(wait_until(Duration::from_secs(10), || {
        a.pump();
        b.pump();
        a.tasks() + b.tasks() == 0
    }));
    for d in [&a, &b] {
        let got = d.eval("return { r1, r2, r3 }").unwrap();
        let want = [true, true, false].map(Message::Boolean).to_vec();
        assert_eq!(got, Message::List(want));
        assert_eq!(d.denials(), 1);
    }
}

#[test]
fn skein_fs_reads_writes_and_lists_only_below_granted_roots() {
    let tree = Tree::new(&[("data/in.txt", "hello")]);
    let outside = Tree::new(&[("secret.txt", "no")]);
    let pool = Pool::new(1);
    let root = tree.path();
    let grant = RootAuthority::new()
        .grant(CapabilitySet::new())
        .read_root(root.join("data"))
        .unwrap()
        .write_root(root.join("data"))
        .unwrap();
    let d = ScriptDomain::new(&pool, DomainSpec::new("fs").plan(plan(&tree)).grant(grant)).unwrap();
    let data = root.join("data");
    let script = format!(
        r#"
        local fs = require("@skein/fs")
        fs.writeFile("{dir}/out.txt", fs.readFile("{dir}/in.txt") .. " world")
        fs.writeFile("{dir}/buf.bin", buffer.fromstring("xy"))
        return table.concat(fs.list("{dir}"), ",")
        "#,
        dir = data.display()
    );
    assert_eq!(
        d.eval(&script).unwrap(),
        Message::String("buf.bin,in.txt,out.txt".into())
    );
    assert_eq!(
        std::fs::read_to_string(data.join("out.txt")).unwrap(),
        "hello world"
    );
    let secret = outside.path().join("secret.txt");
    let err = d
        .eval(&format!(
            "return require('@skein/fs').readFile('{}')",
            secret.display()
        ))
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        &format!(
            "permission denied: '{}' is outside every root granted for 'filesystem.read' to domain 'fs' (domain#{}, generation 1)",
            secret.display(),
            d.id().get()
        ),
    );
    // `..` does not lead out of a root.
    let escape = format!("{}/../escape.txt", data.display());
    let err = d
        .eval(&format!("require('@skein/fs').writeFile('{escape}', 'x')"))
        .unwrap_err()
        .to_string();
    assert_contains(&err, "is outside every root granted for 'filesystem.write'");
    assert!(!root.join("escape.txt").exists());
    assert_eq!(d.denials(), 2);

    // Without a grant, `@skein/fs` is denied by default.
    let plain = ScriptDomain::new(&pool, DomainSpec::new("plain").plan(plan(&tree))).unwrap();
    let err = plain
        .eval(&format!(
            "return require('@skein/fs').readFile('{}/in.txt')",
            data.display()
        ))
        .unwrap_err()
        .to_string();
    assert_contains(&err, &denial_text(&plain, "filesystem.read"));
}

#[test]
fn the_mandelbrot_example_writes_its_image_only_when_allowed() {
    let cwd = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mandelbrot.luau");
    let script = script.to_str().unwrap();
    let (code, _, stderr) = skein_in(cwd.path(), &["run", script, "--", "16", "10"]);
    assert_eq!(code, 1, "stderr: {stderr}");
    assert_contains(
        &stderr,
        "capability 'filesystem.write' denied to domain 'main' (domain#1, generation 1)",
    );
    assert!(!cwd.path().join("mandelbrot.png").exists());
    let args = ["run", "--allow-write", ".", script, "--", "16", "10"];
    let (code, _, stderr) = skein_in(cwd.path(), &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(cwd.path().join("mandelbrot.png").exists());
}

#[test]
fn the_runner_grants_file_access_only_through_its_flags() {
    let tree = Tree::new(&[
        ("in/data.txt", "42"),
        (
            "copy.luau",
            r#"
            local fs = require("@skein/fs")
            local dest = ...
            fs.writeFile(dest, fs.readFile("in/data.txt"))
            print(table.concat(fs.list("in"), ","))
            "#,
        ),
    ]);
    std::fs::create_dir(tree.path().join("out")).unwrap();
    let cwd = tree.path();

    // No flag: denied by default.
    let (code, _, stderr) = skein_in(&cwd, &["run", "copy.luau", "--", "out/x.txt"]);
    assert_eq!(code, 1, "stderr: {stderr}");
    assert_contains(&stderr, "capability 'filesystem.read' denied");

    // Read granted, write not.
    let (code, _, stderr) = skein_in(
        &cwd,
        &["run", "--allow-read", "in", "copy.luau", "--", "out/x.txt"],
    );
    assert_eq!(code, 1, "stderr: {stderr}");
    assert_contains(&stderr, "capability 'filesystem.write' denied");

    // Both granted, the write inside its root.
    let flags = [
        "run",
        "--allow-read",
        "in",
        "--allow-write",
        "out",
        "copy.luau",
        "--",
    ];
    let (code, stdout, stderr) = skein_in(&cwd, &[&flags[..], &["out/x.txt"]].concat());
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(stdout.trim(), "data.txt");
    assert_eq!(
        std::fs::read_to_string(cwd.join("out/x.txt")).unwrap(),
        "42"
    );

    // Both granted, the write outside its root.
    let (code, _, stderr) = skein_in(&cwd, &[&flags[..], &["elsewhere.txt"]].concat());
    assert_eq!(code, 1, "stderr: {stderr}");
    assert_contains(
        &stderr,
        &format!(
            "permission denied: '{}' is outside every root granted for 'filesystem.write'",
            cwd.join("elsewhere.txt").display()
        ),
    );
    assert!(!cwd.join("elsewhere.txt").exists());

    // --allow takes a checked name.
    let (code, _, stderr) = skein_in(&cwd, &["run", "--allow", "Bad", "copy.luau"]);
    assert_eq!(code, 2);
    assert_contains(
        &stderr,
        "error: invalid value 'Bad' for '--allow <NAME>': invalid capability name 'Bad'",
    );
}

/// A job that calls `audio.play` inside `pcall` (answering the error), and one that calls it
/// bare.
const PLAY: &str = r#"
return {
    caught = function() local _, err = pcall(audio.play, "boom") return err end,
    bare = function() audio.play("boom") return "recorded" end,
}
"#;

/// Domain `name`, granted `granted`, with `audio.play(clip)`: a command that requires
/// `audio.play`, keeping the clips it applied.
fn audio_domain(
    pool: &Pool,
    tree: &Tree,
    name: &str,
    granted: &[&str],
) -> (ScriptDomain, Rc<RefCell<Vec<String>>>) {
    let d = domain(pool, tree, name, granted);
    let played = Rc::new(RefCell::new(Vec::new()));
    let sink = played.clone();
    d.register_command_requiring("audio.play", id("audio.play"), move |clip: String| {
        sink.borrow_mut().push(clip);
        Ok(())
    })
    .unwrap();
    (d, played)
}

/// Takes the domain's reports, asserting they are exactly one denial of `audio.play`.
#[track_caller]
fn one_denial_reported(d: &ScriptDomain) {
    let reports = d.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "capability");
    assert_eq!(reports[0].message, denial_text(d, "audio.play"));
}

#[test]
fn a_command_that_requires_a_capability_is_refused_at_the_call_a_job_makes() {
    let tree = Tree::new(&[("play.luau", PLAY)]);
    let pool = Pool::new(1);
    let (d, played) = audio_domain(&pool, &tree, "mods", &[]);
    let refused = Message::String(
        format!(
            "engine service 'audio.play' failed: {}",
            denial_text(&d, "audio.play")
        )
        .into(),
    );
    // On the engine thread the call is refused before the command runs.
    let engine = d.eval("local _, err = pcall(audio.play, 'boom') return err");
    assert_eq!(engine.unwrap(), refused);
    assert_eq!(d.denials(), 1);
    one_denial_reported(&d);
    // On a worker the job's own call raises the same text, which its pcall catches ...
    let caught = d.eval("return jobs.dispatch('./play', 'caught'):await()");
    assert_eq!(caught.unwrap(), refused);
    assert_eq!(d.denials(), 2);
    one_denial_reported(&d);
    // ... and which fails a job that does not catch it.
    let failure = match d.dispatch("./play", "bare", Message::Nil).unwrap().wait() {
        Err(skein::Error::Job(failure)) => failure,
        other => panic!("the job did not fail: {other:?}"),
    };
    assert_eq!(failure.kind, skein::job::FailureKind::Raised);
    assert_eq!(Message::String(failure.message.into()), refused);
    // Nothing was recorded, so a frame applies nothing and reports nothing more.
    assert_eq!(d.frame(Duration::from_millis(1)).commands_applied, 0);
    assert_eq!(d.denials(), 3);
    one_denial_reported(&d);
    assert!(played.borrow().is_empty());

    // A domain granted the capability records the same call and applies it.
    let (game, played) = audio_domain(&pool, &tree, "game", &["audio.play"]);
    let recorded = game.eval("return jobs.dispatch('./play', 'bare'):await()");
    assert_eq!(recorded.unwrap(), Message::from("recorded"));
    assert_eq!(*played.borrow(), ["boom"]);
    assert_eq!(game.denials(), 0);
    assert!(game.take_reports().is_empty());
}
