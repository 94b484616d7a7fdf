//! `require` stays inside the requirer's project root (the main script's folder, or the nearest
//! folder above it with a `.luaurc`): `../`, an alias and a symbolic link out are refused before
//! the file is read, on the engine VM and on workers alike, in one text whether anything is out
//! there or not. And what `require` refuses inside it: a folder or a FIFO where a module file
//! should be (never opened), modules nested past the bound, a path that is not UTF-8 text.

use std::os::unix::fs::symlink;
use std::path::Path;

use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, mkfifo, refusal as raised, Tree};

/// `top/proj` is the project (it has a `.luaurc` aliasing `@up` to `..`); `top/secret.luau` and
/// `top/bad.luau` (which does not compile, and quotes a secret) lie outside it.
fn tree() -> Tree {
    let tree = Tree::new(&[
        ("secret.luau", "return 'SECRET'\n"),
        ("bad.luau", "local SECRET-LINE = 1\n"),
        ("proj/.luaurc", r#"{ "aliases": { "up": ".." } }"#),
        ("proj/lib/util.luau", "return { v = 'util' }\n"),
        (
            "proj/lib/job.luau",
            r#"
            return {
                inside = function() return require("./util").v end,
                outside = function() return require("../../secret") end,
            }
            "#,
        ),
        (
            "proj/lib/reach.luau",
            "local ok, err = pcall(function() return require('../../secret') end)\nreturn { ok = ok, err = tostring(err) }\n",
        ),
        (
            "proj/main.luau",
            r#"
            local function try(spec)
                -- Called from this file (`pcall(require, ...)` would resolve from the plan's
                -- root, not this test's subject).
                local ok, err = pcall(function() return require(spec) end)
                return if ok then "loaded" else string.match(tostring(err), "^[^\n]*")
            end
            out = {
                util = require("./lib/util").v,
                up = try("../secret"),
                link = try("./link/secret"),
                alias = try("@up/secret"),
                bad = try("../bad"),
                nested = require("./lib/reach").err,
                -- Whether a file exists out there is not told.
                missing = try("../nothing/here"),
            }
            "#,
        ),
    ]);
    symlink("..", tree.path().join("proj/link")).unwrap();
    tree
}

/// The one refusal of a path out of `tree`'s project, found or not.
fn refusal(spec: &str, caller: &Path, tree: &Tree) -> String {
    format!(
        "module '{spec}' from {} leads outside the project root {}: modules are required only \
         from below it (the main script's folder, or the nearest folder above it with a .luaurc)",
        caller.display(),
        tree.path().join("proj").display()
    )
}

fn field(m: &Message, name: &str) -> String {
    crate::support::text(crate::support::field(m, name))
}

#[test]
fn a_main_script_requires_only_below_its_project_root() {
    let tree = tree();
    let pool = Pool::new(1);
    // The plan's root is wider than the project: it does not widen what a file may require.
    let domain = ScriptDomain::new(
        &pool,
        DomainSpec::new("mods").plan(Plan::new().root(tree.path())),
    )
    .unwrap();
    let main = tree.path().join("proj/main.luau");
    domain.run_file(&main, &[]).unwrap();
    domain.run_until_idle().unwrap();
    let out = domain.eval("return out").unwrap();
    assert_eq!(field(&out, "util"), "util");
    for (key, spec) in [
        ("up", "../secret"),
        ("link", "./link/secret"),
        ("alias", "@up/secret"),
    ] {
        assert_contains(&field(&out, key), &refusal(spec, &main, &tree));
    }
    // Refused before it is compiled: the syntax error that would quote it never happens.
    let bad = field(&out, "bad");
    assert_contains(&bad, &refusal("../bad", &main, &tree));
    assert!(!bad.contains("SECRET-LINE"), "{bad}");
    assert_contains(
        &field(&out, "missing"),
        &format!(
            "module '../nothing/here' from {} leads outside the project root {}: modules are \
             required only from below it (the main script's folder, or the nearest folder above \
             it with a .luaurc)",
            main.display(),
            tree.path().join("proj").display()
        ),
    );
    // A module keeps its requirer's project root.
    assert_contains(
        &field(&out, "nested"),
        &refusal(
            "../../secret",
            &tree.path().join("proj/lib/reach.luau"),
            &tree,
        ),
    );
}

#[test]
fn a_job_on_a_worker_requires_under_the_project_root_it_was_dispatched_under() {
    let tree = tree();
    let pool = Pool::new(2);
    let domain = ScriptDomain::new(
        &pool,
        DomainSpec::new("mods").plan(Plan::new().root(tree.path().join("proj"))),
    )
    .unwrap();
    assert_eq!(
        domain
            .dispatch("./lib/job", "inside", Message::Nil)
            .unwrap()
            .wait()
            .unwrap(),
        Message::String("util".into())
    );
    let err = domain
        .dispatch("./lib/job", "outside", Message::Nil)
        .unwrap()
        .wait()
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        &refusal(
            "../../secret",
            &tree.path().join("proj/lib/job.luau"),
            &tree,
        ),
    );
    // Host code requires from the plan's root, under that folder's project root.
    let err = domain
        .eval("return require('../secret')")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        &refusal("../secret", &tree.path().join("proj"), &tree),
    );
    // The pool serves on.
    assert_eq!(
        domain.eval("return require('./lib/util').v").unwrap(),
        Message::String("util".into())
    );
}

