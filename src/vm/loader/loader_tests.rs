//! Tests of the loader against real folder trees on disk.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mlua::{Lua, Value};

use super::*;

/// A temporary tree of files; paths are canonical so they compare with `resolve`'s answers.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let tree = Self { _dir: dir, root };
        for (path, text) in files {
            tree.write(path, text);
        }
        tree
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn p(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    fn resolve(&self, caller: &str, spec: &str) -> Result<PathBuf, RequireError> {
        resolve(&self.p(caller), spec)
    }

    /// Asserts that `spec`, required from `caller`, resolves to `expected`.
    fn resolves(&self, caller: &str, spec: &str, expected: &str) {
        match self.resolve(caller, spec) {
            Ok(found) => assert_eq!(found, self.p(expected), "require('{spec}') from {caller}"),
            Err(e) => panic!("require('{spec}') from {caller} was refused: {e}"),
        }
    }

    /// Asserts that `spec`, required from `caller`, is refused with `expected` (`$R` standing for
    /// the root).
    fn refuses(&self, caller: &str, spec: &str, expected: &str) {
        assert_eq!(
            self.err(caller, spec),
            expected,
            "require('{spec}') from {caller}"
        );
    }

    fn err(&self, caller: &str, spec: &str) -> String {
        self.resolve(caller, spec)
            .unwrap_err()
            .to_string()
            .replace(self.root.to_str().unwrap(), "$R")
    }
}

// ---- resolve ----

#[test]
fn relative_paths_from_a_file() {
    let t = Tree::new(&[
        ("main.luau", ""),
        ("x.luau", ""),
        ("a/b.luau", ""),
        ("a/c/d.lua", ""),
        ("up.luau", ""),
    ]);
    t.resolves("main.luau", "./x", "x.luau");
    t.resolves("main.luau", "./a/b", "a/b.luau");
    t.resolves("main.luau", "./a/c/d", "a/c/d.lua");
    t.resolves("a/b.luau", "../up", "up.luau");
    t.resolves("a/c/d.lua", "../../x", "x.luau");
    t.resolves("a/c/d.lua", "./../b", "a/b.luau");
    assert_eq!(
        t.resolve("main.luau", ".\\a\\b").unwrap(),
        t.p("a/b.luau"),
        "backslash is a separator"
    );
}

#[test]
fn init_folders_and_self() {
    let t = Tree::new(&[
        ("main.luau", ""),
        ("pkg/init.luau", ""),
        ("pkg/inner.luau", ""),
        ("sib.luau", ""),
        ("m.luau", ""),
        ("m/child.luau", ""),
        ("legacy/init.lua", ""),
    ]);
    t.resolves("main.luau", "./pkg", "pkg/init.luau");
    t.resolves("main.luau", "./legacy", "legacy/init.lua");
    // From an init file, ./ is beside the folder, and @self is inside it.
    t.resolves("pkg/init.luau", "./sib", "sib.luau");
    t.resolves("pkg/init.luau", "@self/inner", "pkg/inner.luau");
    // `init` is never named directly: the folder is the module.
    t.refuses("pkg/inner.luau", "./init", "module './init' not found from $R/pkg/inner.luau: an init file is its folder's module, so require $R/pkg instead");
    t.resolves("pkg/inner.luau", "@self/..", "pkg/init.luau");
    // From a plain file, @self is the module's own folder of children.
    t.resolves("m.luau", "@SELF/child", "m/child.luau");
    // A folder caller (an inline chunk) resolves from inside the folder.
    t.resolves("pkg", "./inner", "pkg/inner.luau");
    t.resolves("pkg", "@self/inner", "pkg/inner.luau");
}

#[test]
fn ambiguity_names_both_files() {
    let t = Tree::new(&[
        ("main.luau", ""),
        ("x.luau", ""),
        ("x.lua", ""),
        ("y.luau", ""),
        ("y/init.luau", ""),
    ]);
    t.refuses(
        "main.luau",
        "./x",
        "module './x' from $R/main.luau is ambiguous: both $R/x.luau and $R/x.lua exist",
    );
    t.refuses(
        "main.luau",
        "./y",
        "module './y' from $R/main.luau is ambiguous: both $R/y.luau and $R/y/init.luau exist",
    );
}

