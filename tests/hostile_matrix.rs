//! A generated hostile matrix over the whole declared Luau surface, against the release runner.
//!
//! `types/skein.d.luau` declares every Luau-facing function Skein installs. This test parses it
//! (the `jobs`, `engine`, `task` and `runner` globals and their nested tables, each `declare
//! class`'s methods, the `@skein/...` modules' types, `SharedQueue`'s methods) and, for every
//! function, every parameter and every field of an options table a parameter takes, calls the
//! function with each hostile value a script could hand it: a 64 MiB string, a table of 10
//! million entries, a table nested 200 deep, a cycle, NaN, the infinities, -0, 2^53 + 1 and
//! -2^63 (as numbers and as integers), -1, values of the wrong type, a function, a coroutine, and
//! where a parameter takes a callback, callbacks that yield, raise, or never return.
//!
//! How each function is called lives in [`ROWS`], written by hand: a function the types file
//! declares without a row fails the test naming it, and so does a row (or a parameter of one) the
//! types file no longer declares. Each row runs as one child `skein run` (the `@skein/resources`
//! row as `skein serve`) under a 1 GiB address-space limit and an explicit `--memory`, which
//! builds the hostile values once and prints one line per call. The test asserts that no child
//! aborts, is killed by a signal, panics or hangs; that it exits 0, 1 or 2; that its peak RSS
//! stays within the memory budget and a fixed overhead; that every call that raised names the
//! function, and the parameter or option it refused, in a text of bounded size; and that after
//! its matrix the child still serves a dispatch.
//!
//! A callback that never returns parks until its child's matrix is over, so a task the run
//! would otherwise keep forever (a handler bound to a per-frame phase starts one each frame)
//! lets the run end; each call that parks its task is watched for half a second, then counted
//! as waiting and cancelled, which only a row that may wait (a pop, a wait, a join) allows.
//!
//! It needs the release runner (`cargo test --release --test main hostile_matrix::`, a step of
//! `.ci/run`): the debug build is too slow for thousands of calls, so the README's debug `cargo
//! test` skips it. `SKEIN_MATRIX_ONLY=jobs.dispatch` runs one row; `SKEIN_MATRIX_VERBOSE=1`
//! prints every call's outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::Tree;

/// The address space each child gets.
const ADDRESS_SPACE: u64 = 1 << 30;

/// The budget passed as `--memory`: with `--workers 1` the runner gives each of its three VMs
/// (the engine's, the worker's, one share for what Skein holds for scripts) 256 MiB, room for
/// the 216 MiB the hostile values take in the VM that builds them.
const MEMORY: &str = "768M";
const MEMORY_BYTES: u64 = 768 << 20;
const SERVE_MEMORY: &str = "6G";

/// What a child may hold past `--memory`: the runner's code and Luau's, thread stacks, malloc's
/// arenas and the native code generator's blocks. Measured on the release runner: the runner
/// alone (one dispatch) peaks at about 10 MiB of RSS, a child that builds the hostile values at
/// 226 MiB (217 MiB of them the values, in its engine VM), and the highest row, a `@skein/log`
/// one (a 64 MiB message copied out of the VM and written), at about 420 MiB. So what a child
/// holds past its VMs' heaps and Skein's host memory is some 10 MiB; 200 MiB is a fixed
/// allowance well past it, for malloc's slack under load.
const OVERHEAD: u64 = 200 << 20;

/// A child still running after this long has hung: it is killed and the test fails.
const HANG: Duration = Duration::from_secs(120);

/// How many children run at once (the machine this must fit has 2 cores).
const PARALLEL: usize = 2;

/// The longest text a refusal may have. A refusal that quotes a hostile value whole (a 64 MiB
/// module path, say) is past it: the value must be cut, or the refusal itself runs the VM out
/// of memory. Luau's stack traceback is part of the text.
const MAX_REFUSAL: usize = 4096;

// ---------------------------------------------------------------------------------------------
// The declared surface.
// ---------------------------------------------------------------------------------------------

/// One Luau-facing function of the types file.
#[derive(Debug, Clone)]
struct Declared {
    /// `jobs.dispatch`, `jobs.shared.add`, `PromiseHandle:await`, `events.emit`.
    name: String,
    params: Vec<Param>,
}

/// One parameter of a declared function, with the fields of the options table it takes.
#[derive(Debug, Clone)]
struct Param {
    /// The declared name; `...` for a variadic one.
    name: String,
    ty: String,
    /// Dotted paths below the parameter (`deadline`, `executor.kind`) and their types.
    fields: Vec<(String, String)>,
}

/// Whether a parameter or field of type `ty` takes a callback (a function type).
fn takes_callback(ty: &str) -> bool {
    ty.contains("->")
}

/// Parameters the types file types loosely on purpose, and the exported type that says what
/// they hold: `jobs.register`'s descriptor is `{ [string]: any }` because luau-lsp does not
/// narrow the executor's kind literal in a table field.
const DESCRIBED_BY: &[(&str, &str, &str)] = &[("jobs.register", "descriptor", "JobDescriptor")];

/// A statement of the types file: its text without comments, and the comment lines just above.
struct Statement {
    head: String,
    body: String,
    comments: String,
}

fn statements(text: &str) -> Vec<Statement> {
    let mut out: Vec<Statement> = Vec::new();
    let mut comments = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix("--") {
            comments.push_str(comment);
            comments.push('\n');
            continue;
        }
        let code = match line.find("--") {
            Some(at) => &line[..at],
            None => line,
        };
        if line.starts_with("export type ") || line.starts_with("declare ") {
            out.push(Statement {
                head: code.to_owned(),
                body: String::new(),
                comments: std::mem::take(&mut comments),
            });
        } else if let Some(last) = out.last_mut() {
            last.body.push_str(code);
            last.body.push('\n');
        }
        if !trimmed.is_empty() {
            comments.clear();
        }
    }
    out
}

/// Replaces `->` so that `<` and `>` pair up as brackets.
fn arrows_out(text: &str) -> String {
    text.replace("->", "\u{2192}")
}

fn arrows_in(text: &str) -> String {
    text.replace('\u{2192}', "->")
}