#[test]
fn the_nearest_luaurc_above_the_main_script_widens_its_project_root() {
    let tree = Tree::new(&[
        ("wide/.luaurc", "{}"),
        ("wide/shared/m.luau", "return 'shared'\n"),
        (
            "wide/app/main.luau",
            "out = require('../shared/m')\nlocal ok, err = pcall(function() return require('../../outside') end)\nrefused = tostring(err)\n",
        ),
        ("outside.luau", "return 'outside'\n"),
    ]);
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(
        &pool,
        DomainSpec::new("mods").plan(Plan::new().root(tree.path())),
    )
    .unwrap();
    let main = tree.path().join("wide/app/main.luau");
    domain.run_file(&main, &[]).unwrap();
    domain.run_until_idle().unwrap();
    assert_eq!(
        domain.eval("return out").unwrap(),
        Message::String("shared".into())
    );
    let refused = crate::support::text(&domain.eval("return refused").unwrap());
    assert_contains(
        &refused,
        &format!(
            "module '../../outside' from {} leads outside the project root {}",
            main.display(),
            tree.path().join("wide").display()
        ),
    );
}

/// What `body` raised in `domain`'s engine VM, as the code that caught it reads it: one line.
#[track_caller]
fn message_of(domain: &ScriptDomain, body: &str) -> String {
    let text = raised(domain, body);
    assert!(
        !text.contains('\n'),
        "a caught error is its text alone: {text:?}"
    );
    text
}

#[test]
fn a_path_out_of_the_project_root_is_refused_alike_whether_anything_is_there() {
    let tree = tree();
    let top = tree.path();
    std::fs::create_dir(top.join("secretdir")).unwrap();
    mkfifo(&top.join("pipe.luau"));
    // Links inside the project: to a file out there, to nothing out there, to the folder above.
    symlink("../secret.luau", top.join("proj/out.luau")).unwrap();
    symlink("../nothing.luau", top.join("proj/gone.luau")).unwrap();
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(
        &pool,
        DomainSpec::new("mods").plan(Plan::new().root(top.join("proj"))),
    )
    .unwrap();
    let proj = top.join("proj");
    for spec in [
        // A module out there, nothing, a folder, a FIFO.
        "../secret",
        "../nothing",
        "../secretdir",
        "../pipe",
        // Through links: to a module out there, a dangling one, a folder link then a module or
        // nothing.
        "./out",
        "./gone",
        "./link/secret",
        "./link/nothing",
    ] {
        assert_eq!(
            message_of(&domain, &format!("return require('{spec}')")),
            refusal(spec, &proj, &tree),
            "require('{spec}')"
        );
    }
    // A job's module is resolved and confined the same way.
    for spec in ["../secret", "../nothing", "./link/nothing"] {
        assert_eq!(
            message_of(
                &domain,
                &format!("return require('@skein/jobs').dispatch('{spec}', 'f')")
            ),
            format!("jobs.dispatch: {}", refusal(spec, &proj, &tree)),
            "jobs.dispatch('{spec}')"
        );
    }
    // Nothing out there was read, and the project's own modules load.
    assert_eq!(
        domain.eval("return require('./lib/util').v").unwrap(),
        Message::String("util".into())
    );
}

