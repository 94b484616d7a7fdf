//! Every `luau` block in `docs/` and in `README.md` is a complete script: run each one from its
//! file with `examples/` as the module root, so the documentation cannot drift from what Skein
//! does, with the context the runner declares (`main`, every phase). The blocks about events,
//! contexts and registered jobs also run through the `skein` runner as its main script, and
//! blocks tagged `luau runner` run only that way. Blocks tagged
//! `luau no-run` need a host of their own: each is read from the file by a test that builds it
//! (the service, keyed-watcher and HUD blocks here; the context and worker blocks in `contexts`
//! and `actors`), never copied.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use skein::message::Args;
use skein::{ContextSpec, DomainSpec, Message, Phase, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, exit_within, skein_in};

/// The blocks of `markdown` whose opening fence is exactly `fence` (```` ```luau ````, ...), each
/// with the line number of its fence.
fn blocks_tagged(markdown: &str, fence: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in markdown.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == fence => current = Some((n + 1, String::new())),
            Some(_) if line.trim_start() == "```" => out.push(current.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

fn blocks(markdown: &str) -> Vec<(usize, String)> {
    blocks_tagged(markdown, "```luau")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

/// Runs every `luau` block of the markdown file at `path`; answers how many ran. A block about
/// events, contexts or registered jobs runs as the runner runs it, with frames
/// ([`ScriptDomain::run_frames`]) delivering its events and running its jobs; any other is
/// `eval`ed.
fn run_blocks(pool: &Pool, path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let framed: Vec<usize> = event_context_and_job_blocks(&text)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    let mut ran = 0;
    for (line, body) in blocks(&text) {
        // The context `skein run` declares, so a block binds as it would under the runner.
        let spec = DomainSpec::new("docs")
            .context(ContextSpec::new("main").phases(Phase::ALL))
            .unwrap()
            .plan(Plan::new().root(root().join("examples")));
        let domain = ScriptDomain::new(pool, spec).unwrap();
        let ran_as_written = if framed.contains(&line) {
            domain
                .exec(&body)
                .and_then(|_| domain.run_frames(Duration::from_millis(16)))
        } else {
            domain.eval(&body).map(drop)
        };
        if let Err(e) = ran_as_written {
            panic!(
                "{}:{line}: the example failed:\n{e}\n---\n{body}",
                path.display()
            );
        }
        ran += 1;
    }
    ran
}

#[test]
fn every_luau_block_in_the_docs_runs() {
    let pool = Pool::new(2);
    let mut ran = 0;
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("md") {
            ran += run_blocks(&pool, &path);
        }
    }
    assert!(ran >= 6, "only {ran} luau blocks found in docs/");
}

#[test]
fn every_luau_block_in_the_readme_runs() {
    let pool = Pool::new(2);
    let ran = run_blocks(&pool, &root().join("README.md"));
    assert!(ran >= 2, "only {ran} luau blocks found in README.md");
}

/// A `luau runner` block is the main script of `skein run main.luau -- a b`, with no `--allow-*`
/// flag: it needs the `runner` global and the runner's (empty) grant.
#[test]
fn every_luau_runner_block_in_the_docs_runs_through_the_runner() {
    let mut ran = 0;
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, body) in blocks_tagged(&text, "```luau runner") {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("main.luau"), &body).unwrap();
            let (code, stdout, stderr) =
                skein_in(dir.path(), &["run", "main.luau", "--", "a", "b"]);
            assert_eq!(
                code,
                0,
                "{}:{line}: the example failed:\n{stderr}\n---\n{body}",
                path.display()
            );
            assert!(
                stdout.contains("a b"),
                "{}:{line}: {stdout}",
                path.display()
            );
            ran += 1;
        }
    }
    assert!(ran >= 1, "no luau runner block found in docs/");
}

/// The `luau` blocks of `markdown` under a heading about events, contexts or registered jobs,
/// each with the line of its fence.
fn event_context_and_job_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut heading = String::new();
    let mut wanted = Vec::new();
    for (n, line) in markdown.lines().enumerate() {
        if line.starts_with("## ") || line.starts_with("### ") {
            heading = line.to_lowercase();
        } else if line.trim_start() == "```luau"
            && [
                "event",
                "context",
                "registered",
                "jobs.find",
                "engine.on",
                "engine.wait",
            ]
            .iter()
            .any(|topic| heading.contains(topic))
        {
            wanted.push(n + 1);
        }
    }
    blocks(markdown)
        .into_iter()
        .filter(|(line, _)| wanted.contains(line))
        .collect()
}

/// Copies the files of `from` into `to`, folders included.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Every documented example of events, contexts and registered jobs runs as written as the
/// main script of `skein run` (a child process), beside a copy of `examples/` for the modules
/// it requires: the runner declares the context they bind to, drains their events and drives
/// the frames their jobs run in, and ends once nothing can run any more.
#[test]
fn every_event_context_and_job_block_runs_through_the_runner() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&root().join("examples"), dir.path());
    let mut ran = 0;
    for name in ["luau-api.md", "embedding.md"] {
        let path = root().join("docs").join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, body) in event_context_and_job_blocks(&text) {
            let main = format!("docs_block_{line}.luau");
            std::fs::write(dir.path().join(&main), &body).unwrap();
            let mut child = Command::new(env!("CARGO_BIN_EXE_skein"))
                .args(["run", &main])
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // A block that never lets the run end is a failure, not a hang.
            let status = exit_within(&mut child, Duration::from_secs(60));
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            assert_eq!(
                (status.and_then(|s| s.code()), stderr.as_str()),
                (Some(0), ""),
                "{}:{line}: the example failed under the runner\n---\n{body}",
                path.display()
            );
            ran += 1;
        }
    }
    assert!(ran >= 6, "only {ran} event, context and job blocks found");
}

