//! The order of registered jobs within a phase: `after`, `before`, and write→read edges from
//! `reads` and `writes`, run in waves with ties in registration order; cycles refused at the
//! call that would close them, naming the cycle; unordered writers diagnosed once; the kernel
//! jobs of one wave running on the pool at once, and the next wave waiting for them; the
//! bounds of the declared lists.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use skein::diagnostic::{Diagnostic, DiagnosticKind, DiagnosticSink, Severity};
use skein::{DomainSpec, Message, Pool, ScriptDomain};

use crate::support::{number, text, wait_until};

const FRAME: Duration = Duration::from_millis(1);

fn string(domain: &ScriptDomain, expr: &str) -> String {
    text(&domain.eval(&format!("return {expr}")).unwrap())
}

fn int(domain: &ScriptDomain, expr: &str) -> f64 {
    number(&domain.eval(&format!("return {expr}")).unwrap())
}

/// The error `body` raises, as the code that caught it sees it: one line.
#[track_caller]
fn refusal(domain: &ScriptDomain, body: &str) -> String {
    let raised = crate::support::refusal(domain, body);
    assert!(
        !raised.contains('\n'),
        "a caught error is its text alone: {raised:?}"
    );
    raised
}

/// `job(name, fields)`: registers a luau job of phase "main" that appends its name to `log`,
/// with the descriptor fields `fields` (a table) added.
const JOB: &str = r#"
log = {}
function job(name, fields)
    local d = { name = name, phase = "main", executor = { kind = "luau",
        run = function() table.insert(log, name) end } }
    for k, v in fields or {} do d[k] = v end
    return jobs.register(d)
end
"#;

fn domain(pool: &Pool) -> ScriptDomain {
    let domain = ScriptDomain::new(pool, DomainSpec::new("game")).unwrap();
    domain.eval(JOB).unwrap();
    domain
}

#[test]
fn jobs_run_in_a_topological_order_with_ties_in_registration_order() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain
        .eval(
            r#"
            job("draw", { reads = { "mesh" }, after = { "camera" } })
            job("input")
            camera = job("camera", { after = { "input" } })
            job("build", { writes = { "mesh" } })
            job("audio")
            job("hud", { before = { "input" } })
            "#,
        )
        .unwrap();
    domain.frame(FRAME);
    // Wave 1: build, audio, hud (nothing precedes them), in registration order; wave 2: input
    // (after hud); wave 3: camera; wave 4: draw (after camera, and it reads what build wrote).
    assert_eq!(
        string(&domain, "table.concat(log, ',')"),
        "build,audio,hud,input,camera,draw"
    );
    let placed = string(
        &domain,
        r#"(function()
            local out = {}
            for _, i in jobs.list() do table.insert(out, `{i.name}={i.position}/{i.wave}`) end
            return table.concat(out, ' ')
        end)()"#,
    );
    assert_eq!(
        placed,
        "draw=6/4 input=4/2 camera=5/3 build=1/1 audio=2/1 hud=3/1"
    );
    // inspect and info answer the same place, and what was declared.
    assert_eq!(int(&domain, "jobs.inspect('draw').position"), 6.0);
    assert_eq!(int(&domain, "camera:info().wave"), 3.0);
    assert_eq!(string(&domain, "jobs.inspect('draw').reads[1]"), "mesh");
    assert_eq!(string(&domain, "jobs.inspect('draw').after[1]"), "camera");
    assert_eq!(
        domain.eval("return jobs.inspect('draw').pure").unwrap(),
        Message::Boolean(false)
    );
    // Rust sees the same.
    let draw = &domain.jobs()[0];
    assert_eq!((draw.order.position, draw.order.wave), (6, 4));

    // A job cancelled takes its edges with it: camera goes, so draw has only build before it.
    domain.eval("camera:cancel() log = {}").unwrap();
    domain.frame(FRAME);
    assert_eq!(
        string(&domain, "table.concat(log, ',')"),
        "build,audio,hud,draw,input"
    );
}