/// Splits `text` at the commas outside every bracket.
fn split_top(text: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' | '{' | '<' | '[' => depth += 1,
            ')' | '}' | '>' | ']' => depth -= 1,
            _ => {}
        }
        if c == sep && depth == 0 {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if !current.trim().is_empty() {
        parts.push(current);
    }
    parts.into_iter().map(|p| p.trim().to_owned()).collect()
}

/// The text between the bracket at `open` and its partner.
fn inside(text: &str, open: usize) -> (&str, usize) {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' | '{' | '<' | '[' => depth += 1,
            ')' | '}' | '>' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return (&text[open + 1..open + i], open + i);
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced brackets in {text}");
}

/// `name: type` pairs of a table type's body (array parts and indexers left out).
fn table_fields(body: &str) -> Vec<(String, String)> {
    split_top(body, ',')
        .into_iter()
        .filter_map(|field| {
            let parts = split_top(&field, ':');
            let name = parts.first()?.trim();
            if parts.len() < 2 || !is_name(name) {
                return None;
            }
            let at = field.find(':')?;
            Some((name.to_owned(), field[at + 1..].trim().to_owned()))
        })
        .collect()
}

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !text.starts_with(|c: char| c.is_ascii_digit())
}

/// The parameters of a function type `<G>(a: A, ...) -> R` (arrows already out), or `None`
/// when `ty` is no function type.
fn function_params(ty: &str) -> Option<Vec<(String, String)>> {
    let mut ty = ty.trim();
    if ty.starts_with('<') {
        let (_, end) = inside(ty, 0);
        ty = ty[end + 1..].trim_start();
    }
    if !ty.starts_with('(') {
        return None;
    }
    let (params, end) = inside(ty, 0);
    if !ty[end + 1..].trim_start().starts_with('\u{2192}') {
        return None;
    }
    Some(
        split_top(params, ',')
            .into_iter()
            .map(|p| {
                let parts = split_top(&p, ':');
                if parts.len() >= 2 && is_name(parts[0].trim()) {
                    let at = p.find(':').unwrap();
                    (parts[0].trim().to_owned(), p[at + 1..].trim().to_owned())
                } else {
                    ("...".to_owned(), p)
                }
            })
            .collect(),
    )
}

/// Every function the types file declares, with its parameters and their options' fields.
fn declared_surface(text: &str) -> Vec<Declared> {
    let statements = statements(text);
    // Exported table types by name: the fields an options parameter of that type holds.
    let mut types: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for s in &statements {
        if let Some(rest) = s.head.strip_prefix("export type ") {
            let full = arrows_out(&format!("{rest}\n{}", s.body));
            let Some((name, ty)) = full.split_once('=') else {
                continue;
            };
            let name = name.trim().split('<').next().unwrap().trim().to_owned();
            let ty = ty.trim();
            if ty.starts_with('{') {
                let (body, _) = inside(ty, 0);
                types.insert(name, table_fields(body));
            }
        }
    }
    let mut out = Vec::new();
    let mut add = |name: String, params: Vec<(String, String)>| {
        let params = params
            .into_iter()
            .map(|(pname, ty)| {
                let described = DESCRIBED_BY
                    .iter()
                    .find(|(f, p, _)| *f == name && *p == pname)
                    .map(|(_, _, t)| (*t).to_owned());
                let fields = options_fields(&types, described.as_deref().unwrap_or(&ty));
                Param {
                    name: pname,
                    ty: arrows_in(&ty),
                    fields,
                }
            })
            .collect();
        out.push(Declared { name, params });
    };
    for s in &statements {
        if let Some(rest) = s.head.strip_prefix("declare class ") {
            let class = rest.trim().to_owned();
            for line in s.body.lines() {
                let Some(method) = line.trim().strip_prefix("function ") else {
                    continue;
                };
                let open = method.find('(').unwrap();
                let method_name = &method[..open];
                let (list, _) = inside(method, open);
                let params = split_top(list, ',')
                    .into_iter()
                    .map(|p| match p.split_once(':') {
                        Some((n, t)) => (n.trim().to_owned(), t.trim().to_owned()),
                        None => (p.trim().to_owned(), class.clone()),
                    })
                    .collect();
                add(format!("{class}:{method_name}"), params);
            }
        } else if let Some(rest) = s.head.strip_prefix("declare ") {
            let full = arrows_out(&format!("{rest}\n{}", s.body));
            let (name, ty) = full.split_once(':').unwrap();
            walk_table(name.trim(), ty.trim(), &mut add);
        } else if let Some(rest) = s.head.strip_prefix("export type ") {
            let full = arrows_out(&format!("{rest}\n{}", s.body));
            let Some((name, ty)) = full.split_once('=') else {
                continue;
            };
            let type_name = name.trim().split('<').next().unwrap().trim();
            let ty = ty.trim();
            if !ty.starts_with('{') {
                continue;
            }
            // A module's type: the comment above names what require answers it.
            let module = s
                .comments
                .split("require(\"@skein/")
                .nth(1)
                .and_then(|rest| rest.split('"').next());
            let (body, _) = inside(ty, 0);
            for (field, fty) in table_fields(body) {
                let Some(params) = function_params(&fty) else {
                    continue;
                };
                let method = params
                    .first()
                    .is_some_and(|(n, t)| n == "self" && t.starts_with(type_name));
                if method {
                    add(format!("{type_name}:{field}"), params);
                } else if let Some(module) = module {
                    add(format!("{module}.{field}"), params);
                }
            }
        }
    }
    out
}

/// The functions of a declared table, `prefix.field`, nested tables included.
fn walk_table(prefix: &str, ty: &str, add: &mut impl FnMut(String, Vec<(String, String)>)) {
    let (body, _) = inside(ty, 0);
    for (field, fty) in table_fields(body) {
        let name = format!("{prefix}.{field}");
        if let Some(params) = function_params(&fty) {
            add(name, params);
        } else if fty.starts_with('{') {
            walk_table(&name, &fty, add);
        }
    }
}

/// The fields an options parameter of type `ty` holds, as dotted paths: those of the exported
/// table type it names, and below a field whose type is a union of such types, theirs.
fn options_fields(
    types: &BTreeMap<String, Vec<(String, String)>>,
    ty: &str,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for alternative in split_top(ty.trim().trim_end_matches('?'), '|') {
        let Some(fields) = types.get(alternative.trim().trim_end_matches('?')) else {
            continue;
        };
        for (name, fty) in fields {
            if !out.iter().any(|(n, _)| n == name) {
                out.push((name.clone(), arrows_in(fty)));
            }
            for (below, bty) in options_fields(types, fty) {
                let path = format!("{name}.{below}");
                if !out.iter().any(|(n, _)| *n == path) {
                    out.push((path, bty));
                }
            }
        }
    }
    out
}

fn types_file() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/types/skein.d.luau"))
        .expect("read types/skein.d.luau")
}

// ---------------------------------------------------------------------------------------------
// The rows: how each declared function is called.
// ---------------------------------------------------------------------------------------------

/// Where a row's calls run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Host {
    /// In the main script of `skein run`.
    Run,
    /// In the handler of a `@skein/worker` worker the main script of `skein run` spawns: the
    /// functions only a worker's own code may call.
    InWorker,
    /// In the main script of a resource `skein serve` starts: `@skein/resources` exists only in
    /// a resource's VMs.
    Serve,
}

/// How one declared function is called.
struct Row {
    /// The declared name.
    function: &'static str,
    /// `(parameter, call)`: a Luau block run as `function(V) ... end`, in which `$V` stands for
    /// the hostile value. One per declared parameter; a block for an option field (`opts.name`,
    /// `descriptor.executor.kind`) replaces the one made from its parameter's (where `$V` turns
    /// into `with(base, "field", V)`). A block that starts with `--` is no call: the comment
    /// says why the parameter can't be reached from Luau. A function with no parameters has
    /// one `(extra)` call: the hostile value as an argument it does not take.
    calls: &'static [(&'static str, &'static str)],
    /// Luau run once before the row's calls: the handles and modules the calls use. The names
    /// it defines are locals of the row's chunk.
    setup: &'static str,
    /// Luau run once after the row's calls.
    teardown: &'static str,
    /// `(field prefix, Luau expression)`: the valid table an option field's hostile value is
    /// set into, the longest matching prefix winning (`""` matches every field); `{}` when none
    /// matches.
    bases: &'static [(&'static str, &'static str)],
    /// The call may park its task on something that does not come (a pop, a wait, a join):
    /// still waiting when the watch ends is no hang, and the watch cancels it.
    waits: bool,
    /// Other names a refusal may call the function by (what Luau code writes to reach it).
    aliases: &'static [&'static str],
    /// `(parameter, text)`: a refusal that has `text` names the parameter, where its natural
    /// wording calls it otherwise (`no context named 'x'` for `context.bind`'s `name`).
    param_names: &'static [(&'static str, &'static str)],
    host: Host,
}

const ROW: Row = Row {
    function: "",
    calls: &[],
    setup: "",
    teardown: "",
    bases: &[],
    waits: false,
    aliases: &[],
    param_names: &[],
    host: Host::Run,
};