#[test]
fn not_found_texts() {
    let t = Tree::new(&[("main.luau", ""), ("empty/.keep", "")]);
    t.refuses("main.luau", "./x", "module './x' not found from $R/main.luau (tried $R/x.luau, $R/x.lua, $R/x/init.luau, $R/x/init.lua)");
    t.refuses("main.luau", "./empty", "module './empty' from $R/main.luau is a directory, not a module file: $R/empty has no init.luau or init.lua");
    t.refuses(
        "main.luau",
        "./nope/x",
        "module './nope/x' not found from $R/main.luau: no module or folder at $R/nope",
    );
}

#[test]
fn bad_specifier_texts() {
    let t = Tree::new(&[("main.luau", "")]);
    let cases = [
        ("", "invalid require path '': it is empty"),
        ("x", "invalid require path 'x': it must start with ./, ../ or @"),
        ("a/b", "invalid require path 'a/b': it must start with ./, ../ or @"),
        ("/abs/x", "invalid require path '/abs/x': absolute paths are not allowed; start it with ./, ../ or @"),
        ("./x.luau", "invalid require path './x.luau': leave out the file extension"),
        ("./x.lua", "invalid require path './x.lua': leave out the file extension"),
        ("@", "invalid require path '@': an alias name must follow '@'"),
        ("@/x", "invalid require path '@/x': an alias name must follow '@'"),
    ];
    for (spec, text) in cases {
        assert_eq!(t.err("main.luau", spec), text);
    }
}

#[test]
fn a_require_path_past_its_bound_is_refused_by_its_length_and_quoted_in_part() {
    // Each text of a path that did not resolve quotes it, some five times over (the paths
    // tried): a 64 MiB path made texts of hundreds of MiB, past what the process could hold.
    let t = Tree::new(&[("main.luau", "")]);
    let at_bound = format!("./{}", "a".repeat(MAX_SPEC_BYTES - 2));
    assert!(t.err("main.luau", &at_bound).starts_with("module './aaaa"));
    let huge = format!("./{}", "a".repeat(64 << 20));
    assert_eq!(
        t.err("main.luau", &huge),
        format!(
            "invalid require path './{}...' ({} bytes): it is longer than the 1024 bytes a \
             require path may have",
            "a".repeat(62),
            huge.len()
        )
    );
}

#[test]
fn aliases_nearest_wins_case_insensitive_relative_to_rc() {
    let t = Tree::new(&[
        (
            ".luaurc",
            r#"{ "aliases": { "Lib": "./outer", "shared": "./common", } }"#,
        ),
        ("outer/x.luau", ""),
        ("common/init.luau", ""),
        (
            "app/.luaurc",
            "{ // nearer\n \"aliases\": { \"lib\": \"../inner\" } }",
        ),
        ("inner/x.luau", ""),
        ("app/main.luau", ""),
        ("top.luau", ""),
    ]);
    t.resolves("app/main.luau", "@lib/x", "inner/x.luau");
    t.resolves("app/main.luau", "@LIB/x", "inner/x.luau");
    t.resolves("top.luau", "@lib/x", "outer/x.luau");
    // Not defined nearby: inherited from the folder above, relative to that .luaurc.
    t.resolves("app/main.luau", "@shared", "common/init.luau");
}

#[test]
fn alias_values_may_chain_and_be_absolute() {
    let t = Tree::new(&[("lib/x.luau", ""), ("main.luau", "")]);
    let lib = t.p("lib");
    t.write(
        ".luaurc",
        &format!(
            r#"{{"aliases": {{"abs": "{}", "via": "@abs", "loop": "@loop"}}}}"#,
            lib.display()
        ),
    );
    t.resolves("main.luau", "@abs/x", "lib/x.luau");
    t.resolves("main.luau", "@via/x", "lib/x.luau");
    let err = t.err("main.luau", "@loop/x");
    assert!(
        err.starts_with("invalid .luaurc at $R/.luaurc: alias \"loop\" refers to aliases"),
        "{err}"
    );
}