/// The body of the one `luau no-run` block of docs/luau-api.md whose first line starts with
/// `first`.
fn no_run_block(first: &str) -> String {
    let text = std::fs::read_to_string(root().join("docs/luau-api.md")).unwrap();
    let mut found: Vec<String> = blocks_tagged(&text, "```luau no-run")
        .into_iter()
        .map(|(_, body)| body)
        .filter(|body| body.starts_with(first))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "blocks of docs/luau-api.md starting {first:?}"
    );
    found.pop().unwrap()
}

/// A domain whose module root is `dir`, with `spec`'s contexts.
fn domain_in(pool: &Pool, dir: &Path, spec: DomainSpec) -> ScriptDomain {
    ScriptDomain::new(pool, spec.plan(Plan::new().root(dir))).unwrap()
}

/// The engine-service blocks of docs/luau-api.md (`movers.luau` and the dispatch that awaits
/// it), with a host whose `world.get` and `world.set` serve a map: the job's forwarded query
/// sees its own recorded command, and the caller sees it applied once the promise settled.
#[test]
fn the_engine_service_blocks_run_with_a_host_world() {
    use std::{cell::RefCell, collections::HashMap, rc::Rc};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("movers.luau"),
        no_run_block("-- movers.luau"),
    )
    .unwrap();
    let caller = no_run_block("local p = jobs.dispatch(\"./movers\"");
    let pool = Pool::new(2);
    let domain = domain_in(&pool, dir.path(), DomainSpec::new("docs"));
    let world: Rc<RefCell<HashMap<i64, f64>>> = Rc::new(RefCell::new(HashMap::from([(1, 10.0)])));
    let id = |args: &[Message]| match args.first() {
        Some(Message::Number(n)) => Ok(*n as i64),
        other => Err(format!("an id, got {other:?}")),
    };
    let w = world.clone();
    domain
        .register_query("world.get", move |args: Args| {
            Ok(Message::Number(w.borrow()[&id(&args)?]))
        })
        .unwrap();
    let w = world.clone();
    domain
        .register_command("world.set", move |args: Args| {
            let Some(Message::Number(v)) = args.get(1) else {
                return Err(format!("a number, got {:?}", args.get(1)).into());
            };
            w.borrow_mut().insert(id(&args)?, *v);
            Ok(())
        })
        .unwrap();
    // The block as written, then what it printed and what its job answered.
    let seen = domain
        .eval(&format!("{caller}\nreturn {{ p:await(), world.get(1) }}"))
        .unwrap();
    assert_eq!(
        seen,
        Message::List(vec![Message::Number(11.0), Message::Number(11.0)])
    );
    assert_eq!(world.borrow()[&1], 11.0);
}

/// The keyed watcher block of docs/luau-api.md (`spawns.luau`): a module a keyed item runs keeps
/// its watchers between items of the key, and they see the events raised in between.
#[test]
fn the_keyed_watcher_block_runs_with_raised_events() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spawns.luau"),
        no_run_block("-- spawns.luau"),
    )
    .unwrap();
    let pool = Pool::new(2);
    let domain = domain_in(&pool, dir.path(), DomainSpec::new("docs"));
    domain
        .eval(r#"jobs.dispatch("./spawns", "watch", nil, { key = "ai" }):await()"#)
        .unwrap();
    domain
        .raise_engine_event("spawned", Message::Integer(1))
        .unwrap();
    domain
        .raise_engine_event("spawned", Message::Integer(2))
        .unwrap();
    let think = r#"return jobs.dispatch("./spawns", "think", nil, { key = "ai" }):await()"#;
    assert_eq!(domain.eval(think).unwrap(), Message::Number(2.0));
    assert_eq!(domain.eval(think).unwrap(), Message::Number(0.0));
}

/// The self-refusing load of docs/luau-api.md (`hud.luau`): reloaded while the host has no font,
/// it raises and the running code is kept; with the font it binds its handlers.
#[test]
fn the_hud_load_block_refuses_itself_without_its_font() {
    use skein::lifecycle::{Load, LoadStage};
    use skein::{ContextSpec, Error, Phase};
    use std::{cell::Cell, rc::Rc};
    let dir = tempfile::tempdir().unwrap();
    let hud = dir.path().join("hud.luau");
    std::fs::write(&hud, no_run_block("-- hud.luau")).unwrap();
    let pool = Pool::new(1);
    let spec = DomainSpec::new("docs")
        .context(ContextSpec::new("hud").phases([Phase::Startup, Phase::Update]))
        .unwrap();
    let mut domain = domain_in(&pool, dir.path(), spec);
    let installed = Rc::new(Cell::new(false));
    let has = installed.clone();
    domain
        .register_query("fonts.find", move |()| {
            Ok(if has.get() {
                Message::String("Inter.ttf".into())
            } else {
                Message::Nil
            })
        })
        .unwrap();
    domain.exec("running = 'the old HUD'").unwrap();
    let err = domain.reload(Load::file(&hud)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReloadFailed {
                stage: LoadStage::Run,
                ..
            }
        ),
        "{err:?}"
    );
    assert_contains(&err.to_string(), "the HUD font is missing");
    assert_eq!(
        domain.eval("return running").unwrap(),
        Message::String("the old HUD".into())
    );
    installed.set(true);
    domain.reload(Load::file(&hud)).unwrap();
    let report = domain
        .run_phase(Phase::Update, &[Message::Number(0.016)])
        .unwrap();
    assert_eq!((report.calls, report.errors.len()), (1, 0));
}