/// Valid descriptors a registration's hostile field is set into: a `luau` job, a `worker` job
/// (for the fields of that executor) and a `kernel` job, each with a name of its own.
const LUAU_JOB: &str = r#"{ name = UNIQUE("job"), phase = "matrix", executor = { kind = "luau", run = function() end } }"#;
const WORKER_JOB: &str = r#"{ name = UNIQUE("job"), phase = "matrix", executor = { kind = "worker", module = "./m", entry = "echo", input = function() return nil end, apply = function() end } }"#;
const KERNEL_JOB: &str = r#"{ name = UNIQUE("job"), phase = "matrix", executor = { kind = "kernel", kernel = "none" } }"#;

/// A job handle is registered for a few frames and cancelled, so its callbacks run and the
/// run can end.
const REGISTER: &str = "local h = jobs.register($V)\ntask.waitFrames(3)\nh:cancel()\nreturn h";

const ROWS: &[Row] = &[
    Row {
        function: "jobs.dispatch",
        calls: &[
            ("module", r#"return jobs.dispatch($V, "echo", 1)"#),
            ("entry", r#"return jobs.dispatch("./m", $V, 1)"#),
            ("args", r#"return jobs.dispatch("./m", "echo", $V)"#),
            ("opts", r#"return jobs.dispatch("./m", "echo", 1, $V)"#),
            (
                "opts.supersede",
                r#"return jobs.dispatch("./m", "echo", 1, { key = "k", supersede = $V })"#,
            ),
        ],
        ..ROW
    },
    Row {
        function: "jobs.parallelFor",
        calls: &[
            ("module", r#"return jobs.parallelFor($V, "chunk", 4)"#),
            ("entry", r#"return jobs.parallelFor("./m", $V, 4)"#),
            ("over", r#"return jobs.parallelFor("./m", "chunk", $V)"#),
            ("args", r#"return jobs.parallelFor("./m", "chunk", 4, $V)"#),
            ("opts", r#"return jobs.parallelFor("./m", "chunk", 4, nil, $V)"#),
            (
                "opts.stride",
                r#"return jobs.parallelFor("./m", "chunk", buffer.create(8), nil, { stride = $V })"#,
            ),
        ],
        ..ROW
    },
    Row {
        function: "jobs.map",
        calls: &[
            ("module", r#"return jobs.map($V, "echo", { 1, 2 })"#),
            ("entry", r#"return jobs.map("./m", $V, { 1, 2 })"#),
            ("list", r#"return jobs.map("./m", "echo", $V)"#),
            ("opts", r#"return jobs.map("./m", "echo", { 1, 2 }, $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "jobs.context",
        calls: &[("(extra)", "return jobs.context($V)")],
        ..ROW
    },
    Row {
        function: "jobs.release",
        calls: &[("key", "return jobs.release($V)")],
        ..ROW
    },
    Row {
        function: "jobs.onRelease",
        calls: &[("watcher", "local remove = jobs.onRelease($V)\nremove()\nreturn remove")],
        ..ROW
    },
    Row {
        function: "jobs.stats",
        calls: &[("(extra)", "return jobs.stats($V)")],
        ..ROW
    },
    Row {
        function: "jobs.warm",
        calls: &[
            ("module", r#"return jobs.warm($V, "warm")"#),
            ("entry", r#"return jobs.warm("./m", $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "jobs.register",
        calls: &[("descriptor", REGISTER)],
        bases: &[
            ("", LUAU_JOB),
            ("executor.module", WORKER_JOB),
            ("executor.entry", WORKER_JOB),
            ("executor.input", WORKER_JOB),
            ("executor.apply", WORKER_JOB),
            ("executor.key", WORKER_JOB),
            ("executor.deadline", WORKER_JOB),
            ("executor.kernel", KERNEL_JOB),
        ],
        ..ROW
    },
    Row {
        function: "jobs.find",
        calls: &[("name", "return jobs.find($V)")],
        ..ROW
    },
    Row {
        function: "jobs.inspect",
        calls: &[("target", "return jobs.inspect($V)")],
        ..ROW
    },
    Row {
        function: "jobs.list",
        calls: &[("phase", "return jobs.list($V)")],
        ..ROW
    },
    Row {
        function: "jobs.shared.queue",
        calls: &[
            ("name", "return jobs.shared.queue($V)"),
            ("opts", r#"return jobs.shared.queue(UNIQUE("q"), $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "jobs.shared.table",
        calls: &[("name", "return jobs.shared.table($V)")],
        ..ROW
    },
    Row {
        function: "jobs.shared.atomic",
        setup: r#"local T = jobs.shared.table("matrix")"#,
        calls: &[
            ("t", r#"return jobs.shared.atomic($V, "k", function() return 1 end)"#),
            ("key", "return jobs.shared.atomic(T, $V, function() return 1 end)"),
            ("fn", r#"return jobs.shared.atomic(T, "k", $V)"#),
        ],
        param_names: &[("key", WRITE_BOUND)],
        ..ROW
    },
    Row {
        function: "jobs.shared.add",
        setup: r#"local T = jobs.shared.table("matrix")"#,
        calls: &[
            ("t", r#"return jobs.shared.add($V, "n", 1)"#),
            ("key", "return jobs.shared.add(T, $V, 1)"),
            ("amount", r#"return jobs.shared.add(T, "n", $V)"#),
        ],
        param_names: &[("key", WRITE_BOUND)],
        ..ROW
    },
    Row {
        function: "jobs.shared.revision",
        calls: &[("t", "return jobs.shared.revision($V)")],
        ..ROW
    },
    Row {
        function: "jobs.shared.snapshot",
        calls: &[("t", "return jobs.shared.snapshot($V)")],
        ..ROW
    },
    Row {
        function: "jobs.shared.freeze",
        calls: &[("t", "return jobs.shared.freeze($V)")],
        ..ROW
    },
    Row {
        function: "PromiseHandle:await",
        setup: r#"local P = jobs.dispatch("./m", "echo", 1)"#,
        calls: &[("self", "return P.await($V)")],
        // p:await() is task.await(p), and its refusal says so.
        aliases: &["task.await"],
        param_names: &[("self", "promise must be")],
        ..ROW
    },
    Row {
        function: "PromiseHandle:cancel",
        setup: r#"local P = jobs.dispatch("./m", "echo", 1)"#,
        calls: &[("self", "return P.cancel($V)")],
        ..ROW
    },
    Row {
        function: "PromiseHandle:status",
        setup: r#"local P = jobs.dispatch("./m", "echo", 1)"#,
        calls: &[("self", "return P.status($V)")],
        ..ROW
    },
    Row {
        function: "SharedTable:__index",
        setup: r#"local T = jobs.shared.table("matrix")"#,
        calls: &[
            ("self", "-- a SharedTable's metatable is locked: __index takes no other self"),
            ("key", "return T[$V]"),
        ],
        aliases: &["shared table"],
        ..ROW
    },
    Row {
        function: "SharedTable:__newindex",
        setup: r#"local T = jobs.shared.table("matrix")"#,
        calls: &[
            ("self", "-- a SharedTable's metatable is locked: __newindex takes no other self"),
            ("key", "T[$V] = 1"),
            ("value", "T.v = $V"),
        ],
        aliases: &["shared table", "'matrix'"],
        // A value that can't be stored is named by its path, which starts at the key written.
        param_names: &[("key", WRITE_BOUND), ("value", "'matrix'.v")],
        ..ROW
    },
    Row {
        function: "SharedTable:__len",
        calls: &[("self", "-- a SharedTable's metatable is locked: __len takes no other self")],
        ..ROW
    },
    Row {
        function: "SharedTable:__iter",
        calls: &[("self", "-- a SharedTable's metatable is locked: __iter takes no other self")],
        ..ROW
    },
    Row {
        function: "JobHandle:cancel",
        setup: JOB_HANDLE,
        teardown: "H:cancel()",
        calls: &[("self", "return H.cancel($V)")],
        ..ROW
    },
    Row {
        function: "JobHandle:destroy",
        setup: JOB_HANDLE,
        teardown: "H:destroy()",
        calls: &[("self", "return H.destroy($V)")],
        ..ROW
    },
    Row {
        function: "JobHandle:info",
        setup: JOB_HANDLE,
        teardown: "H:cancel()",
        calls: &[("self", "return H.info($V)")],
        ..ROW
    },
    Row {
        function: "JobHandle:pause",
        setup: JOB_HANDLE,
        teardown: "H:cancel()",
        calls: &[("self", "return H.pause($V)")],
        ..ROW
    },
    Row {
        function: "JobHandle:resume",
        setup: JOB_HANDLE,
        teardown: "H:cancel()",
        calls: &[("self", "return H.resume($V)")],
        ..ROW
    },
    Row {
        function: "JobHandle:status",
        setup: JOB_HANDLE,
        teardown: "H:cancel()",
        calls: &[("self", "return H.status($V)")],
        ..ROW
    },
    Row {
        function: "JobHandle:valid",
        setup: JOB_HANDLE,
        teardown: "H:cancel()",
        calls: &[("self", "return H.valid($V)")],
        ..ROW
    },
    Row {
        function: "SharedQueue:push",
        setup: r#"local Q = jobs.shared.queue("matrix", { capacity = 65536 })"#,
        calls: &[("self", "return Q.push($V, 1)"), ("value", "return Q:push($V)")],
        ..ROW
    },
    Row {
        function: "SharedQueue:pop",
        setup: r#"local Q = jobs.shared.queue("matrix")"#,
        calls: &[("self", "Q:push(1)\nreturn Q.pop($V)")],
        ..ROW
    },
    Row {
        function: "SharedQueue:tryPop",
        setup: r#"local Q = jobs.shared.queue("matrix")"#,
        calls: &[("self", "return Q.tryPop($V)")],
        ..ROW
    },
    Row {
        function: "SharedQueue:popMany",
        setup: r#"local Q = jobs.shared.queue("matrix")"#,
        calls: &[
            ("self", "Q:push(1)\nreturn Q.popMany($V, 1)"),
            ("n", "Q:push(1)\nreturn Q:popMany($V)"),
        ],
        ..ROW
    },
    Row {
        function: "SharedQueue:len",
        setup: r#"local Q = jobs.shared.queue("matrix")"#,
        calls: &[("self", "return Q.len($V)")],
        ..ROW
    },
    Row {
        function: "SharedQueue:close",
        setup: r#"local Q = jobs.shared.queue("matrix")"#,
        calls: &[("self", "return Q.close($V)")],
        ..ROW
    },
    Row {
        function: "context.bind",
        setup: r#"local context = require("@skein/context")"#,
        calls: &[
            ("name", "return context.bind($V, { update = function() end })"),
            ("handlers", r#"return context.bind("main", $V)"#),
        ],
        param_names: &[
            ("name", "no context named"),
            ("handlers", "handler keys"),
            ("handlers", "is not a phase"),
        ],
        ..ROW
    },
    Row {
        function: "events.emit",
        setup: r#"local events = require("@skein/events")"#,
        calls: &[
            ("name", "return events.emit($V, 1)"),
            ("payload", r#"return events.emit("matrix", $V)"#),
        ],
        // The queue's byte bound refuses the event as a whole (its name and its payload).
        param_names: &[("payload", "the event does not fit")],
        ..ROW
    },
    Row {
        function: "events.on",
        setup: r#"local events = require("@skein/events")"#,
        calls: &[
            ("name", "local remove = events.on($V, function() end)\nreturn remove()"),
            (
                "handler",
                "local remove = events.on(\"matrix\", $V)\nevents.emit(\"matrix\", 1)\ntask.waitFrames(3)\nreturn remove()",
            ),
            (
                "context",
                "local remove = events.on(\"matrix\", function() end, $V)\nreturn remove()",
            ),
        ],
        ..ROW
    },
    Row {
        function: "events.wait",
        setup: r#"local events = require("@skein/events")"#,
        calls: &[
            ("name", "return events.wait($V, 0.01)"),
            ("timeout", r#"return events.wait("matrix", $V)"#),
        ],
        waits: true,
        ..ROW
    },
    Row {
        function: "interfaces.provide",
        setup: r#"local interfaces = require("@skein/interfaces")"#,
        calls: &[
            ("name", "return interfaces.provide($V, { [UNIQUE(\"f\")] = 1 })"),
            ("fields", r#"return interfaces.provide(UNIQUE("m"), $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "interfaces.get",
        setup: r#"local interfaces = require("@skein/interfaces")"#,
        calls: &[("name", "return interfaces.get($V)")],
        ..ROW
    },
    Row {
        function: "interfaces.expect",
        setup: r#"local interfaces = require("@skein/interfaces")"#,
        calls: &[("name", "return interfaces.expect($V)")],
        param_names: &[("name", "no interface '")],
        ..ROW
    },
    Row {
        function: "interfaces.list",
        setup: r#"local interfaces = require("@skein/interfaces")"#,
        calls: &[("(extra)", "return interfaces.list($V)")],
        ..ROW
    },
    Row {
        function: "log.debug",
        setup: r#"local log = require("@skein/log")"#,
        calls: &[
            ("message", "return log.debug($V)"),
            ("fields", r#"return log.debug("matrix", $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "log.info",
        setup: r#"local log = require("@skein/log")"#,
        calls: &[
            ("message", "return log.info($V)"),
            ("fields", r#"return log.info("matrix", $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "log.warn",
        setup: r#"local log = require("@skein/log")"#,
        calls: &[
            ("message", "return log.warn($V)"),
            ("fields", r#"return log.warn("matrix", $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "log.error",
        setup: r#"local log = require("@skein/log")"#,
        calls: &[
            ("message", "return log.error($V)"),
            ("fields", r#"return log.error("matrix", $V)"#),
        ],
        ..ROW
    },
    Row {
        function: "resources.import",
        setup: r#"local resources = require("@skein/resources")"#,
        calls: &[("name", "return resources.import($V)")],
        host: Host::Serve,
        ..ROW
    },
    Row {
        function: "resources.this",
        setup: r#"local resources = require("@skein/resources")"#,
        calls: &[("(extra)", "return resources.this($V)")],
        host: Host::Serve,
        ..ROW
    },
    Row {
        function: "engine.on",
        calls: &[
            ("name", "local remove = engine.on($V, function() end)\nreturn remove()"),
            ("watcher", "local remove = engine.on(\"matrix\", $V)\nreturn remove()"),
        ],
        ..ROW
    },
    Row {
        function: "engine.wait",
        calls: &[
            ("name", "return engine.wait($V, 0.01)"),
            ("timeout", r#"return engine.wait("matrix", $V)"#),
        ],
        waits: true,
        ..ROW
    },
    Row {
        function: "task.spawn",
        calls: &[
            ("f", "return task.spawn($V)"),
            ("...", "return task.spawn(function(...) return ... end, $V)"),
        ],
        ..ROW
    },
    Row {
        function: "task.defer",
        calls: &[
            ("f", "local thread = task.defer($V)\ntask.wait()\nreturn thread"),
            (
                "...",
                "local thread = task.defer(function(...) return ... end, $V)\ntask.wait()\nreturn thread",
            ),
        ],
        ..ROW
    },
    Row {
        function: "task.delay",
        calls: &[
            (
                "seconds",
                "local thread = task.delay($V, function() end)\ntask.wait()\ntask.cancel(thread)\nreturn thread",
            ),
            ("f", "local thread = task.delay(0, $V)\ntask.wait()\nreturn thread"),
            (
                "...",
                "local thread = task.delay(0, function(...) return ... end, $V)\ntask.wait()\nreturn thread",
            ),
        ],
        ..ROW
    },
    Row {
        function: "task.wait",
        calls: &[("seconds", "return task.wait($V)")],
        waits: true,
        ..ROW
    },
    Row {
        function: "task.waitFrames",
        calls: &[("n", "return task.waitFrames($V)")],
        waits: true,
        ..ROW
    },
    Row {
        function: "task.cancel",
        calls: &[("thread", "return task.cancel($V)")],
        ..ROW
    },
    Row {
        function: "task.await",
        calls: &[("promise", "return task.await($V)")],
        ..ROW
    },
    Row {
        function: "fs.readFile",
        setup: r#"local fs = require("@skein/fs")"#,
        calls: &[("path", "return fs.readFile($V)")],
        param_names: &[("path", FS_PATH)],
        ..ROW
    },
    Row {
        function: "fs.writeFile",
        setup: r#"local fs = require("@skein/fs")"#,
        calls: &[
            ("path", r#"return fs.writeFile($V, "x")"#),
            ("data", r#"return fs.writeFile("data/out.txt", $V)"#),
        ],
        param_names: &[("path", FS_PATH)],
        ..ROW
    },
    Row {
        function: "fs.list",
        setup: r#"local fs = require("@skein/fs")"#,
        calls: &[("dir", "return fs.list($V)")],
        param_names: &[("dir", FS_PATH)],
        ..ROW
    },
    Row {
        function: "worker.spawn",
        setup: r#"local worker = require("@skein/worker")"#,
        calls: &[("options", "local w = worker.spawn($V)\nreturn w:join(10)")],
        bases: &[(
            "",
            r#"{ source = "return function(m) return m end", memory = 16 * 2 ^ 20 }"#,
        )],
        ..ROW
    },
    Row {
        function: "worker.send",
        setup: r#"local worker = require("@skein/worker")"#,
        calls: &[("message", "return worker.send($V)")],
        host: Host::InWorker,
        ..ROW
    },
    Row {
        function: "Worker:send",
        setup: WORKER,
        teardown: "W:join(10)",
        calls: &[("self", "return W.send($V, 1)"), ("message", "return W:send($V)")],
        ..ROW
    },
    Row {
        function: "Worker:receive",
        setup: WORKER,
        teardown: "W:join(10)",
        calls: &[
            ("self", "return W.receive($V)"),
            ("timeout", "W:send(1)\nreturn W:receive($V)"),
        ],
        waits: true,
        ..ROW
    },
    Row {
        function: "Worker:close",
        setup: WORKER,
        teardown: "W:join(10)",
        calls: &[("self", "return W.close($V)")],
        ..ROW
    },
    Row {
        function: "Worker:join",
        setup: WORKER,
        teardown: "W:join(10)",
        calls: &[
            ("self", "return W.join($V)"),
            (
                "timeout",
                r#"local w = worker.spawn({ source = "return function(m) return m end", memory = 16 * 2 ^ 20 })
return w:join($V)"#,
            ),
        ],
        waits: true,
        ..ROW
    },
];

/// A write past a shared table's bounds is refused as a whole (the key's bytes are part of it):
/// the refusal names the table and the bound.
const WRITE_BOUND: &str = "the write would make";

/// Every `@skein/fs` refusal starts with the function and the path as the script gave it
/// (`fs.readFile: 'x': permission denied: ...`).
const FS_PATH: &str = ": 'hostile': ";

/// A registered job whose handle the `JobHandle` rows call with other selves.
const JOB_HANDLE: &str = r#"local H = jobs.register({ phase = "matrix", executor = { kind = "luau", run = function() end } })"#;

/// A worker the `Worker` rows call with other selves.
const WORKER: &str = r#"local worker = require("@skein/worker")
local W = worker.spawn({ name = "matrix", source = "return function(m) return m end", memory = 16 * 2 ^ 20 })"#;

// ---------------------------------------------------------------------------------------------
// The hostile values and the generated script.
// ---------------------------------------------------------------------------------------------

/// Builds the hostile values once per child, and the helpers every call uses.
const PRELUDE: &str = r#"
local MATRIX_RAISED = "matrix: the callback raised"
local STATE = { done = false }
local BIG_STRING = string.rep("x", 64 * 1024 * 1024)
local BIG_TABLE = table.create(10000000, true)
local DEEP = {}
do
	local t = DEEP
	for _ = 2, 200 do
		local n = {}
		t.next = n
		t = n
	end
end
local CYCLE = { name = "cycle" }
CYCLE.self = CYCLE
local function PLAIN() end
-- Callbacks: one that yields, one that raises, one that never returns while the matrix runs
-- (it parks until the matrix is over, so the run's end is not held by it). A handler bound to a
-- phase runs every frame: after the matrix the first and the last return at once, so the tasks
-- they leave do not keep the run going.
local function YIELDS(...)
	if not STATE.done then
		task.wait(0.01)
	end
	return ...
end
local function RAISES()
	error(MATRIX_RAISED, 0)
end
local function NEVER()
	while not STATE.done do
		task.wait(0.05)
	end
end
local HOSTILE = {
	{ "a 64 MiB string", BIG_STRING },
	{ "a table of 10 million entries", BIG_TABLE },
	{ "a table nested 200 deep", DEEP },
	{ "a cyclic table", CYCLE },
	{ "NaN", 0 / 0 },
	{ "+inf", math.huge },
	{ "-inf", -math.huge },
	{ "-0", -0 },
	{ "2^53+1", 2 ^ 53 + 1 },
	{ "the integer 2^53+1", integer.fromstring("9007199254740993") },
	{ "-2^63", -2 ^ 63 },
	{ "the integer -2^63", integer.create(-2 ^ 63) },
	{ "-1", -1 },
	{ "a boolean", true },
	{ "a string", "hostile" },
	{ "a function", PLAIN },
	{ "a coroutine", coroutine.create(PLAIN) },
	{ "nil", nil },
}
local CALLBACKS = {
	{ "a callback that yields", YIELDS },
	{ "a callback that raises", RAISES },
	{ "a callback that never returns", NEVER },
}
local SEQ = 0
local function UNIQUE(prefix)
	SEQ += 1
	return prefix .. SEQ
end
-- A copy of base with value set at the dotted path (the tables on the way copied too).
local function with(base, path, value)
	local root = table.clone(base)
	local t = root
	local parts = string.split(path, ".")
	for i = 1, #parts - 1 do
		local nested = table.clone(t[parts[i]] or {})
		t[parts[i]] = nested
		t = nested
	end
	t[parts[#parts]] = value
	return root
end
-- A promise handle's metatable reads false; its text names it. Other tables are not asked for
-- a text: theirs may be as big as what they were made from.
local function isPromise(v)
	return type(v) == "table"
		and getmetatable(v) == false
		and string.sub(tostring(v), 1, 14) == "PromiseHandle("
end
local function excerpt(text)
	return (string.gsub(string.sub(text, 1, 800), "%c", " "))
end
local WATCH = 0.5
-- Calls call(value) as a task of its own, awaits a promise it answers, and prints how it went:
-- accepted, resolved, raised or rejected (with the text), or still waiting when the watch ran
-- out (the watch then cancels it).
local function probe(fn, param, name, call, value)
	local out = { state = "running" }
	local thread = task.spawn(function()
		local ok, result = pcall(call, value)
		if not ok then
			out.state, out.err = "raised", result
			return
		end
		if isPromise(result) then
			out.state = "settling"
			local settled, why = pcall(function()
				return result:await()
			end)
			out.state = if settled then "resolved" else "rejected"
			out.err = if settled then nil else why
			return
		end
		out.state = "accepted"
	end)
	local waited = 0
	while (out.state == "running" or out.state == "settling") and waited < WATCH do
		waited += task.wait(0.02)
	end
	if out.state == "running" or out.state == "settling" then
		out.state = if out.state == "running" then "waiting" else "unsettled"
		pcall(task.cancel, thread)
	end
	-- A text too big to make a string of in what the VM has left is reported as length -1.
	local read, text = pcall(function()
		return if out.err == nil then "" else tostring(out.err)
	end)
	local len = if read then #text else -1
	if not read then
		text = "(its text could not be read: " .. tostring(text) .. ")"
	end
	out.err = nil
	print(table.concat({ "MATRIX", fn, param, name, out.state, tostring(len), excerpt(text) }, "\t"))
end
local function probeAll(fn, param, callbacks, call)
	for _, v in HOSTILE do
		probe(fn, param, v[1], call, v[2])
	end
	if callbacks then
		for _, v in CALLBACKS do
			probe(fn, param, v[1], call, v[2])
		end
	end
end
"#;

/// Ends the matrix, proves the runner still serves, and marks the end.
const EPILOGUE: &str = r#"
STATE.done = true
task.wait(0.1)
print("MATRIX-SERVED", jobs.dispatch("./m", "echo", 41):await() + 1)
print("MATRIX-END")
"#;

/// The module the calls dispatch to.
const MODULE: &str = r#"local M = {}
function M.echo(x) return x end
function M.chunk(c) return c.count end
function M.warm() end
return M
"#;

/// How many hostile values the prelude holds, and callbacks besides.
const VALUES: usize = 18;
const CALLBACK_VALUES: usize = 3;

/// The memory limit of the worker an [`Host::InWorker`] row's calls run in: room for the
/// hostile values, and with the engine's VM and the pool worker's within `--memory`.
const IN_WORKER_MEMORY: usize = 232 << 20;

/// A Luau string literal of `text`.
fn lua_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One call site: a parameter or option field of a function, and the block that reaches it.
struct Site {
    function: &'static str,
    /// `module`, `opts.deadline`, `descriptor.executor.kind`, `(extra)`.
    param: String,
    /// The Luau block, `$V` filled in; `None` when the row says the parameter can't be reached.
    block: Option<String>,
    callbacks: bool,
}

/// The call sites of `row` for the declared function `declared`.
fn sites(row: &Row, declared: &Declared) -> Vec<Site> {
    let call_of = |name: &str| row.calls.iter().find(|(p, _)| *p == name).map(|(_, c)| *c);
    let reach = |block: &str, fill: &str| {
        if block.starts_with("--") {
            None
        } else {
            Some(block.replace("$V", fill))
        }
    };
    let mut out = Vec::new();
    if declared.params.is_empty() {
        let block = call_of("(extra)").expect("checked by the coverage");
        out.push(Site {
            function: row.function,
            param: "(extra)".to_owned(),
            block: reach(block, "V"),
            callbacks: false,
        });
    }
    for param in &declared.params {
        let block = call_of(&param.name).expect("checked by the coverage");
        out.push(Site {
            function: row.function,
            param: param.name.clone(),
            block: reach(block, "V"),
            callbacks: takes_callback(&param.ty),
        });
        for (field, ty) in &param.fields {
            let path = format!("{}.{field}", param.name);
            let block = match call_of(&path) {
                Some(own) => reach(own, "V"),
                None => {
                    let base = row
                        .bases
                        .iter()
                        .filter(|(prefix, _)| field.starts_with(prefix))
                        .max_by_key(|(prefix, _)| prefix.len())
                        .map_or("{}", |(_, base)| *base);
                    reach(block, &format!("with({base}, {}, V)", lua_string(field)))
                }
            };
            out.push(Site {
                function: row.function,
                param: path,
                block,
                callbacks: takes_callback(ty),
            });
        }
    }
    out
}

/// The probes of one row's sites, as Luau.
fn probes(row: &Row, sites: &[Site]) -> String {
    let mut out = String::new();
    out.push_str("do\n");
    out.push_str(row.setup);
    out.push('\n');
    for site in sites {
        let Some(block) = &site.block else { continue };
        out.push_str(&format!(
            "probeAll({}, {}, {}, function(V)\n{block}\nend)\n",
            lua_string(site.function),
            lua_string(&site.param),
            site.callbacks,
        ));
    }
    out.push_str(row.teardown);
    out.push_str("\nend\n");
    out
}

/// The main script of the child that runs `row`.
fn script(row: &Row, sites: &[Site]) -> String {
    match row.host {
        Host::Run | Host::Serve => format!("{PRELUDE}\n{}\n{EPILOGUE}", probes(row, sites)),
        Host::InWorker => {
            let source = format!(
                "{PRELUDE}\nreturn function()\n{}\nSTATE.done = true\nreturn \"probed\"\nend\n",
                probes(row, sites)
            );
            assert!(!source.contains("]=====]"));
            format!(
                "local STATE = {{ done = false }}\n\
                 local w = require(\"@skein/worker\").spawn({{ name = \"matrix\", memory = {IN_WORKER_MEMORY}, source = [=====[{source}]=====] }})\n\
                 w:send(1)\n\
                 print(\"MATRIX-WORKER\", w:receive(100))\n\
                 print(\"MATRIX-WORKER\", w:join(10))\n\
                 {EPILOGUE}"
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The child.
// ---------------------------------------------------------------------------------------------

/// How one child ended.
struct Ended {
    /// The exit code; `None` when a signal ended it.
    code: Option<i32>,
    signal: Option<i32>,
    /// Peak resident memory, in bytes (`wait4`'s `ru_maxrss`).
    peak_rss: u64,
    stdout: Vec<String>,
    /// The start of stderr (it can be large: `log.info` of a 64 MiB message writes it).
    stderr_head: String,
    stderr_bytes: usize,
    panicked: bool,
    hung: bool,
    took: Duration,
}

/// Runs `skein <args>` in `dir` under [`ADDRESS_SPACE`]. Its stdin stays open until stdout
/// says `MATRIX-END` (`skein serve` serves until its input ends).
fn run_child(dir: &Path, args: &[&str]) -> Ended {
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_skein"));
    command
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::support::limit_address_space(&mut command, ADDRESS_SPACE);
    #[allow(clippy::zombie_processes)] // reaped by `wait4` below, which also reads its peak RSS
    let mut child = command.spawn().expect("start skein");
    let stdin = Arc::new(Mutex::new(child.stdin.take()));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let close_on_end = stdin.clone();
    let out = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
            let text = String::from_utf8_lossy(&line)
                .trim_end_matches(['\n', '\r'])
                .to_owned();
            // `skein serve` serves until its input ends: once the matrix is over, or once the
            // banner says the resource that runs it did not start.
            let failed_start = text.starts_with("serving ") && !text.contains("probe");
            if text == "MATRIX-END" || failed_start {
                close_on_end.lock().unwrap().take();
            }
            // A line longer than this is no matrix line: kept cut.
            lines.push(text.chars().take(4096).collect());
            line.clear();
        }
        lines
    });
    let err = std::thread::spawn(move || {
        let (mut head, mut total, mut panicked) = (Vec::new(), 0usize, false);
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match stderr.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            total += n;
            if head.len() < 1 << 16 {
                head.extend_from_slice(&buf[..n.min((1 << 16) - head.len())]);
            }
            // `panicked` may straddle two reads: look at the end of the last one too.
            tail.extend_from_slice(&buf[..n]);
            if tail.windows(8).any(|w| w == b"panicked") {
                panicked = true;
            }
            let keep = tail.len().saturating_sub(8);
            tail.drain(..keep);
        }
        (String::from_utf8_lossy(&head).into_owned(), total, panicked)
    });
    let pid = child.id() as libc::pid_t;
    // SAFETY: `rusage` is plain integers and timevals, for which all zeroes is a value.
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    let mut hung = false;
    loop {
        // SAFETY: `pid` is our own child, reaped only here; `status` and `usage` are ours.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            break;
        }
        assert!(reaped == 0, "wait4: {}", std::io::Error::last_os_error());
        if started.elapsed() > HANG {
            hung = true;
            // SAFETY: not yet reaped, so the id is still our child's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above; this wait reaps it.
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(stdin.lock().unwrap().take());
    let stdout = out.join().unwrap_or_default();
    let (stderr_head, stderr_bytes, panicked) = err.join().unwrap_or_default();
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    };
    Ended {
        code,
        signal,
        peak_rss: usage.ru_maxrss as u64 * 1024,
        stdout,
        stderr_head,
        stderr_bytes,
        panicked,
        hung,
        took: started.elapsed(),
    }
}

/// The tree a row's child runs in, and the runner's arguments.
fn child_tree(row: &Row, script: &str) -> (Tree, Vec<String>) {
    let memory = ["--workers", "1", "--memory", MEMORY];
    match row.host {
        Host::Run | Host::InWorker => {
            let tree = Tree::new(&[
                ("m.luau", MODULE),
                ("main.luau", script),
                ("data/in.txt", "x"),
            ]);
            let mut args: Vec<String> = ["run", "--allow", "worker.spawn"]
                .iter()
                .chain(&["--allow-read", "data", "--allow-write", "data"])
                .chain(&memory)
                .map(|s| (*s).to_owned())
                .collect();
            args.push("main.luau".to_owned());
            (tree, args)
        }
        Host::Serve => {
            let tree = Tree::new(&[
                (
                    "res/store/skein.toml",
                    "[resource]\nscripts = ['main.luau']\nexports = ['get']\n",
                ),
                ("res/store/main.luau", "function get(k) return k end\n"),
                (
                    "res/probe/skein.toml",
                    "[resource]\nscripts = ['main.luau']\ndependencies = ['store']\n",
                ),
                ("res/probe/main.luau", script),
                ("res/probe/m.luau", MODULE),
            ]);
            // `serve` shares --memory as if 8 resources ran: eight times the budget gives the
            // probe's VMs what `run` gives a row's (256 MiB each), for the hostile values.
            let args = ["serve", "res", "--start", "store,probe"]
                .iter()
                .chain(&["--workers", "1", "--memory", SERVE_MEMORY])
                .map(|s| (*s).to_owned())
                .collect();
            (tree, args)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.
// ---------------------------------------------------------------------------------------------

/// Whether `text` has `word` standing alone: not inside a longer name, nor `can't`'s t.
fn names(text: &str, word: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let mut before = text[..at].chars().rev();
        let apostrophe = match (before.next(), before.next()) {
            (Some('\''), Some(c)) => inner(c),
            _ => false,
        };
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(inner) && !apostrophe && !after.is_some_and(inner)
    })
}

/// The names a refusal may call `function` by: the declared one, with `.` for `:` too.
fn function_names(row: &Row) -> Vec<String> {
    let mut out = vec![row.function.to_owned(), row.function.replace(':', ".")];
    out.extend(row.aliases.iter().map(|a| (*a).to_owned()));
    out
}

/// What one child's run says is wrong, one line each (the calls that went wrong the same way
/// at one parameter on one line, naming their values), and every call's outcome.
fn check(row: &Row, sites: &[Site], ended: &Ended) -> (Vec<String>, Vec<String>) {
    let mut wrong = Vec::new();
    let mut outcomes = Vec::new();
    let what = format!("{} (child took {:?})", row.function, ended.took);
    if ended.hung {
        wrong.push(format!("{what}: hung past {HANG:?} and was killed"));
    }
    if let Some(signal) = ended.signal {
        wrong.push(format!(
            "{what}: ended by signal {signal}; stderr:\n{:.3000}",
            ended.stderr_head
        ));
    }
    if !matches!(ended.code, Some(0..=2)) && ended.signal.is_none() {
        wrong.push(format!("{what}: exit code {:?}", ended.code));
    }
    if ended.panicked {
        wrong.push(format!(
            "{what}: panicked; stderr:\n{:.3000}",
            ended.stderr_head
        ));
    }
    let budget = MEMORY_BYTES + OVERHEAD;
    if ended.peak_rss > budget {
        wrong.push(format!(
            "{what}: peak RSS {} MiB, past --memory {MEMORY} and {} MiB of overhead",
            ended.peak_rss >> 20,
            OVERHEAD >> 20
        ));
    }
    // (parameter, problem) -> (the values, an example text)
    let mut grouped: BTreeMap<(String, String), (Vec<String>, String)> = BTreeMap::new();
    let fn_names = function_names(row);
    let mut seen = 0;
    for line in &ended.stdout {
        let Some(rest) = line.strip_prefix("MATRIX\t") else {
            continue;
        };
        seen += 1;
        let parts: Vec<&str> = rest.splitn(6, '\t').collect();
        let [_, param, value, state, len, text] = parts[..] else {
            wrong.push(format!("{what}: a line that is no outcome: {line}"));
            continue;
        };
        let len: usize = len.parse().unwrap_or(usize::MAX);
        outcomes.push(format!(
            "{}({param} = {value}): {state} {}",
            row.function,
            text.chars().take(200).collect::<String>()
        ));
        let problem = match state {
            "accepted" | "resolved" => None,
            "waiting" | "unsettled" if row.waits => None,
            "waiting" | "unsettled" => Some(format!("still {state} after the watch: it hangs")),
            "raised" | "rejected" if len > MAX_REFUSAL => Some(format!(
                "{state} with a text past {MAX_REFUSAL} bytes (or too big to read)"
            )),
            "rejected" => None,
            // A callback's own error comes back as it raised it: the one it raises, or the one
            // its wait raises where it can't wait.
            "raised"
                if value.starts_with("a callback")
                    && (text.contains("matrix: the callback raised")
                        || text.contains("task.wait can't wait here")) =>
            {
                None
            }
            "raised" if !fn_names.iter().any(|n| text.contains(n.as_str())) => {
                Some(format!("the refusal does not name {}", row.function))
            }
            "raised" => {
                let field = param.rsplit('.').next().unwrap_or(param);
                let aliases = row.param_names.iter().filter(|(p, _)| *p == param);
                let named = matches!(param, "..." | "(extra)")
                    || names(text, param)
                    || names(text, field)
                    || aliases.clone().any(|(_, alias)| text.contains(alias));
                (!named).then(|| format!("the refusal does not name {param}"))
            }
            other => Some(format!("an unknown outcome {other}")),
        };
        if let Some(problem) = problem {
            let entry = grouped
                .entry((param.to_owned(), problem))
                .or_insert_with(|| (Vec::new(), text.chars().take(300).collect()));
            entry.0.push(value.to_owned());
        }
    }
    for ((param, problem), (values, example)) in grouped {
        wrong.push(format!(
            "{}({param}): {problem} [{}]: {example}",
            row.function,
            values.join(", ")
        ));
    }
    let expected: usize = sites
        .iter()
        .filter(|s| s.block.is_some())
        .map(|s| VALUES + if s.callbacks { CALLBACK_VALUES } else { 0 })
        .sum();
    if seen != expected {
        wrong.push(format!(
            "{what}: {seen} outcomes printed, {expected} calls made; exit {:?}; stdout ends:\n{}\nstderr:\n{:.3000}",
            ended.code,
            ended.stdout[ended.stdout.len().saturating_sub(3)..].join("\n"),
            ended.stderr_head
        ));
    } else if !ended.stdout.iter().any(|l| l == "MATRIX-SERVED\t42") {
        wrong.push(format!(
            "{what}: no dispatch served after the matrix; exit {:?}; stderr:\n{:.3000}",
            ended.code, ended.stderr_head
        ));
    }
    (wrong, outcomes)
}

// ---------------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------------

/// What the rows miss or have too many of, against the declared surface; empty when they match.
fn coverage(declared: &[Declared]) -> Vec<String> {
    let mut wrong = Vec::new();
    let by_name: BTreeMap<&str, &Declared> =
        declared.iter().map(|d| (d.name.as_str(), d)).collect();
    let rows: BTreeSet<&str> = ROWS.iter().map(|r| r.function).collect();
    for d in declared {
        if !rows.contains(d.name.as_str()) {
            wrong.push(format!(
                "{} is declared in types/skein.d.luau but has no row in tests/hostile_matrix.rs",
                d.name
            ));
        }
    }
    for row in ROWS {
        let Some(d) = by_name.get(row.function) else {
            wrong.push(format!(
                "tests/hostile_matrix.rs has a row for {}, which types/skein.d.luau does not declare",
                row.function
            ));
            continue;
        };
        let mut known: BTreeSet<String> = BTreeSet::new();
        if d.params.is_empty() {
            known.insert("(extra)".to_owned());
        }
        for p in &d.params {
            known.insert(p.name.clone());
            for (field, _) in &p.fields {
                known.insert(format!("{}.{field}", p.name));
            }
            if !row.calls.iter().any(|(name, _)| *name == p.name) {
                wrong.push(format!(
                    "{}: the row has no call for parameter {}",
                    d.name, p.name
                ));
            }
        }
        if d.params.is_empty() && !row.calls.iter().any(|(name, _)| *name == "(extra)") {
            wrong.push(format!("{}: the row has no (extra) call", d.name));
        }
        for (name, _) in row.calls {
            if !known.contains(*name) {
                wrong.push(format!(
                    "{}: the row calls {name}, which types/skein.d.luau does not declare",
                    d.name
                ));
            }
        }
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for row in ROWS {
        *counts.entry(row.function).or_default() += 1;
    }
    for (name, n) in counts {
        if n > 1 {
            wrong.push(format!("{name} has {n} rows"));
        }
    }
    wrong
}

#[test]
fn the_parser_reads_the_declared_surface() {
    let declared = declared_surface(&types_file());
    let find = |name: &str| {
        declared
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} not parsed: {declared:#?}"))
    };
    let dispatch = find("jobs.dispatch");
    let params: Vec<&str> = dispatch.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(params, ["module", "entry", "args", "opts"]);
    let fields: Vec<&str> = dispatch.params[3]
        .fields
        .iter()
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(fields, ["deadline", "name", "key", "supersede"]);
    assert_eq!(find("jobs.shared.atomic").params.len(), 3);
    assert!(find("jobs.shared.atomic").params[2].ty.contains("->"));
    assert_eq!(find("PromiseHandle:await").params[0].name, "self");
    assert_eq!(find("SharedQueue:popMany").params[1].name, "n");
    assert_eq!(find("task.spawn").params[1].name, "...");
    assert!(find("jobs.context").params.is_empty());
    assert_eq!(find("Worker:join").params[1].name, "timeout");
    let register = find("jobs.register").params[0]
        .fields
        .iter()
        .map(|(f, _)| f.as_str())
        .collect::<Vec<_>>();
    for field in [
        "phase",
        "executor",
        "executor.kind",
        "executor.run",
        "executor.kernel",
        "metadata",
    ] {
        assert!(register.contains(&field), "{field} in {register:?}");
    }
    let bind = &find("context.bind").params[1];
    assert_eq!(bind.fields.len(), 12, "{bind:?}");
    assert!(find("events.on").params[1].ty.contains("->"));
    assert_eq!(find("fs.writeFile").params.len(), 2);
    assert_eq!(find("worker.spawn").params[0].fields.len(), 5);
    assert!(!declared.iter().any(|d| d.name.starts_with("runner")));
}

#[test]
fn the_value_counts_match_the_prelude() {
    // The parent counts the lines each child owes from these.
    let entries = |table: &str| {
        let start = PRELUDE.find(&format!("local {table} = {{")).unwrap();
        let end = start + PRELUDE[start..].find("\n}").unwrap();
        PRELUDE[start..end].matches("\n\t{ \"").count()
    };
    assert_eq!(entries("HOSTILE"), VALUES);
    assert_eq!(entries("CALLBACKS"), CALLBACK_VALUES);
}

#[test]
fn the_coverage_names_what_the_rows_and_the_types_file_disagree_on() {
    let types = types_file()
        .replace("\tstats: () -> { WorkerStats },\n", "")
        .replace(
            "declare task: {",
            "declare task: {\n\tyieldNow: (reason: string?) -> (),",
        )
        .replace(
            "release: (key: string) -> boolean,",
            "release: (key: string, force: boolean?) -> boolean,",
        );
    let wrong = coverage(&declared_surface(&types));
    assert_eq!(
        wrong,
        [
            "task.yieldNow is declared in types/skein.d.luau but has no row in tests/hostile_matrix.rs",
            "jobs.release: the row has no call for parameter force",
            "tests/hostile_matrix.rs has a row for jobs.stats, which types/skein.d.luau does not declare",
        ]
    );
}

#[test]
fn every_declared_function_has_a_row() {
    let wrong = coverage(&declared_surface(&types_file()));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "needs the release runner: cargo test --release --test main hostile_matrix::"
)]
fn every_function_takes_every_hostile_value_and_names_what_it_refuses() {
    let declared = declared_surface(&types_file());
    let wrong = coverage(&declared);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let only = std::env::var("SKEIN_MATRIX_ONLY").ok();
    let work: Vec<(&Row, Vec<Site>)> = ROWS
        .iter()
        .filter(|row| only.as_deref().is_none_or(|o| row.function == o))
        .map(|row| {
            let d = declared.iter().find(|d| d.name == row.function).unwrap();
            (row, sites(row, d))
        })
        .collect();
    let next = Mutex::new(0usize);
    let (to, results) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            let to = to.clone();
            let (work, next) = (&work, &next);
            scope.spawn(move || loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some((row, sites)) = work.get(i) else {
                    break;
                };
                let script = script(row, sites);
                let (tree, args) = child_tree(row, &script);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let ended = run_child(&tree.path(), &args);
                let (wrong, outcomes) = check(row, sites, &ended);
                to.send((
                    row.function,
                    ended.took,
                    ended.peak_rss,
                    ended.stderr_bytes,
                    wrong,
                    outcomes,
                ))
                .unwrap();
            });
        }
    });
    drop(to);
    let mut all_wrong = Vec::new();
    let mut peak = 0;
    let verbose = std::env::var("SKEIN_MATRIX_VERBOSE").is_ok();
    for (function, took, rss, stderr_bytes, wrong, outcomes) in results {
        peak = peak.max(rss);
        eprintln!(
            "hostile matrix: {function}: {} calls, {took:?}, peak RSS {} MiB, {} KiB of stderr",
            outcomes.len(),
            rss >> 20,
            stderr_bytes >> 10
        );
        if verbose {
            for outcome in &outcomes {
                eprintln!("  {outcome}");
            }
        }
        all_wrong.extend(wrong);
    }
    eprintln!("hostile matrix: highest peak RSS {} MiB", peak >> 20);
    let _ = std::io::stderr().flush();
    assert!(
        all_wrong.is_empty(),
        "{} findings:\n{}",
        all_wrong.len(),
        all_wrong.join("\n")
    );
}
