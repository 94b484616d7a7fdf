//! Failures of domain code reach a host that drives frames: a main script failing before and
//! after a yield, `exec` chunks, tasks and registered jobs each leave a structured
//! [`Report`](skein::Report) in `take_reports()` and in the frame's result, and a failing main
//! script moves the domain to `Failed`.

use std::time::Duration;

use skein::job::FailureKind;
use skein::lifecycle::DomainState;
use skein::{Pool, ReportKind, ScriptDomain, ScriptStatus};

use crate::support::{wait_until, Tree};

const FRAME: Duration = Duration::from_millis(1);

const MAIN_LATE: &str = "local x = 1\ntask.wait(0.01)\nerror('late boom')\n";

fn tree() -> Tree {
    Tree::new(&[
        ("early.luau", "error('early boom')\n"),
        ("late.luau", MAIN_LATE),
        (
            "m.luau",
            "return { fail = function()\n error('the entry failed')\nend }",
        ),
    ])
}

/// Frames until `done`, as a host's loop would; every report the frames answered, in order.
#[track_caller]
fn frames_until(domain: &ScriptDomain, mut done: impl FnMut() -> bool) -> Vec<skein::Report> {
    let mut seen = Vec::new();
    let held = wait_until(Duration::from_secs(10), || {
        seen.extend(domain.frame(FRAME).reports);
        done()
    });
    assert!(held, "never held; reports {seen:?}");
    seen
}

#[test]
fn a_main_script_failing_before_its_first_yield_fails_the_domain_and_is_reported() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let script = domain
        .run_file(tree.path().join("early.luau"), &[])
        .unwrap();
    assert_eq!(domain.state(), DomainState::Failed);
    let ScriptStatus::Failed(text) = script.status() else {
        panic!("{:?}", script.status());
    };
    assert!(text.starts_with("script "), "{text}");
    assert!(text.contains("early.luau failed: "), "{text}");
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report = &reports[0];
    assert_eq!(report.kind, ReportKind::Script);
    assert!(report.source.starts_with("script "), "{}", report.source);
    assert!(report.source.ends_with("early.luau"), "{}", report.source);
    assert!(
        report.message.contains("early.luau:1: early boom"),
        "{}",
        report.message
    );
    assert_eq!(report.line, Some(1));
    assert!(report.module.as_deref().unwrap().ends_with("early.luau"));
    assert!(report.is_failure());
    // Frames go on in a failed domain, and it stays failed.
    domain.frame(FRAME);
    assert_eq!(domain.state(), DomainState::Failed);
    assert!(domain.take_reports().is_empty(), "reported once");
}

#[test]
fn a_main_script_failing_after_a_yield_reaches_a_frame_driven_host() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let script = domain.run_file(tree.path().join("late.luau"), &[]).unwrap();
    assert_eq!(domain.state(), DomainState::Loading);
    domain.frame(FRAME);
    assert_eq!(
        domain.state(),
        DomainState::Running,
        "frames began while it waited"
    );
    let seen = frames_until(&domain, || script.is_finished());
    assert_eq!(domain.state(), DomainState::Failed);
    assert_eq!(seen.len(), 1, "the frame it failed in answers it: {seen:?}");
    let reports = domain.take_reports();
    assert_eq!(reports, seen, "take_reports answers the same report");
    let report = &reports[0];
    assert_eq!(report.kind, ReportKind::Script);
    assert_eq!(report.source, script.name());
    assert!(report.source.ends_with("late.luau"), "{}", report.source);
    assert_eq!(report.line, Some(3));
    let first = report.message.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("{} failed: ", script.name())),
        "{first}"
    );
    assert!(first.ends_with("late.luau:3: late boom"), "{first}");
    let stack = report.stack.as_deref().unwrap();
    assert!(stack.starts_with("stack traceback:"), "{stack}");
    assert!(stack.contains("late.luau:3"), "{stack}");
    assert!(
        !report.message.contains("skein "),
        "no internal frame: {}",
        report.message
    );
    assert_eq!(
        script.status(),
        ScriptStatus::Failed(report.message.clone())
    );
}