#[test]
fn a_folder_or_a_fifo_where_a_module_file_should_be_is_named_and_never_opened() {
    let tree = Tree::new(&[
        ("m/readme.txt", "not a module\n"),
        ("swap.luau", "return 'first'\n"),
    ]);
    let root = tree.path();
    mkfifo(&root.join("pipe.luau"));
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    assert_eq!(
        message_of(&domain, "return require('./m')"),
        format!(
            "module './m' from {0} is a directory, not a module file: {0}/m has no init.luau or \
             init.lua",
            root.display()
        )
    );
    let fifo = format!(
        "module './pipe' from {0} is not a regular file: {0}/pipe.luau is a FIFO, which is never \
         read as a module",
        root.display()
    );
    assert_eq!(message_of(&domain, "return require('./pipe')"), fifo);
    // A module that loaded, swapped for a FIFO: seen as changed without being opened, and
    // refused as one.
    assert_eq!(
        domain.eval("return require('./swap')").unwrap(),
        Message::String("first".into())
    );
    std::fs::remove_file(root.join("swap.luau")).unwrap();
    mkfifo(&root.join("swap.luau"));
    assert_eq!(
        message_of(&domain, "return require('./swap')"),
        fifo.replace("pipe", "swap")
    );
    // Nothing was loaded in their place, and the VM serves on.
    tree.write("m/init.luau", "return 'folder module'\n");
    assert_eq!(
        domain.eval("return require('./m')").unwrap(),
        Message::String("folder module".into())
    );
}

#[test]
fn modules_nest_100_deep_and_the_101st_is_refused_naming_the_chain() {
    // `m1` requires `m2` ... requires `m101`, which returns 0; each returns one more.
    let files: Vec<(String, String)> = (1..=101)
        .map(|i| {
            let body = if i == 101 {
                "return 0\n".to_owned()
            } else {
                format!("return require('./m{}') + 1\n", i + 1)
            };
            (format!("m{i}.luau"), body)
        })
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_str()))
        .collect();
    let tree = Tree::new(&borrowed);
    let m = |i: usize| tree.path().join(format!("m{i}.luau")).display().to_string();
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    // One past the bound: m1 to m100 are loading when m100 requires m101.
    let past = format!(
        "require: modules nest more than 100 deep: {} requires {} requires {} requires ... (95 \
         more) requires {} requires {} requires {}",
        m(1),
        m(2),
        m(3),
        m(99),
        m(100),
        m(101)
    );
    assert_eq!(message_of(&domain, "return require('./m1')"), past);
    // Nothing was kept of the failed chain: the same require is refused the same way.
    assert_eq!(message_of(&domain, "return require('./m1')"), past);
    // At the bound: m2 to m101, 100 modules, load.
    assert_eq!(
        crate::support::number(&domain.eval("return require('./m2')").unwrap()),
        99.0
    );
    // A loaded module answers at any depth: m1 now loads on top of them.
    assert_eq!(
        crate::support::number(&domain.eval("return require('./m1')").unwrap()),
        100.0
    );
}

#[test]
fn a_require_path_that_is_not_a_utf8_string_is_refused_naming_it() {
    let tree = Tree::new(&[("m.luau", "return 1\n")]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    assert_eq!(
        message_of(&domain, "return require('./\\255')"),
        "require: path must be UTF-8 text"
    );
    assert_eq!(
        message_of(&domain, "return require(nil)"),
        "require: path must be a string, got nil"
    );
    assert_eq!(
        message_of(&domain, "return require(newproxy())"),
        "require: path must be a string, got a userdata"
    );
    assert_eq!(
        crate::support::number(&domain.eval("return require('./m')").unwrap()),
        1.0
    );
}