#[test]
fn unknown_alias_and_bad_config_texts() {
    let t = Tree::new(&[
        ("main.luau", ""),
        ("sub/.luaurc", "{ \"aliases\": "),
        ("sub/m.luau", ""),
    ]);
    t.refuses("main.luau", "@nope/x", "unknown alias '@nope' in require path '@nope/x' from $R/main.luau: no .luaurc above it defines it");
    let err = t.err("sub/m.luau", "@x");
    assert!(
        err.starts_with("invalid .luaurc at $R/sub/.luaurc: "),
        "{err}"
    );
}

/// A `.luaurc` of exactly `len` bytes whose one alias is `lib` to `./lib`: the JSON padded
/// with spaces.
fn luaurc_of_length(len: usize) -> String {
    let mut text = String::from(r#"{ "aliases": { "lib": "./lib" } }"#);
    text.push_str(&" ".repeat(len - text.len()));
    text
}

#[test]
fn a_luaurc_at_its_bound_is_read_and_one_byte_past_it_is_refused_naming_file_and_bound() {
    let t = Tree::new(&[
        ("at/lib/x.luau", ""),
        ("at/main.luau", ""),
        ("past/lib/x.luau", ""),
        ("past/y.luau", ""),
        ("past/main.luau", ""),
    ]);
    t.write("at/.luaurc", &luaurc_of_length(luaurc::MAX_LUAURC_BYTES));
    t.write(
        "past/.luaurc",
        &luaurc_of_length(luaurc::MAX_LUAURC_BYTES + 1),
    );
    t.resolves("at/main.luau", "@lib/x", "at/lib/x.luau");
    t.refuses(
        "past/main.luau",
        "@lib/x",
        "invalid .luaurc at $R/past/.luaurc: it is longer than the limit of 1048576 bytes",
    );
    // Only the aliases of that folder are refused: its relative requires, and the other
    // folder's aliases, still resolve.
    t.resolves("past/main.luau", "./y", "past/y.luau");
    t.resolves("at/main.luau", "@lib/x", "at/lib/x.luau");
}

#[test]
fn a_sparse_two_gigabyte_luaurc_is_refused_without_being_read() {
    let t = Tree::new(&[("lib/x.luau", ""), ("main.luau", "")]);
    let file = std::fs::File::create(t.p(".luaurc")).unwrap();
    file.set_len(2 << 30).unwrap();
    t.refuses(
        "main.luau",
        "@lib/x",
        "invalid .luaurc at $R/.luaurc: it is longer than the limit of 1048576 bytes",
    );
}

// ---- bytecode cache ----

#[test]
fn the_bytecode_cache_keeps_at_most_max_cached_modules_files() {
    use super::bytecode::MAX_CACHED_MODULES;
    let dir = tempfile::tempdir().unwrap();
    let cache = BytecodeCache::new();
    for i in 0..MAX_CACHED_MODULES + 10 {
        let path = dir.path().join(format!("m{i}.luau"));
        std::fs::write(&path, format!("return {i}")).unwrap();
        cache.load(&path).unwrap();
        assert!(
            cache.files() <= MAX_CACHED_MODULES,
            "{} files kept",
            cache.files()
        );
    }
    assert_eq!(cache.files(), MAX_CACHED_MODULES);
    // An evicted file still loads: it is compiled again.
    let compiled = cache.compile_count();
    for i in 0..MAX_CACHED_MODULES + 10 {
        cache.load(&dir.path().join(format!("m{i}.luau"))).unwrap();
    }
    assert!(cache.compile_count() > compiled);
}

#[test]
fn bytecode_compiles_once_per_version() {
    let t = Tree::new(&[("m.luau", "return 1")]);
    let cache = BytecodeCache::new();
    let path = t.p("m.luau");
    let first = cache.load(&path).unwrap();
    let second = cache.load(&path).unwrap();
    assert_eq!(cache.compile_count(), 1);
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(first.chunk_name, format!("@{}", path.display()));

    // Same text, new mtime: no compile, same bytecode.
    bump_mtime(&path);
    let third = cache.load(&path).unwrap();
    assert_eq!(cache.compile_count(), 1);
    assert!(Arc::ptr_eq(&first.bytecode, &third.bytecode));
    assert_ne!(first.stamp.mtime, third.stamp.mtime);

    // An edit compiles again.
    t.write("m.luau", "return 22");
    bump_mtime(&path);
    let fourth = cache.load(&path).unwrap();
    assert_eq!(cache.compile_count(), 2);
    let lua = Lua::new();
    assert_eq!(fourth.load(&lua).unwrap().call::<i64>(()).unwrap(), 22);
}

#[test]
fn racing_threads_compile_a_new_file_once() {
    let t = Tree::new(&[("m.luau", "return 1")]);
    let cache = BytecodeCache::new();
    let barrier = std::sync::Barrier::new(4);
    let path = t.p("m.luau");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                barrier.wait();
                cache.load(&path).unwrap();
            });
        }
    });
    assert_eq!(cache.compile_count(), 1);
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let t = Tree::new(&[]);
    let err = BytecodeCache::new()
        .load(&t.p("gone.luau"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "could not read module {}: ",
            t.p("gone.luau").display()
        )),
        "{err}"
    );
}