#[test]
fn a_cycle_is_refused_at_the_call_that_closes_it_naming_it_and_nothing_changes() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain
        .eval(r#"job("a", { after = { "c" } }) job("b", { after = { "a" } })"#)
        .unwrap();
    // c after b closes c -> a -> b -> c.
    assert_eq!(
        refusal(&domain, r#"job("c", { after = { "b" } })"#),
        "jobs.register: the order would have a cycle: c -> a -> b -> c (each runs before the \
         next); job 'c' is not registered"
    );
    assert_eq!(int(&domain, "#jobs.list()"), 2.0);
    assert_eq!(domain.eval("return jobs.find('c')").unwrap(), Message::Nil);
    domain.frame(FRAME);
    assert_eq!(string(&domain, "table.concat(log, ',')"), "a,b");
    // The name and the id were not taken: c registers without the edge, as job 3.
    assert_eq!(int(&domain, r#"job("c"):info().id"#), 3.0);

    // A job naming itself is a cycle of one.
    assert_eq!(
        refusal(&domain, r#"job("self", { before = { "self" } })"#),
        "jobs.register: the order would have a cycle: self -> self (each runs before the \
         next); job 'self' is not registered"
    );
    // Reads and writes make edges too: x reads what y writes, y reads what x writes.
    domain
        .eval(r#"job("x", { reads = { "pos" }, writes = { "vel" } })"#)
        .unwrap();
    assert_eq!(
        refusal(
            &domain,
            r#"job("y", { reads = { "vel" }, writes = { "pos" } })"#
        ),
        "jobs.register: the order would have a cycle: y -> x -> y (each runs before the \
         next); job 'y' is not registered"
    );
    // Declaring the order settles it: y runs first and reads the velocity x left last frame.
    domain
        .eval(r#"job("y", { reads = { "vel" }, writes = { "pos" }, before = { "x" } })"#)
        .unwrap();
    assert!(
        int(&domain, "jobs.inspect('y').position") < int(&domain, "jobs.inspect('x').position")
    );
    // Another phase is apart: the same names order nothing across phases.
    domain
        .eval(
            r#"jobs.register({ name = "z", phase = "other", after = { "b" }, before = { "a" },
            executor = { kind = "luau", run = function() end } })"#,
        )
        .unwrap();
}

#[test]
fn a_worker_vm_registration_that_closes_a_cycle_is_refused_at_its_call() {
    let tree = crate::support::Tree::new(&[(
        "m.luau",
        r#"return { go = function()
            local ok, err = pcall(jobs.register, { name = "w", phase = "main", after = { "e" },
                before = { "e" }, executor = { kind = "luau", run = function() end } })
            return tostring(err)
        end }"#,
    )]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    domain.eval(JOB).unwrap();
    domain.eval(r#"job("e")"#).unwrap();
    let err = text(
        &domain
            .eval(r#"return jobs.dispatch("./m", "go"):await()"#)
            .unwrap(),
    );
    assert!(
        err.contains(
            "jobs.register: the order would have a cycle: w -> e -> w (each runs before the \
             next); job 'w' is not registered"
        ),
        "{err}"
    );
    assert_eq!(domain.jobs().len(), 1);
}

#[derive(Default)]
struct Seen(Mutex<Vec<(Severity, Diagnostic)>>);

impl DiagnosticSink for Seen {
    fn diagnostic(&self, severity: Severity, d: &Diagnostic) {
        self.0.lock().unwrap().push((severity, d.clone()));
    }
}

#[test]
fn two_writers_with_nothing_ordering_them_are_diagnosed_once_and_still_run() {
    let seen = Arc::new(Seen::default());
    let pool = Pool::new(1);
    let domain =
        ScriptDomain::new(&pool, DomainSpec::new("game").diagnostics(seen.clone())).unwrap();
    domain.eval(JOB).unwrap();
    domain
        .eval(
            r#"job("a", { writes = { "score" } })
            job("b", { reads = { "score" }, writes = { "score" } })
            job("c", { writes = { "score" }, after = { "a" }, before = { "b" } })
            job("d", { writes = { "other" } })
            job("e", { writes = { "other" } })"#,
        )
        .unwrap();
    domain.frame(FRAME);
    domain.frame(FRAME);
    let seen = seen.0.lock().unwrap().clone();
    // a, c, b are ordered through c; d and e are not, and are reported once over two frames.
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (severity, diagnostic) = &seen[0];
    assert_eq!(*severity, Severity::Warning);
    assert_eq!(diagnostic.kind, DiagnosticKind::UnorderedWrites);
    assert_eq!(
        diagnostic.message,
        "jobs 'd' and 'e' of phase 'main' both write 'other' and nothing orders them: they run \
         in registration order; declare after or before to choose"
    );
    // Both run, in registration order, every frame.
    assert_eq!(
        string(&domain, "table.concat(log, ',')"),
        "a,d,e,c,b,a,d,e,c,b"
    );
}

/// Where each kernel call began and ended, by kernel name.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<HashMap<&'static str, (Instant, Instant)>>>);

/// A meeting point for `n` calls: each waits (at most 10 s) until all have arrived.
#[derive(Clone)]
struct Meet(Arc<(Mutex<usize>, Condvar)>, usize);

impl Meet {
    /// Arrives and waits for the others; answers whether they all came.
    fn arrive(&self) -> bool {
        let (count, all) = &*self.0;
        let mut n = count.lock().unwrap();
        *n += 1;
        all.notify_all();
        let (n, timeout) = all
            .wait_timeout_while(n, Duration::from_secs(10), |n| *n < self.1)
            .unwrap();
        drop(n);
        !timeout.timed_out()
    }
}

#[test]
fn kernel_jobs_of_one_wave_overlap_on_two_workers_and_the_next_wave_waits_for_them() {
    let pool = Pool::new(2);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("game")).unwrap();
    let spans = Spans::default();
    let meet = Meet(Arc::default(), 2);
    for name in ["left", "right"] {
        let (spans, meet) = (spans.clone(), meet.clone());
        domain
            .register_kernel(name, move |_| {
                let start = Instant::now();
                // Each waits for the other to start: they can only both get here at once.
                let met = meet.arrive();
                spans
                    .0
                    .lock()
                    .unwrap()
                    .insert(name, (start, Instant::now()));
                Ok(Message::Boolean(met))
            })
            .unwrap();
    }
    let after = spans.clone();
    domain
        .register_kernel("after", move |_| {
            let now = Instant::now();
            after.0.lock().unwrap().insert("after", (now, now));
            Ok(Message::Nil)
        })
        .unwrap();
    domain
        .eval(
            r#"
            met = {}
            local function kernel(name, fields)
                local d = { name = name, phase = "main", executor = { kind = "kernel", kernel = name,
                    apply = function(r) met[name] = r end } }
                for k, v in fields do d[k] = v end
                jobs.register(d)
            end
            kernel("left", { writes = { "l" } })
            kernel("after", { reads = { "l", "r" } })
            kernel("right", { writes = { "r" } })
            -- A luau job of the second wave reads what the first wave's applies wrote.
            jobs.register({ name = "look", phase = "main", after = { "left", "right" },
                executor = { kind = "luau", run = function() seen = met.left and met.right end } })
            "#,
        )
        .unwrap();
    assert_eq!(
        string(
            &domain,
            "`{jobs.inspect('left').wave} {jobs.inspect('right').wave} {jobs.inspect('after').wave}`"
        ),
        "1 1 2"
    );
    domain.frame(FRAME);
    // The wave's applies ran before the second wave, in the same frame.
    assert_eq!(
        domain.eval("return seen").unwrap(),
        Message::Boolean(true),
        "{:?}",
        domain.take_reports()
    );
    assert!(wait_until(Duration::from_secs(10), || spans
        .0
        .lock()
        .unwrap()
        .contains_key("after")));
    let spans = spans.0.lock().unwrap().clone();
    let (left, right, after) = (spans["left"], spans["right"], spans["after"]);
    // Each began before the other ended: they ran at the same time.
    assert!(left.0 < right.1 && right.0 < left.1, "{spans:?}");
    // The second wave's kernel started after both had ended.
    assert!(after.0 >= left.1 && after.0 >= right.1, "{spans:?}");
}

#[test]
fn each_declared_list_holds_at_most_64_names() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    for list in ["reads", "writes", "after", "before"] {
        let what = if matches!(list, "after" | "before") {
            "job names"
        } else {
            "names"
        };
        let names = |n: usize| {
            (1..=n)
                .map(|i| format!("'n{i}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let before = int(&domain, "#jobs.list()");
        assert_eq!(
            refusal(
                &domain,
                &format!("job('{list}65', {{ {list} = {{ {} }} }})", names(65))
            ),
            format!("jobs.register: {list} must be a list of at most 64 {what}, got 65")
        );
        assert_eq!(int(&domain, "#jobs.list()"), before);
        domain
            .eval(&format!(
                "job('{list}64', {{ {list} = {{ {} }} }})",
                names(64)
            ))
            .unwrap();
        assert_eq!(
            int(&domain, &format!("#jobs.inspect('{list}64').{list}")),
            64.0
        );
    }
}

#[test]
fn a_phase_holds_at_most_4096_jobs() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    domain
        .eval(
            r#"
            local run = function() end
            big = {}
            for i = 1, 4096 do
                big[i] = jobs.register({ phase = "big", executor = { kind = "luau", run = run } })
            end
            "#,
        )
        .unwrap();
    assert_eq!(int(&domain, "#jobs.list('big')"), 4096.0);
    let one_more = r#"jobs.register({ name = "one-more", phase = "big", executor = { kind = "luau", run = print } })"#;
    assert_eq!(
        refusal(&domain, one_more),
        "jobs.register: phase 'big' holds 4096 jobs, the most one phase may hold; cancel one \
         or register in another phase"
    );
    assert_eq!(int(&domain, "#jobs.list('big')"), 4096.0);
    assert_eq!(
        domain.eval("return jobs.find('one-more')").unwrap(),
        Message::Nil
    );
    // Another phase is not full; and a cancel makes room.
    domain.eval(r#"job("elsewhere")"#).unwrap();
    domain.eval("assert(big[1]:cancel())").unwrap();
    domain.eval(one_more).unwrap();
    assert_eq!(int(&domain, "#jobs.list('big')"), 4096.0);
}

#[test]
fn a_wave_waiting_for_a_worker_job_answers_its_forwarded_queries() {
    let tree = crate::support::Tree::new(&[(
        "m.luau",
        "return { twice = function(id) return world.get(id) * 2 end }",
    )]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    domain
        .register_query("world.get", |(id,): (f64,)| Ok(id * 10.0))
        .unwrap();
    domain
        .eval(
            r#"
            seen = {}
            jobs.register({ name = "query", phase = "main", writes = { "answer" },
                executor = { kind = "worker", module = "./m", entry = "twice",
                    input = function() return 2 end,
                    apply = function(r) answer = r end } })
            jobs.register({ name = "read", phase = "main", reads = { "answer" },
                executor = { kind = "luau", run = function() table.insert(seen, answer or 0) end } })
            "#,
        )
        .unwrap();
    // The item's query is answered while the frame waits for it, and its result is applied
    // before the reader runs: the first frame's reader already sees it.
    domain.frame(FRAME);
    assert_eq!(int(&domain, "seen[1]"), 40.0, "{:?}", domain.take_reports());
    domain.frame(FRAME);
    assert_eq!(int(&domain, "#seen"), 2.0);
}

#[test]
fn a_wave_waits_at_most_the_run_deadline_for_its_items_and_the_late_result_applies_later() {
    let pool = Pool::new(2);
    let spec = DomainSpec::new("game").run_deadline(Duration::from_millis(50));
    let domain = ScriptDomain::new(&pool, spec).unwrap();
    // A kernel held until the test lets it go (native code: no deadline stops it).
    let gate = Meet(Arc::default(), 2);
    let held = gate.clone();
    domain
        .register_kernel("held", move |_| Ok(Message::Boolean(held.arrive())))
        .unwrap();
    domain
        .eval(
            r#"
            seen = {}
            jobs.register({ name = "slow", phase = "main", writes = { "v" },
                executor = { kind = "kernel", kernel = "held", apply = function(r) v = r end } })
            jobs.register({ name = "reader", phase = "main", reads = { "v" },
                executor = { kind = "luau", run = function() table.insert(seen, tostring(v)) end } })
            "#,
        )
        .unwrap();
    let started = Instant::now();
    let report = domain.frame(FRAME);
    assert!(started.elapsed() >= Duration::from_millis(50));
    // The reader ran without the result, and the wait is reported naming the job.
    assert_eq!(string(&domain, "table.concat(seen, ',')"), "nil");
    let waited: Vec<_> = report
        .reports
        .iter()
        .filter(|r| r.source == "job 'slow'")
        .collect();
    assert_eq!(waited.len(), 1, "{:?}", report.reports);
    assert!(
        waited[0].message.starts_with(
            "job 'slow': wave 1 of phase 'main' ended without its item, still running after "
        ) && waited[0]
            .message
            .ends_with(" s; the next wave started and the item applies in a later frame"),
        "{}",
        waited[0].message
    );
    // A later frame does not wait for that item again, nor report it again.
    let again = domain.frame(FRAME);
    assert!(
        again.reports.iter().all(|r| r.source != "job 'slow'"),
        "{:?}",
        again.reports
    );
    assert_eq!(string(&domain, "table.concat(seen, ',')"), "nil,nil");
    // Let it go: a later frame applies it, and the reader after it sees it.
    assert!(gate.arrive());
    assert!(wait_until(Duration::from_secs(10), || {
        domain.frame(FRAME);
        string(&domain, "seen[#seen]") == "true"
    }));
}

#[test]
fn a_wave_waits_at_most_wave_wait_for_an_item_that_waits_across_frames() {
    let tree = crate::support::Tree::new(&[(
        "m.luau",
        "return { later = function() task.waitFrames(1) return 7 end }",
    )]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    domain
        .eval(
            r#"
            seen = {}
            jobs.register({ name = "frames", phase = "main", writes = { "v" },
                executor = { kind = "worker", module = "./m", entry = "later",
                    input = function() if v == nil then return true end return nil end,
                    apply = function(r) v = r end } })
            jobs.register({ name = "reader", phase = "main", reads = { "v" },
                executor = { kind = "luau", run = function() table.insert(seen, tostring(v)) end } })
            "#,
        )
        .unwrap();
    assert_eq!(
        skein::frame::FrameReport::WAVE_WAIT,
        Duration::from_millis(100)
    );
    let started = Instant::now();
    let report = domain.frame(FRAME);
    let took = started.elapsed();
    // The item can only end in a later frame: the wave waited its bound, not the 60 s deadline.
    assert!(
        took >= skein::frame::FrameReport::WAVE_WAIT && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(
        report
            .reports
            .iter()
            .filter(|r| r.source == "job 'frames'")
            .count(),
        1,
        "{:?}",
        report.reports
    );
    assert!(wait_until(Duration::from_secs(10), || {
        domain.frame(FRAME);
        string(&domain, "seen[#seen]") == "7"
    }));
    assert_eq!(string(&domain, "seen[1]"), "nil");
}