#[test]
fn exec_failures_are_reported_before_and_after_a_yield() {
    let pool = Pool::new(1);
    let domain = Tree::new(&[]).domain(&pool);
    domain.exec("error('boom')").unwrap();
    assert_eq!(domain.state(), DomainState::Failed);
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].kind, ReportKind::Script);
    assert_eq!(reports[0].source, "script exec");
    assert_eq!(
        reports[0].message.lines().next().unwrap(),
        "script exec failed: exec:1: boom"
    );
    assert_eq!(
        (reports[0].module.as_deref(), reports[0].line),
        (Some("exec"), Some(1))
    );

    // More code for a running domain: reported, and the state is left alone.
    let domain = Tree::new(&[]).domain(&pool);
    domain.frame(FRAME);
    domain.exec("task.wait(0.005)\nerror('later')").unwrap();
    let seen = frames_until(&domain, || domain.tasks() == 0);
    assert_eq!(domain.state(), DomainState::Running);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].message.lines().next().unwrap(),
        "script exec failed: exec:2: later"
    );
}

#[test]
fn a_handle_waits_for_its_script_and_answers_its_failure() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let script = domain.run_file(tree.path().join("late.luau"), &[]).unwrap();
    let err = script.wait(&domain).unwrap_err().to_string();
    assert!(err.contains("late.luau failed: "), "{err}");
    assert!(err.contains("late.luau:3: late boom"), "{err}");
    assert_eq!(domain.state(), DomainState::Failed);

    let tree = Tree::new(&[("ok.luau", "task.wait(0.005)\nreturn 1")]);
    let domain = tree.domain(&pool);
    let script = domain.run_file(tree.path().join("ok.luau"), &[]).unwrap();
    assert_eq!(script.status(), ScriptStatus::Running);
    script.wait(&domain).unwrap();
    assert_eq!(script.status(), ScriptStatus::Returned);
    assert_eq!(domain.state(), DomainState::Ready);
}

#[test]
fn tasks_and_registered_jobs_give_structured_reports_without_internal_frames() {
    let tree = tree();
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    domain
        .exec(
            r#"
            jobs.register({ name = "j", phase = "main", executor = { kind = "luau", run = function()
                error("job broke")
            end } })
            jobs.register({ name = "w", phase = "main", executor = { kind = "worker", module = "./m",
                entry = "fail", input = function() return 1 end, apply = function() end } })
            task.spawn(function() task.wait(0.001) error("spawned") end)
            jobs.register({ name = "a", phase = "main", executor = { kind = "luau", run = function()
                jobs.dispatch("./m", "fail"):await()
            end } })
            "#,
        )
        .unwrap();
    let mut seen = Vec::new();
    frames_until(&domain, || {
        seen.extend(domain.take_reports());
        seen.len() >= 4
    });
    assert_eq!(
        domain.state(),
        DomainState::Running,
        "the script itself returned"
    );
    let task = seen.iter().find(|r| r.kind == ReportKind::Task).unwrap();
    assert_eq!(task.source, "script exec");
    assert_eq!(task.message.lines().next().unwrap(), "exec:7: spawned");
    let luau = seen.iter().find(|r| r.job.as_deref() == Some("j")).unwrap();
    assert_eq!(luau.kind, ReportKind::Job);
    assert_eq!(luau.source, "job 'j'");
    assert_eq!(
        luau.message.lines().next().unwrap(),
        "job 'j' failed: exec:3: job broke"
    );
    let failure = luau.job_failure.as_ref().unwrap();
    assert_eq!(failure.kind, FailureKind::Raised);
    assert_eq!(failure.message, "exec:3: job broke");
    assert!(failure
        .traceback
        .as_deref()
        .unwrap()
        .starts_with("stack traceback:"));
    let worker = seen.iter().find(|r| r.job.as_deref() == Some("w")).unwrap();
    assert_eq!(worker.line, Some(2));
    let failure = worker.job_failure.as_ref().unwrap();
    assert_eq!(failure.entry.as_deref(), Some("fail"));
    assert!(failure.module.as_ref().unwrap().ends_with("m.luau"));
    assert!(
        failure.message.ends_with("m.luau:2: the entry failed"),
        "{}",
        failure.message
    );
    // Raised through the awaited promise: the job's stack, not the prelude's.
    let awaited = seen.iter().find(|r| r.job.as_deref() == Some("a")).unwrap();
    let first = awaited.message.lines().next().unwrap();
    assert!(first.starts_with("job 'a' failed: "), "{first}");
    assert!(first.ends_with("m.luau:2: the entry failed"), "{first}");
    let failure = awaited.job_failure.as_ref().unwrap();
    assert!(
        failure.message.starts_with("job './m:fail' failed: "),
        "{}",
        failure.message
    );
    for report in &seen {
        assert!(
            !report.message.contains("skein "),
            "internal frame: {}",
            report.message
        );
        let tb = report
            .job_failure
            .as_ref()
            .and_then(|f| f.traceback.as_deref());
        assert!(
            !tb.unwrap_or("").contains("skein "),
            "internal frame: {tb:?}"
        );
    }
}