/// Moves the file's mtime forward by a second, so coarse file-system clocks see a change.
fn bump_mtime(path: &Path) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    let mtime = file.metadata().unwrap().modified().unwrap() + std::time::Duration::from_secs(1);
    file.set_modified(mtime).unwrap();
}

#[test]
fn syntax_error_names_file_and_line() {
    let t = Tree::new(&[("bad.luau", "local x = 1\n\nlocal = 2\n")]);
    let cache = BytecodeCache::new();
    let err = cache.load(&t.p("bad.luau")).unwrap_err().to_string();
    let expected = format!("syntax error in {}:3: ", t.p("bad.luau").display());
    assert!(err.starts_with(&expected), "{err}");
    // A failed compile is not cached.
    assert!(cache.load(&t.p("bad.luau")).is_err());
    assert_eq!(cache.compile_count(), 2);
}

// ---- module cache ----

/// A VM whose `require(spec)` resolves from the calling chunk's file and goes through `cache`.
fn vm_with_require(cache: Rc<RefCell<ModuleCache>>) -> Lua {
    let lua = Lua::new();
    let require = lua
        .create_function(move |lua, spec: String| {
            let caller = lua
                .inspect_stack(1, |debug| {
                    debug
                        .source()
                        .source
                        .map(|s| s.trim_start_matches('@').to_owned())
                })
                .flatten()
                .ok_or_else(|| mlua::Error::runtime("require: no calling module"))?;
            let path = resolve(Path::new(&caller), &spec).map_err(RequireError::into_lua_error)?;
            ModuleCache::require(&cache, lua, &path).map_err(RequireError::into_lua_error)
        })
        .unwrap();
    lua.globals().set("require", require).unwrap();
    lua
}

use std::rc::Rc;

fn setup(files: &[(&str, &str)]) -> (Tree, Rc<RefCell<ModuleCache>>, Lua) {
    let t = Tree::new(files);
    let cache = Rc::new(RefCell::new(ModuleCache::new(Arc::new(
        BytecodeCache::new(),
    ))));
    let lua = vm_with_require(cache.clone());
    (t, cache, lua)
}

#[test]
fn nested_requires_reenter_and_values_are_shared() {
    let (t, cache, lua) = setup(&[
        (
            "main.luau",
            "local a = require('./a')\nlocal b = require('./b')\nreturn { a = a, b = b }",
        ),
        (
            "a.luau",
            "local b = require('./b')\nreturn { b = b, name = 'a' }",
        ),
        (
            "b.luau",
            "counter = (counter or 0) + 1\nreturn { name = 'b' }",
        ),
    ]);
    let main = ModuleCache::require(&cache, &lua, &t.p("main.luau")).unwrap();
    let main = main.as_table().unwrap();
    let a: mlua::Table = main.get("a").unwrap();
    let b: mlua::Table = main.get("b").unwrap();
    assert_eq!(
        a.get::<mlua::Table>("b").unwrap(),
        b,
        "one b table for both requirers"
    );
    assert_eq!(
        lua.globals().get::<i64>("counter").unwrap(),
        1,
        "b's body ran once"
    );
    assert_eq!(cache.borrow().len(), 3);
    // Requiring again hands back the identical value.
    let again = ModuleCache::require(&cache, &lua, &t.p("b.luau")).unwrap();
    assert_eq!(again.as_table().unwrap(), &b);
}

