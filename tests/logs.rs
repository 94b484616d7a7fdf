//! `@skein/log`: records from the engine VM and worker VMs reach the domain's log sink, attributed
//! by the runtime; without a sink they are lines on stderr.

use std::sync::{Arc, Mutex};

use skein::log::{LogLevel, LogRecord, LogSink};
use skein::{DomainSpec, Message, Plan, Pool, ScriptDomain};

use crate::support::{map, refusal, string, Tree};

#[derive(Default)]
struct Collected(Mutex<Vec<(LogRecord, Option<String>)>>);

impl LogSink for Collected {
    fn record(&self, r: &LogRecord) {
        let thread = std::thread::current().name().map(str::to_owned);
        self.0.lock().unwrap().push((r.clone(), thread));
    }
}

const WORK: &str = r#"local log = require("@skein/log")
return {
    run = function(n)
        log.debug("working", { n = n })
        return n
    end,
}
"#;

#[test]
fn engine_and_worker_records_reach_the_sink_attributed() {
    let sink = Arc::new(Collected::default());
    let tree = Tree::new(&[("work.luau", WORK)]);
    let pool = Pool::new(2);
    let spec = DomainSpec::new("main")
        .plan(Plan::new().root(tree.path()))
        .logs(sink.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    let ran = domain
        .eval(
            r#"local log = require("@skein/log")
log.info("started", { level = 3, name = "intro" })
log.error("no fields")
return jobs.dispatch("./work", "run", 7):await()"#,
        )
        .unwrap();
    assert_eq!(ran, Message::Number(7.0));
    let records = sink.0.lock().unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
    let (info, engine_thread) = &records[0];
    assert_eq!(info.level, LogLevel::Info);
    assert_eq!(info.message, "started");
    assert_eq!(
        info.fields,
        map(&[("level", Message::Number(3.0)), ("name", string("intro"))])
    );
    assert_eq!(info.attribution.domain, domain.id());
    assert_eq!(info.attribution.generation.get(), 1);
    assert_eq!(
        engine_thread.as_deref(),
        std::thread::current().name(),
        "the engine VM logs on the engine thread"
    );
    assert!(info.source.as_deref().unwrap().ends_with(":2"), "{info:?}");
    let (error, _) = &records[1];
    assert_eq!(
        (error.level, error.fields.clone()),
        (LogLevel::Error, Message::Nil)
    );
    let (worker, worker_thread) = &records[2];
    assert_eq!(worker.level, LogLevel::Debug);
    assert_eq!(worker.message, "working");
    assert_eq!(worker.fields, map(&[("n", Message::Number(7.0))]));
    assert_eq!(worker.attribution.domain, domain.id());
    assert!(worker.target.ends_with("work.luau"), "{worker:?}");
    assert!(
        worker.source.as_deref().unwrap().ends_with("work.luau:4"),
        "{worker:?}"
    );
    let worker_thread = worker_thread.as_deref().unwrap();
    assert!(
        worker_thread.starts_with("skein-worker-"),
        "{worker_thread}"
    );
}

#[test]
fn bad_messages_and_fields_are_refused_naming_the_call() {
    let sink = Arc::new(Collected::default());
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("main").logs(sink.clone())).unwrap();
    let text = refusal(&domain, r#"require("@skein/log").info(42)"#);
    assert!(
        text.contains("log.info: message must be a string, got a number"),
        "{text}"
    );
    assert!(refusal(&domain, r#"require("@skein/log").warn("x", "y")"#)
        .contains("log.warn: fields must be a table or nil, got a string"));
    assert!(
        refusal(
            &domain,
            r#"require("@skein/log").debug("x", { f = print })"#
        )
        .contains("log.debug: fields.f: a function can't cross"),
        "{}",
        refusal(
            &domain,
            r#"require("@skein/log").debug("x", { f = print })"#
        )
    );
    let text = refusal(&domain, r#"require("@skein/log").info("\255")"#);
    assert_eq!(text, "log.info: message must be UTF-8 text");
    assert!(sink.0.lock().unwrap().is_empty());
}

#[test]
fn without_a_sink_records_are_lines_on_stderr() {
    let tree = Tree::new(&[(
        "main.luau",
        r#"require("@skein/log").warn("low on fuel", { left = 3 })"#,
    )]);
    let (code, _, stderr) = crate::support::skein_in(&tree.path(), &["run", "main.luau"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("main.luau domain 'main' (domain#1, generation 1): low on fuel {left = 3}"),
        "{stderr}"
    );
    assert!(stderr.starts_with("warn "), "{stderr}");
    assert!(stderr.contains("left"), "{stderr}");
}

/// The `@skein/log` example of docs/luau-api.md, run with a sink.
#[test]
fn the_luau_api_log_example_runs() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/luau-api.md"),
    )
    .unwrap();
    let start = text
        .find("```luau\nlocal log = require(\"@skein/log\")")
        .expect("the example is in docs/luau-api.md");
    let body = &text[start + "```luau\n".len()..];
    let body = &body[..body.find("\n```").unwrap()];
    let sink = Arc::new(Collected::default());
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("docs").logs(sink.clone())).unwrap();
    domain.exec(body).unwrap();
    let records = sink.0.lock().unwrap();
    let seen: Vec<(LogLevel, &str)> = records
        .iter()
        .map(|(r, _)| (r.level, r.message.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (LogLevel::Info, "loaded level"),
            (LogLevel::Warn, "low on fuel")
        ]
    );
}

#[test]
fn print_in_the_engine_and_worker_vms_reaches_the_sink_as_printed_records() {
    let sink = Arc::new(Collected::default());
    let tree = Tree::new(&[(
        "say.luau",
        "return { run = function(n) print('from the job', n) return n end }",
    )]);
    let pool = Pool::new(1);
    let spec = DomainSpec::new("main")
        .plan(Plan::new().root(tree.path()))
        .logs(sink.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    domain
        .eval(
            r#"print("first", 1, true, nil)
jobs.dispatch("./say", "run", 2):await()
print("last")"#,
        )
        .unwrap();
    let records = sink.0.lock().unwrap();
    let lines: Vec<_> = records
        .iter()
        .map(|(r, _)| (r.printed.is_some(), r.level, r.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            (true, LogLevel::Info, "first\t1\ttrue\tnil"),
            (true, LogLevel::Info, "from the job\t2"),
            (true, LogLevel::Info, "last"),
        ]
    );
    let (job, worker_thread) = &records[1];
    assert_eq!(job.attribution.domain, domain.id());
    assert!(job.target.ends_with("say.luau"), "{}", job.target);
    assert!(
        job.source.as_deref().unwrap().ends_with("say.luau:1"),
        "{:?}",
        job.source
    );
    assert_ne!(worker_thread.as_deref(), std::thread::current().name());
    assert_eq!(records[0].0.fields, Message::Nil);
}

#[test]
fn a_host_print_function_still_replaces_the_domain_s_print() {
    let sink = Arc::new(Collected::default());
    let said = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = said.clone();
    let plan = Plan::new().function("print", move |_, args: skein::mlua::MultiValue| {
        seen.lock().unwrap().push(format!("{} args", args.len()));
        Ok(skein::mlua::MultiValue::new())
    });
    let pool = Pool::new(1);
    let domain =
        ScriptDomain::new(&pool, DomainSpec::new("main").plan(plan).logs(sink.clone())).unwrap();
    domain.eval("print('a', 'b')").unwrap();
    assert_eq!(*said.lock().unwrap(), ["2 args"]);
    assert!(sink.0.lock().unwrap().is_empty());
}

/// A printed line and a log record are charged to the domain's host memory before they are
/// made (twice their length: the line and the record's text), and one that does not fit is
/// refused at the call, naming the budget; the next one that fits goes through.
#[test]
fn a_line_past_the_domains_host_memory_is_refused_at_the_call_and_the_next_goes_on() {
    let sink = Arc::new(Collected::default());
    let tree = Tree::new(&[(
        "say.luau",
        r#"return { run = function(n)
            local ok, e = pcall(print, string.rep('w', n))
            return { ok, (tostring(e):match("^([^\n]*)")) }
        end }"#,
    )]);
    let pool = Pool::new(1);
    let spec = DomainSpec::new("main")
        .plan(Plan::new().root(tree.path()))
        .host_memory(1 << 20)
        .logs(sink.clone());
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    // One argument of n bytes makes a line of n + 1 charged twice: 512 KiB - 1 fits exactly.
    let v = domain
        .eval(
            r#"
            local fits = pcall(print, string.rep("x", 512 * 1024 - 1))
            local ok, err = pcall(print, string.rep("y", 512 * 1024))
            local logged, logerr = pcall(require("@skein/log").info, string.rep("z", 512 * 1024 + 1))
            local fielded, fielderr = pcall(require("@skein/log").info, "m", { big = string.rep("f", 512 * 1024) })
            local job = jobs.dispatch("./say", "run", 600 * 1024):await()
            local job_ok, job_err = job[1], job[2]
            print("after")
            local function text(e) return (tostring(e):match("^([^\n]*)")) end
            return { fits, ok, text(err), logged, text(logerr), job_ok, job_err, fielded, text(fielderr) }
            "#,
        )
        .unwrap();
    let Message::List(row) = v else {
        panic!("{v:?}")
    };
    assert_eq!(row[0], Message::Boolean(true));
    assert_eq!(row[1], Message::Boolean(false));
    assert_eq!(
        row[2],
        string(
            "print: a line of 524289 bytes would not fit: the host memory of domain 'main' would \
         hold 1048578 bytes, past its budget of 1 MiB"
        )
    );
    assert_eq!(row[3], Message::Boolean(false));
    assert_eq!(
        row[4],
        string(
        "log.info: a line of 524289 bytes would not fit: the host memory of domain 'main' would \
         hold 1048578 bytes, past its budget of 1 MiB"
        )
    );
    assert_eq!(row[5], Message::Boolean(false));
    assert_eq!(
        row[6],
        string(
            // The job in flight holds its weight (256 bytes) of the same host memory.
            "print: a line of 614401 bytes would not fit: the host memory of domain 'main' would \
         hold 1229058 bytes, past its budget of 1 MiB"
        )
    );
    // A record's fields are charged with its text.
    assert_eq!(row[7], Message::Boolean(false));
    // "m", and a one-key table of 512 KiB: three nodes of 16 bytes, "big" and the string.
    assert_eq!(
        row[8],
        string(
            "log.info: a line of 524340 bytes would not fit: the host memory of domain 'main' \
             would hold 1048680 bytes, past its budget of 1 MiB"
        )
    );
    let records = sink.0.lock().unwrap();
    let lengths: Vec<_> = records.iter().map(|(r, _)| r.message.len()).collect();
    assert_eq!(
        lengths,
        [512 * 1024 - 1, 5],
        "only the lines that fit were made"
    );
}
