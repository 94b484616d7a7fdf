//! Resources (`ResourceHost`, `@skein/resources`): manifests, the start order and its
//! refusals, calls by name with copies both ways, stop, reload and shutdown, and teardown
//! that leaves nothing behind.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use skein::capability::{CapabilityId, CapabilitySet, Grant, RootAuthority};
use skein::refusal::ResourceRefusal;
use skein::resource::{HostFile, ResourceHost, ResourceState};
use skein::{Error, Message, Pool};

use crate::support::{
    assert_contains, error_of, refusal, rss_pages, run_alone, string, text, wait_until, Tree,
};

/// A folder of resources: `(name, manifest, main.luau)` each.
fn served(resources: &[(&str, &str, &str)]) -> Tree {
    let tree = Tree::new(&[]);
    for (name, manifest, main) in resources {
        tree.write(&format!("{name}/skein.toml"), manifest);
        tree.write(&format!("{name}/main.luau"), main);
    }
    tree
}

/// A manifest running `main.luau`, exporting `exports`, depending on `deps`.
fn manifest(exports: &[&str], deps: &[&str]) -> String {
    let list = |items: &[&str]| {
        items
            .iter()
            .map(|i| format!("'{i}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "[resource]\nscripts = ['main.luau']\nexports = [{}]\ndependencies = [{}]\n",
        list(exports),
        list(deps)
    )
}

const STORE: &str = r#"
local data = {}
function get(k) return data[k] end
function set(k, v) data[k] = v end
function whoami() return require("@skein/resources").this() end
function fail() error("store broke") end
function echo(...) return ... end
function deep(n) local t = 1 for i = 1, n do t = { t } end return t end
"#;

fn host(tree: &Tree) -> ResourceHost {
    ResourceHost::load(&Pool::new(2), tree.path(), Grant::default()).expect("load")
}

fn state_of(host: &ResourceHost, name: &str) -> (ResourceState, u64) {
    let info = host
        .list()
        .into_iter()
        .find(|i| i.name == name)
        .expect(name);
    (info.state, info.generation)
}

fn resource_error(e: Error) -> (ResourceRefusal, String) {
    match e {
        Error::Resource { refusal, message } => (refusal, message),
        other => panic!("expected a resource refusal, got {other:?}"),
    }
}

fn eval(host: &ResourceHost, name: &str, source: &str) -> Message {
    host.domain(name)
        .unwrap_or_else(|| panic!("{name} is not running"))
        .eval(source)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn a_call_by_name_copies_both_ways_and_runs_as_the_callee() {
    let tree = served(&[
        (
            "store",
            &manifest(&["get", "set", "whoami", "echo"], &[]),
            STORE,
        ),
        (
            "scores",
            &manifest(&[], &["store"]),
            r#"
            local resources = require("@skein/resources")
            store = resources.import("store")
            store.set("best", { score = 42, tags = { "a", "b" } })
            "#,
        ),
    ]);
    let mut host = host(&tree);
    host.start_set(&["scores", "store"]).expect("start");
    assert_eq!(state_of(&host, "store"), (ResourceState::Running, 1));
    assert_eq!(
        eval(&host, "scores", "return store.get('best').tags[2]"),
        Message::String("b".into())
    );
    // The callee's `this()` is the callee; the caller's is the caller again after.
    assert_eq!(
        eval(
            &host,
            "scores",
            "local r = require('@skein/resources') return store.whoami() .. ',' .. r.this()"
        ),
        Message::String("store,scores".into())
    );
    // Every plain type crosses, nils in place and integers kept apart from numbers.
    assert_eq!(
        eval(
            &host,
            "scores",
            r#"local a, b, c, d, e, f, g = store.echo(nil, true, 3, 2.5, "s", buffer.fromstring("x"), vector.create(1, 2, 3))
            return a == nil and b == true and c == 3 and d == 2.5 and e == "s"
                and buffer.tostring(f) == "x" and g == vector.create(1, 2, 3)"#
        ),
        Message::Boolean(true)
    );
    // A copy: the caller's change to the table it got does not reach the store.
    assert_eq!(
        eval(
            &host,
            "scores",
            "local t = store.get('best') t.score = 0 return store.get('best').score"
        ),
        Message::Number(42.0)
    );
    let order: Vec<String> = host.shutdown().into_iter().map(|(n, _)| n).collect();
    assert_eq!(order, ["scores", "store"]);
}

#[test]
fn call_refusals_are_luau_errors_naming_the_reason() {
    let tree = served(&[
        (
            "store",
            &manifest(&["get", "set", "fail", "echo"], &[]),
            STORE,
        ),
        (
            "scores",
            &manifest(&[], &["store"]),
            "store = require('@skein/resources').import('store')",
        ),
        ("idle", &manifest(&["get"], &[]), STORE),
    ]);
    let mut host = host(&tree);
    host.start_set(&["store", "scores"]).unwrap();
    let scores = host.domain("scores").unwrap();
    let cases = [
        (
            "require('@skein/resources').import('nobody').get()",
            "nobody.get: no resource named 'nobody' is loaded",
        ),
        (
            "require('@skein/resources').import('idle').get()",
            "idle.get: resource 'idle' is stopped",
        ),
        (
            "store.nothing()",
            "store.nothing: resource 'store' does not export 'nothing' (its exports: echo, fail, get, set)",
        ),
        (
            "store.set('k', print)",
            "store.set: args[2]: a function can't cross a worker or event boundary",
        ),
        (
            "store.set('k', { co = coroutine.create(print) })",
            "store.set: args[2].co: a coroutine can't cross a worker or event boundary",
        ),
        (
            "local t = {} t.self = t store.set('k', t)",
            "store.set: args[2].self: a table that contains itself can't cross a worker or event boundary",
        ),
        (
            "local t = {} setmetatable(t, {}) store.set('k', { t })",
            "store.set: args[2][1]: a table with a metatable can't cross a worker or event boundary",
        ),
        (
            "store.set('k', newproxy())",
            "store.set: args[2]: a userdata can't cross a worker or event boundary",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(refusal(scores, body), expected, "{body}");
    }
    // The callee's error keeps its traceback.
    let err = refusal(scores, "store.fail()");
    let file = tree.path().join("store/main.luau");
    assert_eq!(
        err,
        format!(
            "store.fail: {0}:6: store broke\n{0}:6 function fail\n",
            file.display()
        )
    );
    // Nothing changed in the store.
    assert_eq!(eval(&host, "scores", "return store.get('k')"), Message::Nil);
}

/// Tables nested `n` deep (a top-level table is 1).
fn nested(n: usize) -> String {
    let mut s = "1".to_owned();
    for _ in 0..n {
        s = format!("{{ {s} }}");
    }
    s
}

#[test]
fn nesting_is_bounded_at_16_both_ways() {
    let tree = served(&[
        (
            "store",
            &manifest(&["get", "set", "echo", "deep"], &[]),
            STORE,
        ),
        (
            "scores",
            &manifest(&[], &["store"]),
            "store = require('@skein/resources').import('store')",
        ),
    ]);
    let mut host = host(&tree);
    host.start_set(&["store", "scores"]).unwrap();
    let scores = host.domain("scores").unwrap();
    assert_eq!(
        error_of(scores, &format!("store.set('k', {})", nested(16))),
        None
    );
    let err = refusal(scores, &format!("store.set('k', {})", nested(17)));
    assert_eq!(
        err,
        format!(
            "store.set: args[2]{}: a table nested deeper than 16 tables can't cross a worker or event boundary",
            "[1]".repeat(16)
        )
    );
    // A result past the bound is refused on the way back, naming it.
    assert_eq!(
        eval(&host, "scores", "return store.deep(16) ~= nil"),
        Message::Boolean(true)
    );
    assert_eq!(
        refusal(scores, "store.deep(17)"),
        format!(
            "store.deep: results[1]{}: a table nested deeper than 16 tables can't cross a worker or event boundary",
            "[1]".repeat(16)
        )
    );
}

#[test]
fn nested_calls_are_capped_at_16_naming_the_chain() {
    // `a` and `b` call each other `n` times.
    let bounce = r#"
        local r = require("@skein/resources")
        function bounce(n, other)
            if n == 0 then return r.this() end
            return r.import(other).bounce(n - 1, r.this())
        end
    "#;
    let tree = served(&[
        ("a", &manifest(&["bounce"], &[]), bounce),
        ("b", &manifest(&["bounce"], &[]), bounce),
    ]);
    let mut host = host(&tree);
    host.start_set(&["a", "b"]).unwrap();
    // From `a`'s top level: 16 nested calls (a -> b -> a ... 16 arrows) pass.
    let at = |n: usize| {
        format!(
            "return require('@skein/resources').import('b').bounce({}, 'a')",
            n
        )
    };
    assert_eq!(eval(&host, "a", &at(15)), Message::String("a".into()));
    let err = refusal(
        host.domain("a").unwrap(),
        &at(16).replacen("return ", "", 1),
    );
    assert_contains(
        &err,
        "cross-resource calls nested deeper than 16: a -> b -> a -> b -> a -> b -> a -> b -> a -> b -> a -> b -> a -> b -> a -> b -> a -> b",
    );
    // The chain is given back after the refusal: a fresh call passes again.
    assert_eq!(eval(&host, "a", &at(2)), Message::String("b".into()));
}

#[test]
fn start_refusals_name_the_reason_and_change_nothing() {
    let tree = served(&[
        ("store", &manifest(&["get"], &[]), STORE),
        ("needs", &manifest(&[], &["store"]), ""),
        ("orphan", &manifest(&[], &["gone"]), ""),
        ("a", &manifest(&[], &["b"]), ""),
        ("b", &manifest(&[], &["c"]), ""),
        ("c", &manifest(&[], &["a"]), ""),
        ("me", &manifest(&[], &["me"]), ""),
        ("lazy", &manifest(&["get", "put"], &[]), STORE),
        ("broken", &manifest(&[], &[]), "error('no luck')"),
    ]);
    let mut host = host(&tree);
    let before = host.list();
    let cases: &[(&[&str], ResourceRefusal, &str)] = &[
        (
            &["nobody"],
            ResourceRefusal::Unknown,
            "no resource named 'nobody' is loaded",
        ),
        (
            &["orphan"],
            ResourceRefusal::MissingDependency,
            "resource 'orphan' depends on 'gone', which is not loaded",
        ),
        (
            &["store", "a"],
            ResourceRefusal::DependencyCycle,
            "dependency cycle: a -> b -> c -> a",
        ),
        (
            &["me"],
            ResourceRefusal::SelfDependency,
            "resource 'me' depends on itself",
        ),
    ];
    for (set, refusal, text) in cases {
        let (got, message) = resource_error(host.start_set(set).unwrap_err());
        assert_eq!((got, message.as_str()), (*refusal, *text), "{set:?}");
        assert_eq!(host.list(), before, "{set:?} changed something");
        assert!(!host.is_live());
    }
    // A start on demand needs its dependencies running.
    let (got, message) = resource_error(host.start("needs").unwrap_err());
    assert_eq!(got, ResourceRefusal::MissingDependency);
    assert_eq!(
        message,
        "start: resource 'needs' depends on 'store', which is not running"
    );
    // A declared export the scripts did not define.
    let (got, message) = resource_error(host.start("lazy").unwrap_err());
    assert_eq!(got, ResourceRefusal::MissingExport);
    assert_eq!(
        message,
        "start: resource 'lazy' declares the export 'put', but after its scripts ran the global 'put' is nil, not a function"
    );
    assert!(host.domain("lazy").is_none());
    assert_eq!(state_of(&host, "lazy"), (ResourceState::Failed, 0));
    // A script that raises.
    let (got, message) = resource_error(host.start("broken").unwrap_err());
    assert_eq!(got, ResourceRefusal::Script);
    assert_contains(&message, "start: resource 'broken': main.luau: ");
    assert_contains(&message, "no luck");
    // A set whose later member fails stops what it started.
    let (got, _) = resource_error(host.start_set(&["store", "lazy"]).unwrap_err());
    assert_eq!(got, ResourceRefusal::MissingExport);
    assert!(!host.is_live(), "{:?}", host.list());
    // Start and stop twice.
    host.start("store").unwrap();
    let (got, message) = resource_error(host.start("store").unwrap_err());
    assert_eq!(
        (got, message.as_str()),
        (
            ResourceRefusal::State,
            "start: resource 'store' is running already"
        )
    );
    host.stop("store").unwrap();
    let (got, message) = resource_error(host.stop("store").unwrap_err());
    assert_eq!(
        (got, message.as_str()),
        (
            ResourceRefusal::State,
            "stop: resource 'store' is not running"
        )
    );
}

#[test]
fn manifests_are_refused_naming_file_line_and_key() {
    let tree = served(&[(
        "bad",
        "[resource]\nscripts = ['main.luau']\nexport = ['x']\n",
        "",
    )]);
    let e = ResourceHost::load(&Pool::new(1), tree.path(), Grant::default()).unwrap_err();
    let (got, message) = resource_error(e);
    assert_eq!(got, ResourceRefusal::Manifest);
    let file = tree.path().join("bad/skein.toml");
    assert!(
        message.starts_with(&format!(
            "{}:3: resource.export: unknown field `export`",
            file.display()
        )),
        "{message}"
    );
    let tree = served(&[("bad", "[resource]\nexports = 3\n", "")]);
    let (_, message) = resource_error(
        ResourceHost::load(&Pool::new(1), tree.path(), Grant::default()).unwrap_err(),
    );
    assert_contains(
        &message,
        "bad/skein.toml:2: resource.exports: invalid type: integer `3`, expected a sequence",
    );
    // A capability the host does not hold.
    let tree = served(&[(
        "greedy",
        "[capabilities]\nallow = ['worker.spawn']\nread = ['.']\n",
        "",
    )]);
    let (got, message) = resource_error(
        ResourceHost::load(&Pool::new(1), tree.path(), Grant::default()).unwrap_err(),
    );
    assert_eq!(got, ResourceRefusal::Grant);
    assert_eq!(
        message,
        "resource 'greedy' asks for capabilities the host does not hold: worker.spawn, filesystem.read"
    );
    let host = HostFile::parse("h", "[host]\nstart = ['a', 'b']\n").unwrap();
    assert_eq!(host.start, ["a", "b"]);
}

#[test]
fn a_proxy_held_across_a_reload_reaches_each_generation() {
    let tree = served(&[
        (
            "store",
            &manifest(&["get", "version"], &[]),
            "function get() return 1 end function version() return 1 end",
        ),
        (
            "scores",
            &manifest(&["ping"], &["store"]),
            r#"store = require("@skein/resources").import("store")
            function ping() return store.version() end"#,
        ),
    ]);
    let mut host = host(&tree);
    host.start_set(&["store", "scores"]).unwrap();
    assert_eq!(
        eval(&host, "scores", "return store.version()"),
        Message::Number(1.0)
    );
    // During the reload: the new generation's script calls `scores`, which calls back into
    // `store`, still starting.
    tree.write(
        "store/main.luau",
        r#"function get() return 2 end function version() return 2 end
        local ok, err = pcall(require("@skein/resources").import("scores").ping)
        duringReload = tostring(err)"#,
    );
    host.reload("store").unwrap();
    assert_eq!(state_of(&host, "store"), (ResourceState::Running, 2));
    let during = text(&eval(&host, "store", "return duringReload"));
    assert!(
        during.starts_with(
            "scores.ping: store.version: resource 'store' is reloading: call again once it has started\n"
        ),
        "{during}"
    );
    assert_eq!(
        eval(&host, "scores", "return store.version()"),
        Message::Number(2.0)
    );
    // Stopping a depended-upon resource warns; calls fail until it starts again.
    let outcome = host.stop("store").unwrap();
    assert_eq!(
        outcome.warnings,
        ["resource 'scores' depends on 'store', which stopped: its calls into 'store' fail until 'store' starts again"]
    );
    assert_eq!(
        refusal(host.domain("scores").unwrap(), "store.version()"),
        "store.version: resource 'store' is stopped"
    );
    host.start("store").unwrap();
    assert_eq!(
        eval(&host, "scores", "return store.version()"),
        Message::Number(2.0)
    );
    assert_eq!(state_of(&host, "store"), (ResourceState::Running, 3));
}

#[test]
fn shutdown_stops_dependents_first_and_stop_handlers_reach_dependencies() {
    let logger = "function log(line) sink.write(line) end";
    let stopper = |me: &str, dep: &str| {
        format!(
            r#"local dep = require("@skein/resources").import("{dep}")
            require("@skein/events").on("stop", function()
                dep.log("{me} stopping as " .. require("@skein/resources").this())
            end)"#
        )
    };
    let tree = served(&[
        ("log", &manifest(&["log"], &[]), logger),
        (
            "mid",
            &manifest(&["log"], &["log"]),
            &format!("{}\nfunction log(l) dep.log(l) end", stopper("mid", "log")),
        ),
        ("top", &manifest(&[], &["mid"]), &stopper("top", "mid")),
    ]);
    let mut host = host(&tree);
    host.start_set(&["top", "mid", "log"]).unwrap();
    let lines = Rc::new(RefCell::new(Vec::<String>::new()));
    let sink = lines.clone();
    host.domain("log")
        .unwrap()
        .register_command("sink.write", move |(line,): (String,)| {
            sink.borrow_mut().push(line);
            Ok(())
        })
        .unwrap();
    let order: Vec<String> = host.shutdown().into_iter().map(|(n, _)| n).collect();
    assert_eq!(order, ["top", "mid", "log"]);
    assert_eq!(
        *lines.borrow(),
        ["top stopping as top", "mid stopping as mid"]
    );
    assert!(!host.is_live());
}

#[test]
fn a_worker_vm_forwards_its_calls_to_the_engine_thread() {
    let tree = served(&[
        ("store", &manifest(&["get", "set", "fail"], &[]), STORE),
        (
            "scores",
            &manifest(&[], &["store"]),
            "store = require('@skein/resources').import('store')
             for i = 1, 8 do store.set('k' .. i, i * i) end",
        ),
    ]);
    tree.write(
        "scores/sum.luau",
        r#"local resources = require("@skein/resources")
        local store = resources.import("store")
        return {
            chunk = function(c)
                local s = 0
                for i = c.first, c.last do s += store.get("k" .. i) end
                return s
            end,
            who = function() return resources.this() end,
            bad = function()
                local ok, err = pcall(store.set, 1, print)
                local ok2, err2 = pcall(store.fail)
                local ok3, err3 = pcall(resources.import("nobody").get)
                return { err, string.match(err2, "^[^\n]*"), err3 }
            end,
        }"#,
    );
    let mut host = host(&tree);
    host.start_set(&["store", "scores"]).unwrap();
    assert_eq!(
        eval(
            &host,
            "scores",
            r#"local parts = jobs.parallelFor("./sum", "chunk", 8, nil, { chunks = 4 }):await()
            local s = 0 for _, p in parts do s += p end return s"#
        ),
        Message::Number(204.0)
    );
    assert_eq!(
        eval(
            &host,
            "scores",
            "return jobs.dispatch('./sum', 'who'):await()"
        ),
        Message::String("scores".into())
    );
    let errors = eval(
        &host,
        "scores",
        "return jobs.dispatch('./sum', 'bad'):await()",
    );
    let errors: Vec<String> = crate::support::list(&errors).iter().map(text).collect();
    let store_file = tree.path().join("store/main.luau");
    assert_eq!(
        errors,
        [
            "store.set: args[2]: a function can't cross a worker or event boundary".to_owned(),
            format!("store.fail: {}:6: store broke", store_file.display()),
            "nobody.get: no resource named 'nobody' is loaded".to_owned(),
        ]
    );
}

#[test]
fn the_callee_runs_under_its_own_deadline_and_authority() {
    let tree = served(&[
        (
            "vault",
            "[resource]\nscripts = ['main.luau']\nexports = ['read', 'spin']\n\
             [capabilities]\nread = ['data']\n",
            r#"local fs = require("@skein/fs")
            function read(path) return fs.readFile(path) end
            function spin() while true do end end"#,
        ),
        (
            "guest",
            &manifest(&["tryRead"], &["vault"]),
            r#"vault = require("@skein/resources").import("vault")
            function tryRead(path) return require("@skein/fs").readFile(path) end"#,
        ),
    ]);
    tree.write("vault/data/secret.txt", "s3cret");
    let ceiling = Grant::default().read_root(tree.path()).unwrap();
    let mut host = ResourceHost::load(&Pool::new(1), tree.path(), ceiling).unwrap();
    host.spec_with(|name, spec| {
        let ms = if name == "vault" { 50 } else { 5_000 };
        spec.run_deadline(Duration::from_millis(ms))
    });
    host.start_set(&["guest", "vault"]).unwrap();
    // The vault reads with its own grant; the guest holds none.
    let secret = tree.path().join("vault/data/secret.txt");
    let secret = secret.display();
    assert_eq!(
        eval(&host, "guest", &format!("return vault.read('{secret}')")),
        Message::String("s3cret".into())
    );
    assert_contains(
        &refusal(
            host.domain("guest").unwrap(),
            &format!("tryRead('{secret}')"),
        ),
        "capability 'filesystem.read'",
    );
    // The vault's 50 ms deadline stops its spin, inside the guest's 5 s one.
    let started = std::time::Instant::now();
    let err = refusal(host.domain("guest").unwrap(), "vault.spin()");
    assert!(
        err.starts_with("vault.spin: deadline exceeded: one run took longer than 0.05 s"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // The guest runs on after it.
    assert_eq!(eval(&host, "guest", "return 1 + 1"), Message::Number(2.0));
}

/// A resource's relative `@skein/fs` paths resolve from its own folder, as its manifest's roots
/// do, whatever the host process's current directory is (this test binary's is the package
/// root); a `..` that leaves the granted root is still refused, naming the path it came to.
#[test]
fn a_resource_s_relative_file_paths_resolve_from_its_own_folder() {
    let tree = served(&[(
        "notes",
        "[resource]\nscripts = ['main.luau']\nexports = ['read', 'write']\n\
         [capabilities]\nallow = ['worker.spawn']\nread = ['data']\nwrite = ['data']\n",
        r#"local fs = require("@skein/fs")
        first = fs.readFile("data/note.txt")
        function read(path) return fs.readFile(path) end
        function write(path, text) fs.writeFile(path, text) end"#,
    )]);
    tree.write(
        "notes/reader.luau",
        "return { read = function(path) return require('@skein/fs').readFile(path) end }",
    );
    tree.write("notes/data/note.txt", "from the resource's folder");
    tree.write("secret.txt", "beside the resource");
    let folder = tree.path().join("notes").canonicalize().unwrap();
    assert_ne!(std::env::current_dir().unwrap(), folder);
    // The ceiling reaches the whole tree, so only the resource's own roots bound it.
    let ceiling = RootAuthority::new()
        .grant(CapabilitySet::from_iter([CapabilityId::new(
            "worker.spawn",
        )
        .unwrap()]))
        .read_root(tree.path())
        .unwrap()
        .write_root(tree.path())
        .unwrap();
    let mut host = ResourceHost::load(&Pool::new(1), tree.path(), ceiling).unwrap();
    // Its start script read the file by the relative path.
    host.start("notes").unwrap();
    assert_eq!(
        eval(&host, "notes", "return first"),
        string("from the resource's folder")
    );
    eval(&host, "notes", "write('data/./new.txt', 'written')");
    assert_eq!(
        std::fs::read_to_string(folder.join("data/new.txt")).unwrap(),
        "written"
    );
    // On a worker too: a job runs under the resource's grant.
    assert_eq!(
        eval(
            &host,
            "notes",
            "return jobs.dispatch('./reader', 'read', 'data/new.txt'):await()"
        ),
        string("written")
    );
    // And in an actor, whose grant is narrowed from the resource's.
    assert_eq!(
        eval(
            &host,
            "notes",
            "local w = require('@skein/worker').spawn { name = 'r', source = \
             'return function(path) return require(\"@skein/fs\").readFile(path) end' }\n\
             w:send('data/note.txt') return w:receive(10)"
        ),
        string("from the resource's folder")
    );
    let domain = host.domain("notes").unwrap();
    let who = format!(
        "domain 'notes' (domain#{}, generation 1)",
        domain.id().get()
    );
    assert_eq!(
        refusal(domain, "read('data/../../secret.txt')"),
        format!(
            "fs.readFile: 'data/../../secret.txt': permission denied: '{}' is outside every root \
             granted for 'filesystem.read' to {who}; its roots: '{}'",
            tree.path()
                .canonicalize()
                .unwrap()
                .join("secret.txt")
                .display(),
            folder.join("data").display()
        )
    );
    assert_eq!(
        refusal(domain, "read('note.txt')"),
        format!(
            "fs.readFile: 'note.txt': permission denied: '{}' is outside every root granted \
             for 'filesystem.read' to {who}; its roots: '{}'",
            folder.join("note.txt").display(),
            folder.join("data").display()
        )
    );
}

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Rounds of start, call, reload and stop measure the process's threads and memory, so they
/// run alone in a child process: other tests of this binary beside them would move the figures.
#[test]
fn rounds_of_start_call_reload_stop_leave_nothing_behind() {
    run_alone("resources::resource_rounds_alone");
}

/// Three resources, each round: started as a set, called engine to engine and from workers,
/// with keyed jobs spinning and an actor alive when `store` is reloaded and all are stopped.
#[test]
#[ignore = "run by rounds_of_start_call_reload_stop_leave_nothing_behind, alone"]
fn resource_rounds_alone() {
    let tree = served(&[
        (
            "store",
            &manifest(&["get", "set"], &[]),
            "local data = {} function get(k) return data[k] end function set(k, v) data[k] = v end",
        ),
        (
            "scores",
            &manifest(&["total"], &["store"]),
            r#"local store = require("@skein/resources").import("store")
            for i = 1, 4 do
                -- Keyed jobs still running when the round stops their resource.
                jobs.dispatch("./jobs", "spin", nil, { key = "spin" .. i })
            end
            -- An export runs to its end without waiting: it sums on the engine thread.
            function total()
                return store.get("k1") + store.get("k2") + store.get("k3") + store.get("k4")
            end"#,
        ),
        (
            "report",
            "[resource]\nscripts = ['main.luau']\nexports = ['run']\ndependencies = ['store', 'scores']\n\
             [capabilities]\nallow = ['worker.spawn']\n",
            r#"local resources = require("@skein/resources")
            local store, scores = resources.import("store"), resources.import("scores")
            idle = require("@skein/worker").spawn { source = "return function() end" }
            function run(i)
                store.set("k1", i) store.set("k2", i) store.set("k3", i) store.set("k4", i)
                return scores.total()
            end"#,
        ),
    ]);
    tree.write(
        "scores/jobs.luau",
        r#"local store = require("@skein/resources").import("store")
        return {
            -- Parked between short waits: in flight without holding a worker.
            spin = function() while true do task.wait(0.005) end end,
            sum = function(c)
                local s = 0
                for i = c.first, c.last do s += store.get("k" .. i) end
                return s
            end,
        }"#,
    );
    let pool = Pool::new(2);
    let spawn = skein::capability::CapabilityId::new("worker.spawn").unwrap();
    let ceiling = skein::capability::RootAuthority::new()
        .grant(skein::capability::CapabilitySet::from_iter([spawn]));
    let mut host = ResourceHost::load(&pool, tree.path(), ceiling).unwrap();
    let round = |host: &mut ResourceHost, i: usize| {
        host.start_set(&["report", "scores", "store"]).unwrap();
        let total = host
            .domain("report")
            .unwrap()
            .eval(&format!("return run({i})"))
            .unwrap();
        assert_eq!(total, Message::Number(4.0 * i as f64));
        // The same sum from the pool's workers, each call forwarded to the engine thread.
        let sums = host
            .domain("scores")
            .unwrap()
            .eval("local p = jobs.parallelFor('./jobs', 'sum', 4, nil, { chunks = 2 }):await() return p[1] + p[2]")
            .unwrap();
        assert_eq!(sums, Message::Number(4.0 * i as f64));
        let live = host.domain("report").unwrap().live_actors();
        assert_eq!(live.get(), 1);
        host.reload("store").unwrap();
        // The new store is empty: `k1` is nil there.
        let err = refusal(
            host.domain("report").unwrap(),
            "require('@skein/resources').import('scores').total()",
        );
        assert_contains(&err, "attempt to perform arithmetic (add) on nil");
        let stopped: Vec<String> = host.shutdown().into_iter().map(|(n, _)| n).collect();
        assert_eq!(stopped, ["report", "scores", "store"]);
        assert_eq!(live.get(), 0, "an actor thread outlived its resource");
    };
    let idle = |pool: &Pool| {
        wait_until(Duration::from_secs(10), || {
            pool.stats()
                .iter()
                .all(|w| w.vms_held == 0 && w.keys_held == 0)
        })
    };
    // Warm-up: the allocator's arenas and the bytecode cache reach their working size in the
    // first rounds. Measured over 1,000 rounds after 60 of warm-up, RSS climbed 7-14% to round
    // 500 and then stayed level or fell, so the baseline is taken once that plateau is reached:
    // growth past it is what a leak would show.
    let warm_up = if cfg!(debug_assertions) { 100 } else { 500 };
    for i in 0..warm_up {
        round(&mut host, i);
    }
    assert!(idle(&pool), "{:?}", pool.stats());
    let (threads_before, rss_before) = (threads(), rss_pages());
    let started = std::time::Instant::now();
    let rounds = if cfg!(debug_assertions) { 200 } else { 1000 };
    let mut rss_half = 0;
    for i in 0..rounds {
        round(&mut host, i);
        if i == rounds / 2 {
            rss_half = rss_pages();
        }
    }
    let elapsed = started.elapsed();
    assert!(
        idle(&pool),
        "VMs or keys left on the workers: {:?}",
        pool.stats()
    );
    assert_eq!(threads(), threads_before, "threads were left behind");
    let rss_after = rss_pages();
    assert!(
        rss_after * 10 <= rss_before * 11,
        "memory grew from {rss_before} to {rss_after} pages over {rounds} rounds"
    );
    eprintln!(
        "{rounds} rounds of start, call, reload, stop of three resources: {elapsed:?}; \
         RSS {rss_before} -> {rss_half} (half way) -> {rss_after} pages; {threads_before} threads"
    );
}

/// The `@skein/resources` example of docs/luau-api.md, run in the resource it describes.
#[test]
fn the_luau_api_example_runs_in_a_resource() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/luau-api.md")).unwrap();
    let fence = "```luau no-run\nlocal resources = require(\"@skein/resources\")";
    let start = doc.find(fence).expect("the example") + "```luau no-run\n".len();
    let body = &doc[start..];
    let body = &body[..body.find("```").unwrap()];
    let tree = served(&[
        (
            "store",
            &manifest(&["get", "set"], &[]),
            "local data = {} function get(k) return data[k] end function set(k, v) data[k] = v end",
        ),
        ("scores", &manifest(&[], &["store"]), ""),
    ]);
    let mut host = host(&tree);
    host.start_set(&["scores", "store"]).unwrap();
    host.domain("scores")
        .unwrap()
        .exec(body)
        .unwrap_or_else(|e| panic!("the example failed: {e}\n{body}"));
}

#[test]
fn a_refused_reload_keeps_or_stops_the_resource_and_says_why() {
    let tree = served(&[("store", &manifest(&["get"], &[]), STORE)]);
    let mut host = host(&tree);
    host.start("store").unwrap();
    // A manifest that no longer parses: refused before the stop, nothing changes.
    tree.write("store/skein.toml", "[resource]\nscripts = 'main.luau'\n");
    let (got, message) = resource_error(host.reload("store").unwrap_err());
    assert_eq!(got, ResourceRefusal::Manifest);
    assert_contains(
        &message,
        "store/skein.toml:2: resource.scripts: invalid type",
    );
    assert_eq!(state_of(&host, "store"), (ResourceState::Running, 1));
    assert_eq!(
        eval(&host, "store", "return get == nil"),
        Message::Boolean(false)
    );
    // Scripts that raise: the old generation has stopped, the new one does not run.
    tree.write("store/skein.toml", &manifest(&["get"], &[]));
    tree.write("store/main.luau", "error('half written')");
    let (got, message) = resource_error(host.reload("store").unwrap_err());
    assert_eq!(got, ResourceRefusal::Script);
    assert_contains(&message, "reload: resource 'store': main.luau: ");
    assert_contains(&message, "half written");
    let info = host.list().remove(0);
    assert_eq!((info.state, info.generation), (ResourceState::Failed, 1));
    assert_contains(info.last_error.as_deref().unwrap(), "half written");
    assert!(host.domain("store").is_none());
    // Fixed on disk, it starts again as a new generation.
    tree.write("store/main.luau", STORE);
    host.reload("store").unwrap();
    assert_eq!(state_of(&host, "store"), (ResourceState::Running, 2));
}

#[test]
fn the_module_belongs_to_resources_and_its_proxies_are_read_only() {
    let tree = served(&[("store", &manifest(&["get"], &[]), STORE)]);
    let mut host = host(&tree);
    host.start("store").unwrap();
    let store = host.domain("store").unwrap();
    assert_eq!(
        refusal(store, "require('@skein/resources').import(42)"),
        "eval:1: resources.import: name must be a string, got number"
    );
    // A resource is named after its folder, in at most 64 bytes: a longer name is refused
    // before the proxy quotes it (its texts copied a 64 MiB name into a VM with no room).
    assert_eq!(
        refusal(
            store,
            "require('@skein/resources').import(string.rep('r', 64 * 1024 * 1024))"
        ),
        "eval:1: resources.import: name must be a resource name of 1 to 64 bytes, got a string \
         of 67108864 bytes"
    );
    assert_eq!(
        refusal(
            store,
            "require('@skein/resources').import(string.rep('r', 65))"
        ),
        "eval:1: resources.import: name must be a resource name of 1 to 64 bytes, got a string \
         of 65 bytes"
    );
    assert!(error_of(
        store,
        "require('@skein/resources').import(string.rep('r', 64))"
    )
    .is_none());
    assert_eq!(
        refusal(
            store,
            "require('@skein/resources').import('store').get = print"
        ),
        "eval:1: resource 'store': a proxy is read-only"
    );
    assert_eq!(
        eval(
            &host,
            "store",
            "return tostring(require('@skein/resources').import('x'))"
        ),
        Message::String("resource 'x'".into())
    );
    // A resource may call its own exports through a proxy.
    assert_eq!(
        eval(
            &host,
            "store",
            "set = nil return require('@skein/resources').import('store').get('none')"
        ),
        Message::Nil
    );
    // A domain that is not a resource has no such module.
    let plain = skein::ScriptDomain::new(&Pool::new(1), skein::DomainSpec::new("plain")).unwrap();
    let err = refusal(&plain, "require('@skein/resources')");
    assert_contains(&err, "@skein/resources");
}

/// The direct copy of a call's arguments takes at most one copy's bound in all; past it, each
/// argument still within its own bound, the call goes the `Message` way and arrives whole. A
/// call with every kind of value the direct copy takes arrives equal.
#[test]
fn arguments_past_the_direct_copys_bound_still_arrive_and_every_kind_arrives_equal() {
    let tree = served(&[
        ("store", &manifest(&["echo"], &[]), STORE),
        (
            "scores",
            &manifest(&[], &["store"]),
            "store = require('@skein/resources').import('store')",
        ),
    ]);
    let mut host = host(&tree);
    host.start_set(&["store", "scores"]).unwrap();
    let scores = host.domain("scores").unwrap();
    let half = skein::message::Limits::MAX_MESSAGE_BYTES / 2;
    let lengths = scores
        .eval(&format!(
            "local a, b = store.echo(string.rep('a', {half}), string.rep('b', {half})) \
             return #a + #b"
        ))
        .unwrap();
    assert_eq!(lengths, Message::Number((2 * half) as f64));
    let same = scores
        .eval(
            "local t = { 1, 'two', integer.create(3), vector.create(1, 2, 3), buffer.fromstring('b'), \
               x = { y = { true } }, [2.5] = 'half', [integer.create(9)] = false } \
             local r = store.echo(t, nil, 7) \
             local n = select('#', store.echo(t, nil, 7)) \
             return n == 3 and r ~= t and r[1] == 1 and r[2] == 'two' and r[3] == integer.create(3) \
               and r[4] == vector.create(1, 2, 3) and buffer.tostring(r[5]) == 'b' \
               and r.x.y[1] == true and r[2.5] == 'half' and r[integer.create(9)] == false",
        )
        .unwrap();
    assert_eq!(same, Message::Boolean(true));
}

#[test]
#[cfg(unix)]
fn a_script_that_links_out_of_its_folder_is_refused_and_the_others_start() {
    let tree = Tree::new(&[
        (
            "outside/secret.luau",
            "print('the secret ran')\nsecret = 42\n",
        ),
        (
            "res/evil/skein.toml",
            "[resource]\nscripts = ['main.luau']\n",
        ),
        ("res/good/skein.toml", &manifest(&["answer"], &[])),
        (
            "res/good/impl/main.luau",
            "function answer() return 7 end\n",
        ),
    ]);
    let res = tree.path().join("res");
    std::os::unix::fs::symlink(
        tree.path().join("outside/secret.luau"),
        res.join("evil/main.luau"),
    )
    .expect("link out");
    // A link that stays inside its folder is followed.
    std::os::unix::fs::symlink("impl/main.luau", res.join("good/main.luau")).expect("link in");
    let mut host = ResourceHost::load(&Pool::new(2), &res, Grant::default()).expect("load");
    let (refusal, message) = resource_error(host.start("evil").unwrap_err());
    assert_eq!(refusal, ResourceRefusal::Script);
    assert_eq!(
        message,
        format!(
            "start: resource 'evil': main.luau: cannot read the script {}: it leads outside the folder {}",
            res.join("evil/main.luau").display(),
            res.join("evil").display()
        )
    );
    assert_eq!(state_of(&host, "evil"), (ResourceState::Failed, 0));
    // The host goes on: the other resource starts and answers.
    host.start("good").expect("good starts");
    assert_eq!(eval(&host, "good", "return answer()"), Message::Number(7.0));
    host.shutdown();
}

#[test]
fn a_luaurc_above_a_resource_does_not_widen_its_project_root() {
    let tree = Tree::new(&[
        // Above the served folder, and in it: each would make its folder the project root of
        // every script below it.
        (".luaurc", r#"{ "aliases": { "up": "./res" } }"#),
        ("res/.luaurc", r#"{ "aliases": { "b": "./b" } }"#),
        ("res/b/skein.toml", "[resource]\n"),
        ("res/b/private.luau", "return 'b private'\n"),
        ("res/a/skein.toml", "[resource]\nscripts = ['main.luau']\n"),
        ("res/a/own.luau", "return 'a own'\n"),
        (
            "res/a/main.luau",
            "own = require('./own')\n\
             tried = {}\n\
             for _, spec in { '../b/private', '@b/private', '@up/b/private' } do\n\
               local ok, err = pcall(require, spec)\n\
               table.insert(tried, if ok then 'loaded' else tostring(err))\n\
             end\n",
        ),
    ]);
    let res = tree.path().join("res");
    let mut host = ResourceHost::load(&Pool::new(2), &res, Grant::default()).expect("load");
    host.start_set(&["a", "b"]).expect("start");
    // Its own modules load.
    assert_eq!(text(&eval(&host, "a", "return own")), "a own");
    let main = res.join("a/main.luau");
    let root = res.join("a");
    for (i, spec) in ["../b/private", "@b/private", "@up/b/private"]
        .iter()
        .enumerate()
    {
        let got = text(&eval(&host, "a", &format!("return tried[{}]", i + 1)));
        assert_contains(
            &got,
            &format!(
                "module '{spec}' from {} leads outside the project root {}",
                main.display(),
                root.display()
            ),
        );
    }
    // Host code in the resource's VM is confined the same way.
    let got = text(&eval(
        &host,
        "a",
        "local ok, err = pcall(require, '../b/private') return tostring(err)",
    ));
    assert_contains(
        &got,
        &format!("outside the project root {}", root.display()),
    );
    host.shutdown();
}

#[test]
fn a_manifest_deadline_wins_over_the_hosts_and_a_resource_past_it_fails_alone() {
    let tree = served(&[
        (
            "slow",
            "[resource]\nscripts = ['main.luau']\ndeadline_ms = 100\n",
            "while true do end",
        ),
        (
            "spinner",
            "[resource]\nscripts = ['main.luau']\nexports = ['spin']\ndeadline_ms = 60\n",
            "function spin() while true do end end",
        ),
        (
            "hosted",
            "[resource]\nscripts = ['main.luau']\n",
            "while true do end",
        ),
        ("caller", &manifest(&[], &["spinner"]), ""),
    ]);
    let mut host = host(&tree);
    // The host's deadline, which `slow` and `spinner` replace with their own.
    host.spec_with(|_, spec| spec.run_deadline(Duration::from_millis(200)));
    let started = std::time::Instant::now();
    let (refusal_kind, message) = resource_error(host.start("slow").unwrap_err());
    assert_eq!(refusal_kind, ResourceRefusal::Script);
    assert_contains(
        &message,
        "failed: deadline exceeded: one run took longer than 0.1 s",
    );
    assert!(
        message.starts_with("start: resource 'slow': main.luau: "),
        "{message}"
    );
    let (_, message) = resource_error(host.start("hosted").unwrap_err());
    assert_contains(
        &message,
        "failed: deadline exceeded: one run took longer than 0.2 s",
    );
    // The host goes on: the others start, and an export past its own deadline fails the call
    // alone.
    host.start_set(&["caller", "spinner"]).expect("start");
    let err = refusal(
        host.domain("caller").unwrap(),
        "require('@skein/resources').import('spinner').spin()",
    );
    assert!(
        err.starts_with("spinner.spin: deadline exceeded: one run took longer than 0.06 s"),
        "{err}"
    );
    assert_eq!(eval(&host, "caller", "return 1 + 1"), Message::Number(2.0));
    assert_eq!(state_of(&host, "slow"), (ResourceState::Failed, 0));
    assert_eq!(state_of(&host, "spinner"), (ResourceState::Running, 1));
    assert!(started.elapsed() < Duration::from_secs(10));
    host.shutdown();
}

/// Each resource's domain holds its VMs' limits on the pool's memory budget while it runs: a
/// manifest's `memory` asks for smaller VMs, so more resources fit; the one past the budget
/// fails alone with a text naming the budget, and the others go on. A manifest may not ask for
/// more than the host's VM limit.
#[test]
fn a_resource_past_the_pools_memory_fails_alone_and_a_manifest_sizes_its_vms() {
    let small = "[resource]\nscripts = ['main.luau']\nexports = ['ping']\nmemory = '16M'\n";
    let main = "function ping() return 'pong' end";
    let tree = served(&[
        ("a", small, main),
        ("b", small, main),
        ("c", small, main),
        (
            "big",
            "[resource]\nscripts = ['main.luau']\nmemory = '1G'\n",
            main,
        ),
    ]);
    // One worker: a resource holds 2 VMs of 16 MiB, so 64 MiB fits two of them.
    let pool = Pool::with_memory_budget(1, 64 << 20);
    let mut host = ResourceHost::load(&pool, tree.path(), Grant::default()).expect("load");
    host.memory_limit(512 << 20);
    host.start("a").unwrap();
    host.start("b").unwrap();
    assert_eq!(pool.memory_held(), 64 << 20);
    let err = host.start("c").unwrap_err();
    assert_eq!(
        err.to_string(),
        "not enough memory: domain 'c' needs 2 VMs of 16 MiB (its engine VM and one per \
         worker), and the pool's memory would hold 96 MiB, past its budget of 64 MiB"
    );
    assert_eq!(state_of(&host, "c").0, ResourceState::Failed);
    assert_eq!(eval(&host, "a", "return ping()"), string("pong"));
    assert_eq!(
        host.start("big").unwrap_err().to_string(),
        "not enough memory: resource 'big' asks for VMs of 1 GiB, more than the host's VM \
         limit of 512 MiB"
    );
    // A stopped resource gives its VMs' memory back, and the one refused starts.
    host.stop("b").unwrap();
    assert_eq!(pool.memory_held(), 32 << 20);
    host.start("c").unwrap();
    assert_eq!(eval(&host, "c", "return ping()"), string("pong"));
}