#[test]
fn three_module_cycle_names_all() {
    let (t, cache, lua) = setup(&[
        ("a.luau", "return require('./b')"),
        ("b.luau", "return require('./c')"),
        ("c.luau", "return require('./a')"),
    ]);
    let err = ModuleCache::require(&cache, &lua, &t.p("a.luau")).unwrap_err();
    let (a, b, c) = (t.p("a.luau"), t.p("b.luau"), t.p("c.luau"));
    let cycle = format!(
        "require cycle: {} -> {} -> {} -> {}",
        a.display(),
        b.display(),
        c.display(),
        a.display()
    );
    assert!(err.to_string().contains(&cycle), "{err}");
    // Nothing is left half-loaded: after fixing c, a loads.
    t.write("c.luau", "return 'c'");
    assert_eq!(
        ModuleCache::require(&cache, &lua, &t.p("a.luau")).unwrap(),
        Value::String(lua.create_string("c").unwrap())
    );
}

#[test]
fn edited_module_reloads_after_invalidate_changed() {
    let (t, cache, lua) = setup(&[("m.luau", "return { v = 1 }"), ("n.luau", "return 5")]);
    let m = t.p("m.luau");
    let first = ModuleCache::require(&cache, &lua, &m).unwrap();
    ModuleCache::require(&cache, &lua, &t.p("n.luau")).unwrap();
    assert_eq!(cache.borrow_mut().invalidate_changed(), 0);
    bump_mtime(&m);
    assert_eq!(
        cache.borrow_mut().invalidate_changed(),
        0,
        "a touch is not an edit"
    );
    t.write("m.luau", "return { v = 2 }");
    bump_mtime(&m);
    assert_eq!(cache.borrow_mut().invalidate_changed(), 1);
    let second = ModuleCache::require(&cache, &lua, &m).unwrap();
    assert_ne!(first, second);
    assert_eq!(second.as_table().unwrap().get::<i64>("v").unwrap(), 2);
}

#[test]
fn module_must_return_exactly_one_value() {
    let (t, cache, lua) = setup(&[("none.luau", "local x = 1"), ("two.luau", "return 1, 2")]);
    let err = ModuleCache::require(&cache, &lua, &t.p("none.luau"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "module {} must return exactly one value, but returned 0",
            t.p("none.luau").display()
        )
    );
    let err = ModuleCache::require(&cache, &lua, &t.p("two.luau"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "module {} must return exactly one value, but returned 2",
            t.p("two.luau").display()
        )
    );
    assert_eq!(cache.borrow().len(), 0);
}

#[test]
fn runtime_error_keeps_the_module_line_and_clears_the_stack() {
    let (t, cache, lua) = setup(&[("boom.luau", "\nerror('boom')\nreturn 1")]);
    let err = ModuleCache::require(&cache, &lua, &t.p("boom.luau")).unwrap_err();
    let RequireError::Runtime { error, .. } = &err else {
        panic!("{err}")
    };
    let text = error.to_string();
    assert!(
        text.contains(&format!("{}:2: boom", t.p("boom.luau").display())),
        "{text}"
    );
    // Not left on the loading stack: a fixed module loads without a false cycle.
    t.write("boom.luau", "return 1");
    assert_eq!(
        ModuleCache::require(&cache, &lua, &t.p("boom.luau")).unwrap(),
        Value::Integer(1)
    );
}

#[test]
fn syntax_error_in_module_names_file_and_line() {
    let (t, cache, lua) = setup(&[
        ("main.luau", "return require('./bad')"),
        ("bad.luau", "return ("),
    ]);
    let err = ModuleCache::require(&cache, &lua, &t.p("main.luau"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "syntax error in {}:1: ",
            t.p("bad.luau").display()
        )),
        "{err}"
    );
}
