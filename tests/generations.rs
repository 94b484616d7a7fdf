//! Generations: `ScriptDomain::restart` ends the old generation (its commands never apply, its
//! forwarded queries are never answered and are counted stale, its host promises reject naming
//! the restart, its shared store and key bindings end, its engine VM is dropped) and the new
//! one runs dispatch and engine services as before. Also the forwarding fault where the asking
//! task is gone before its answer comes.

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use skein::job::{FailureKind, JobOptions};
use skein::message::Args;
use skein::{Error, Message, Pool, PromiseStatus, ScriptDomain};

use crate::support::{
    assert_contains, first_int, map, number, string, text, wait_until, world_set, Marks, Tree,
    World,
};

const MODULE: &str = r#"
local M = {}
local count = 0
-- Records a command, waits `a.frames` engine frames, records another: the entry returns only
-- after the wait. No frame runs unless the test runs one, so the job stays parked till then.
function M.slowSet(a)
    world.set(a.id, a.v)
    if a.frames > 0 then
        task.waitFrames(a.frames)
    end
    world.set(a.id + 1, a.v)
    return "done"
end
-- Each calls hostMark() just before its job sends something to the engine thread.
function M.set(a)
    world.set(a.id, a.v)
    hostMark()
    return "set"
end
function M.get(a)
    hostMark()
    return world.get(a.id)
end
function M.setThenGet(a)
    world.set(a.id, a.v)
    hostMark()
    return world.get(a.id)
end
function M.markedSlowSet(a)
    hostMark()
    return M.slowSet(a)
end
-- Marks, then parks on engine frames, which run only when the test runs one.
function M.nap(frames)
    hostMark()
    task.waitFrames(frames)
    return "awake"
end
-- Neither records a command nor queries: it settles its host promise straight from the worker.
function M.mark()
    hostMark()
end
function M.bump()
    count += 1
    return count
end
return M
"#;

const FRAME: Duration = Duration::from_millis(16);

/// A domain with `world.get` (counting its calls) and `world.set` over host state.
fn setup(tree: &Tree, pool: &Pool) -> (ScriptDomain, World, Arc<AtomicUsize>) {
    setup_marked(tree, pool, &Marks::default())
}

/// [`setup`], with the VMs' `hostMark()` calls counted into `marks`.
fn setup_marked(
    tree: &Tree,
    pool: &Pool,
    marks: &Marks,
) -> (ScriptDomain, World, Arc<AtomicUsize>) {
    let domain = tree.domain_with(pool, marks.plan());
    let world: World = Rc::default();
    let queries = Arc::new(AtomicUsize::new(0));
    let (w, q) = (world.clone(), queries.clone());
    domain
        .register_query("world.get", move |args: Args| {
            q.fetch_add(1, Ordering::SeqCst);
            Ok(w.borrow()
                .get(&first_int(&args))
                .cloned()
                .unwrap_or(Message::Nil))
        })
        .unwrap();
    domain
        .register_command("world.set", world_set(&world))
        .unwrap();
    (domain, world, queries)
}

fn tree() -> Tree {
    Tree::new(&[("m.luau", MODULE)])
}

/// The failure a host promise rejected with.
#[track_caller]
fn rejection(result: skein::Result<Message>) -> skein::job::JobFailure {
    match result {
        Err(Error::Job(failure)) => *failure,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// The worker VMs the pool's threads hold now.
fn vms_held(pool: &Pool) -> usize {
    pool.stats().iter().map(|s| s.vms_held).sum()
}

/// Waits until the pool's workers have dropped every VM of the domain's ended generations
/// (nothing of them can run or post any more), then runs frames, which drain and count
/// whatever those VMs posted before they went. A worker drops an ended generation's VMs in the
/// round the generation's end wakes it for.
#[track_caller]
fn settle_ended(pool: &Pool, domain: &ScriptDomain) {
    assert!(
        wait_until(Duration::from_secs(10), || vms_held(pool) == 0),
        "the old generation's worker VMs were never dropped: {:?}",
        pool.stats()
    );
    for _ in 0..3 {
        domain.frame(FRAME);
    }
}

#[test]
fn a_restart_applies_none_of_the_old_generations_commands_and_rejects_its_promises() {
    // One worker runs the items in dispatch order, each to its end or its first yield.
    let (tree, pool) = (tree(), Pool::new(1));
    let marks = Marks::default();
    let (mut domain, world, _) = setup_marked(&tree, &pool, &marks);
    let slow = map(&[
        ("id", Message::Integer(1)),
        ("v", string("old")),
        ("frames", Message::Number(1.0)),
    ]);
    let slow = domain.dispatch("./m", "slowSet", slow).unwrap();
    let quick = map(&[("id", Message::Integer(5)), ("v", string("old"))]);
    let quick = domain.dispatch("./m", "set", quick).unwrap();
    // The quick job posts its commands and settlement to the mailbox as it returns, before the
    // worker takes the next item: once that item has run, they wait there for a frame that
    // never comes.
    let marker = domain.dispatch("./m", "mark", Message::Nil).unwrap();
    assert_eq!(marker.wait().unwrap(), Message::Nil);
    assert_eq!(marks.count(), 2);
    assert_eq!(quick.status(), PromiseStatus::Pending);
    assert_eq!(domain.generation().get(), 1);
    assert_eq!(
        domain
            .restart(skein::lifecycle::Load::Nothing)
            .unwrap()
            .get(),
        2
    );
    assert_eq!(domain.generation().get(), 2);
    // Its Apply event was already queued: discarded, counted, never applied.
    assert_eq!(domain.stale_events(), 1);
    // The slow job's VM goes with its generation; what it held never applies.
    settle_ended(&pool, &domain);
    assert_eq!(domain.stale_events(), 1);
    assert!(world.borrow().is_empty(), "{:?}", world.borrow());
    for (promise, job) in [(slow, "./m:slowSet"), (quick, "./m:set")] {
        let failure = rejection(promise.wait());
        assert_eq!(failure.kind, FailureKind::Ended, "{job}: {failure}");
        assert_eq!(
            failure.to_string(),
            format!("job '{job}' ended with its domain's generation: domain 'test' restarted")
        );
    }
}

#[test]
fn a_queued_item_of_the_old_generation_is_refused_unrun() {
    // One worker: keyed items reach it in its inbox, in dispatch order.
    let (tree, pool) = (tree(), Pool::new(1));
    let (mut domain, world, _) = setup(&tree, &pool);
    let busy = map(&[
        ("id", Message::Integer(1)),
        ("v", string("old")),
        ("frames", Message::Number(0.0)),
    ]);
    // A keyed item behind a key whose first item is still waiting on its engine frame.
    let opts = JobOptions::new().key("k");
    let first = domain.dispatch_with("./m", "slowSet", busy, &opts).unwrap();
    let second = domain
        .dispatch_with("./m", "bump", Message::Nil, &opts)
        .unwrap();
    // The first item returns without yielding and posts its commands as it returns, before
    // the worker starts the marker, keyed elsewhere.
    let marker = JobOptions::new().key("marker");
    let marker = domain.dispatch_with("./m", "mark", Message::Nil, &marker);
    assert_eq!(marker.unwrap().wait().unwrap(), Message::Nil);
    assert_eq!(first.status(), PromiseStatus::Pending);
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    // The first item's commands were waiting in the mailbox: discarded, counted, never applied.
    assert_eq!(domain.stale_events(), 1);
    for _ in 0..3 {
        domain.frame(FRAME);
    }
    assert_eq!(domain.stale_events(), 1);
    let failure = rejection(second.wait());
    assert_eq!(failure.kind, FailureKind::Refused);
    assert_eq!(
        failure.to_string(),
        "job './m:bump' was refused unrun: domain 'test' restarted"
    );
    assert_contains(
        &rejection(first.wait()).to_string(),
        "domain 'test' restarted",
    );
    assert!(world.borrow().is_empty());
}

#[test]
fn a_restart_with_forwarded_calls_in_flight_drops_and_counts_their_answers() {
    let (tree, pool) = (tree(), Pool::new(2));
    let marks = Marks::default();
    let (mut domain, world, queries) = setup_marked(&tree, &pool, &marks);
    world.borrow_mut().insert(1, string("one"));
    // Four workers' queries from the engine VM, each carrying a command, and one from the host.
    domain
        .exec(
            r#"
            for i = 1, 4 do
                jobs.dispatch("./m", "setThenGet", { id = 10 + i, v = i })
            end
            "#,
        )
        .unwrap();
    let args = map(&[("id", Message::Integer(1))]);
    let host = domain.dispatch("./m", "get", args).unwrap();
    // No frame runs: the queries park their tasks and wait in the mailbox. Each is posted
    // right after its job's mark.
    // A query posted after the restart still lands in its own generation's (old) mailbox, so
    // each is stale whichever side of the restart it reaches.
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 5));
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            domain.frame(FRAME);
            domain.stale_events() == 5
        }),
        "stale events: {}",
        domain.stale_events()
    );
    for _ in 0..3 {
        domain.frame(FRAME);
    }
    assert_eq!(domain.stale_events(), 5);
    assert_eq!(queries.load(Ordering::SeqCst), 0, "no query was answered");
    assert_eq!(world.borrow().len(), 1, "no command was applied");
    assert_contains(
        &rejection(host.wait()).to_string(),
        "domain 'test' restarted",
    );
    // The engine VM that awaited them is gone, and with it its tasks.
    assert_eq!(domain.tasks(), 0);
}

#[test]
fn a_worker_parked_on_a_query_while_the_engine_restarts_is_never_answered() {
    let (tree, pool) = (tree(), Pool::new(1));
    let marks = Marks::default();
    let (mut domain, world, queries) = setup_marked(&tree, &pool, &marks);
    world.borrow_mut().insert(1, string("one"));
    let args = map(&[("id", Message::Integer(1))]);
    let parked = domain.dispatch("./m", "get", args).unwrap();
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 1));
    assert_eq!(parked.status(), PromiseStatus::Pending);
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    // The query may reach the old mailbox before or after the restart: either way it is stale.
    assert!(wait_until(Duration::from_secs(10), || {
        domain.frame(FRAME);
        domain.stale_events() == 1
    }));
    assert_eq!(queries.load(Ordering::SeqCst), 0);
    assert_contains(
        &rejection(parked.wait()).to_string(),
        "ended with its domain's generation: domain 'test' restarted",
    );
}

#[test]
fn a_shared_table_handle_of_the_old_generation_raises_naming_the_restart() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (mut domain, _, _) = setup(&tree, &pool);
    let old = domain.shared().table("scores").unwrap();
    old.set("a", Message::Integer(1)).unwrap();
    let queue = domain.shared().queue("work", 4).unwrap();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_contains(
        &old.get("a").unwrap_err().to_string(),
        "domain 'test' restarted",
    );
    assert_contains(
        &old.set("a", Message::Integer(2)).unwrap_err().to_string(),
        "domain 'test' restarted",
    );
    assert_contains(
        &queue.push(Message::Integer(1)).unwrap_err().to_string(),
        "domain 'test' restarted",
    );
    // The new generation's store is fresh, from Rust and from Luau.
    let fresh = domain.shared().table("scores").unwrap();
    assert_eq!(fresh.get("a").unwrap(), None);
    let read = domain
        .eval(r#"return jobs.shared.table("scores").a"#)
        .unwrap();
    assert_eq!(read, Message::Nil);
}

#[test]
fn a_key_binding_ends_with_its_generation_and_the_new_one_starts_fresh() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (mut domain, _, _) = setup(&tree, &pool);
    let opts = JobOptions::new().key("k");
    let bump = |d: &ScriptDomain| {
        d.dispatch_with("./m", "bump", Message::Nil, &opts)
            .unwrap()
            .wait()
            .unwrap()
    };
    assert_eq!(bump(&domain), Message::Number(1.0));
    assert_eq!(bump(&domain), Message::Number(2.0));
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    // The key's VM was the old generation's: its module state is gone.
    assert_eq!(bump(&domain), Message::Number(1.0));
    let from_luau = domain
        .eval(r#"return jobs.dispatch("./m", "bump", nil, { key = "k" }):await()"#)
        .unwrap();
    assert_eq!(from_luau, Message::Number(2.0));
    // The old generation's binding no longer exists to release.
    assert!(domain.release("k").unwrap());
    assert!(!domain.release("k").unwrap());
}

#[test]
fn the_new_generation_runs_dispatch_and_engine_services() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (mut domain, world, queries) = setup(&tree, &pool);
    domain.exec("old = true").unwrap();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(domain.eval("return old").unwrap(), Message::Nil);
    world.borrow_mut().insert(1, string("one"));
    // The services are the host's: the engine VM calls them directly, workers forward.
    assert_eq!(text(&domain.eval("return world.get(1)").unwrap()), "one");
    let answer = domain
        .eval(r#"return jobs.dispatch("./m", "setThenGet", { id = 2, v = 20 }):await()"#)
        .unwrap();
    assert_eq!(number(&answer), 20.0);
    assert_eq!(number(&world.borrow()[&2]), 20.0);
    let args = map(&[("id", Message::Integer(3)), ("v", string("three"))]);
    assert_eq!(
        text(
            &domain
                .dispatch("./m", "set", args)
                .unwrap()
                .unwrap_wait(&domain)
        ),
        "set"
    );
    assert_eq!(text(&world.borrow()[&3]), "three");
    assert_eq!(queries.load(Ordering::SeqCst), 2);
    assert_eq!(domain.stale_events(), 0);
    // The names carried over: registering one again is refused, a new one is installed.
    let again = domain.register_query("world.get", |()| Ok(Message::Nil));
    assert_contains(&again.unwrap_err().to_string(), "registered already");
    domain
        .register_query("world.size", |()| Ok(Message::Integer(7)))
        .unwrap();
    let size = domain.eval("return world.size()").unwrap();
    assert_eq!(size, Message::Integer(7));
}

/// Waits for a host promise while running frames, so its commands apply.
trait WaitWithFrames {
    fn unwrap_wait(self, domain: &ScriptDomain) -> Message;
}

impl WaitWithFrames for skein::Promise {
    fn unwrap_wait(mut self, domain: &ScriptDomain) -> Message {
        let mut settled = None;
        // A hang guard, not a performance claim.
        let done = wait_until(Duration::from_secs(10), || {
            domain.frame(FRAME);
            settled = self.wait_timeout(Duration::from_millis(5));
            settled.is_some()
        });
        assert!(done, "the promise did not settle within 10 s");
        settled.expect("settled once done").unwrap()
    }
}

#[test]
fn a_domain_restarts_twice_and_its_frame_counter_carries_on() {
    let (tree, pool) = (tree(), Pool::new(2));
    let (mut domain, world, _) = setup(&tree, &pool);
    let id = domain.id();
    for generation in 2..=3 {
        domain.frame(FRAME);
        let frames = domain.frames();
        assert_eq!(
            domain
                .restart(skein::lifecycle::Load::Nothing)
                .unwrap()
                .get(),
            generation
        );
        assert_eq!(domain.principal().generation.get(), generation);
        assert_eq!(domain.id(), id);
        assert!(domain.frames() >= frames);
        let report = domain.frame(FRAME);
        assert_eq!(report.frame, frames + 1);
        let src = format!(
            r#"return jobs.dispatch("./m", "setThenGet", {{ id = {generation}, v = "g" }}):await()"#
        );
        assert_eq!(text(&domain.eval(&src).unwrap()), "g");
    }
    assert_eq!(world.borrow().len(), 2);
    assert_eq!(domain.stale_events(), 0);
}

/// Counts its drops, so a test can see the engine VM that held it close.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_old_engine_vm_is_dropped_with_the_tasks_that_awaited_its_promises() {
    let (tree, pool) = (tree(), Pool::new(1));
    let (mut domain, world, _) = setup(&tree, &pool);
    let drops = Arc::new(AtomicUsize::new(0));
    let held = domain
        .lua()
        .create_any_userdata(DropCount(drops.clone()))
        .unwrap();
    domain.lua().globals().set("held", held).unwrap();
    domain
        .exec(
            r#"
            local keep = held
            held = nil
            jobs.dispatch("./m", "slowSet", { id = 1, v = "x", frames = 1 }):await()
            assert(keep)
            world.set(100, "resumed")
            "#,
        )
        .unwrap();
    assert_eq!(domain.tasks(), 1);
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(domain.tasks(), 0);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the old engine VM closed");
    // The job that task awaited ends with its worker VM, and frames run after it.
    settle_ended(&pool, &domain);
    assert!(world.borrow().is_empty(), "the awaiting task never resumed");
}

#[test]
fn a_worker_gone_mid_forward_leaves_the_engine_answering_into_nothing() {
    let (tree, pool) = (tree(), Pool::new(1));
    let marks = Marks::default();
    let (domain, world, queries) = setup_marked(&tree, &pool, &marks);
    world.borrow_mut().insert(1, string("one"));
    let args = map(&[("id", Message::Integer(1))]);
    let parked = domain.dispatch("./m", "get", args.clone()).unwrap();
    // One worker: the marker runs only once the asking job has posted its query and parked.
    let marker = domain.dispatch("./m", "mark", Message::Nil).unwrap();
    assert_eq!(marker.wait().unwrap(), Message::Nil);
    assert_eq!(marks.count(), 2);
    assert_eq!(parked.status(), PromiseStatus::Pending);
    // The asking task is cancelled while its query waits on the engine thread. The cancel is
    // in the worker's inbox before the answer the frame below posts there, so the worker
    // drops the task before the answer arrives.
    assert!(parked.cancel());
    assert_eq!(parked.status(), PromiseStatus::Cancelled);
    // The engine answers it: the reply finds no task, and nothing waits for it.
    let started = std::time::Instant::now();
    let report = domain.frame(FRAME);
    // A hang guard (the frame must not wait on the cancelled task), not a performance claim.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(report.forwarded_calls, 1);
    assert_eq!(queries.load(Ordering::SeqCst), 1);
    // The domain and the worker go on.
    let next = domain.dispatch("./m", "get", args).unwrap();
    assert_eq!(text(&next.unwrap_wait(&domain)), "one");
    assert!(domain.take_reports().is_empty());
}

#[test]
fn a_stop_answers_host_promises_whose_work_it_drops() {
    let (tree, pool) = (tree(), Pool::new(1));
    let marks = Marks::default();
    let (domain, world, _) = setup_marked(&tree, &pool, &marks);
    let opts = JobOptions::new().key("k");
    let slow = map(&[
        ("id", Message::Integer(1)),
        ("v", string("old")),
        ("frames", Message::Number(1.0)),
    ]);
    let keyed = domain
        .dispatch_with("./m", "markedSlowSet", slow, &opts)
        .unwrap();
    // Queued behind it in the key's lane, which the stop forgets.
    let behind = domain
        .dispatch_with("./m", "bump", Message::Nil, &opts)
        .unwrap();
    let napping = domain.dispatch("./m", "nap", Message::Number(1.0)).unwrap();
    // Both are parked in the worker's VM, on a frame that never comes.
    assert!(wait_until(Duration::from_secs(10), || marks.count() == 2));
    drop(domain);
    assert_eq!(
        rejection(behind.wait()).to_string(),
        "job './m:bump' was refused unrun: domain 'test' stopped"
    );
    // Jobs parked in the dropped worker VM fail when the worker drops it, instead of hanging.
    let failure = rejection(keyed.wait());
    assert_eq!(
        failure.to_string(),
        "job './m:markedSlowSet' was refused unrun: its engine-service commands were not \
         applied: domain 'test' stopped"
    );
    assert_eq!(
        rejection(napping.wait()).to_string(),
        "job './m:nap' failed: domain 'test' stopped"
    );
    assert!(world.borrow().is_empty());
}

#[test]
fn a_restart_ends_registered_jobs_and_keeps_the_hosts_kernels() {
    let tree = Tree::new(&[("m.luau", MODULE)]);
    let pool = Pool::new(1);
    let (mut domain, _world, _queries) = setup(&tree, &pool);
    domain
        .register_kernel("twice", |m| match m {
            Message::Number(n) => Ok(Message::Number(n * 2.0)),
            other => Err(format!("expected a number, got {other:?}")),
        })
        .unwrap();
    domain
        .exec(r#"ticks = 0 jobs.register({ name = "tick", phase = "main", executor = { kind = "luau", run = function() ticks += 1 end } })"#)
        .unwrap();
    domain.frame(FRAME);
    assert_eq!(domain.eval("return ticks").unwrap(), Message::Number(1.0));
    assert_eq!(domain.jobs().len(), 1);

    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert!(
        domain.jobs().is_empty(),
        "the old generation's jobs are gone"
    );
    domain.frame(FRAME);
    assert_eq!(
        domain.eval("return jobs.find('tick')").unwrap(),
        Message::Nil
    );
    // The name is free again, and the host's kernel is still there for the new generation.
    domain
        .exec(r#"got = nil jobs.register({ name = "tick", phase = "main", executor = { kind = "kernel", kernel = "twice", input = function() return 21 end, apply = function(r) got = r end } })"#)
        .unwrap();
    let landed = wait_until(Duration::from_secs(10), || {
        domain.frame(FRAME);
        domain.eval("return got").unwrap() != Message::Nil
    });
    assert!(landed, "the kernel's result never reached apply");
    assert_eq!(number(&domain.eval("return got").unwrap()), 42.0);
}

#[test]
fn owned_resources_end_with_the_generation_that_took_them_newest_first() {
    let pool = Pool::new(1);
    let mut domain = ScriptDomain::new(&pool, skein::DomainSpec::new("own")).unwrap();
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let take = |d: &ScriptDomain, name: &'static str| {
        let log = log.clone();
        d.own(name, move || log.borrow_mut().push(name))
    };
    let socket = take(&domain, "socket");
    let texture = take(&domain, "texture");
    let sound = take(&domain, "sound");
    // Released by id, once.
    assert!(domain.release_resource(texture));
    assert!(!domain.release_resource(texture));
    assert_eq!(*log.borrow(), ["texture"]);
    let kinds: Vec<String> = domain
        .owned_resources()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(kinds, ["socket", "sound"]);

    // A restart releases what the old generation owns, newest first; a panicking release is
    // reported and the others still run.
    domain.own("broken", || panic!("driver gone"));
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    assert_eq!(*log.borrow(), ["texture", "sound", "socket"]);
    let reports = domain.take_reports();
    assert!(
        reports
            .iter()
            .any(|r| r.message.contains("(broken) panicked: driver gone")),
        "{reports:?}"
    );
    assert!(domain.owned_resources().is_empty());
    assert!(!domain.release_resource(socket) && !domain.release_resource(sound));

    // What the new generation takes lasts until the stop.
    take(&domain, "level");
    assert_eq!(domain.owned_resources().len(), 1);
    domain.stop();
    assert_eq!(log.borrow().last(), Some(&"level"));
    assert!(domain.owned_resources().is_empty());
}

#[test]
fn a_completion_posted_for_an_older_generation_is_discarded_and_counted() {
    let pool = Pool::new(1);
    let mut domain = ScriptDomain::new(&pool, skein::DomainSpec::new("late")).unwrap();
    let asked = domain.generation();
    let mailbox = domain.mailbox();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    let before = domain.stale_events();
    mailbox
        .post_for(asked, skein::event::EventTarget::All, Message::Integer(1))
        .unwrap();
    domain
        .mailbox()
        .post_for(asked, skein::event::EventTarget::All, Message::Integer(2))
        .unwrap();
    assert_eq!(domain.pending_events(), 0);
    domain.drain_events();
    assert_eq!(domain.stale_events(), before + 2);
}

#[test]
fn a_sleeping_worker_drops_the_vms_of_an_ended_generation_and_of_a_dropped_domain_at_once() {
    let (tree, pool) = (tree(), Pool::new(1));
    let marks = Marks::default();
    let (mut domain, _world, _) = setup_marked(&tree, &pool, &marks);
    let ran = |domain: &ScriptDomain| {
        let marker = domain.dispatch("./m", "mark", Message::Nil).unwrap();
        assert_eq!(marker.wait().unwrap(), Message::Nil);
        assert_eq!(vms_held(&pool), 1, "the job's VM is kept for the next");
        // Long enough for the worker to make its spare state and fall asleep.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(vms_held(&pool), 1, "nothing ended: the VM stays");
    };
    ran(&domain);
    domain
        .restart(skein::lifecycle::Load::Nothing)
        .expect("restart");
    // No item comes: only the generation's end reaches the sleeping worker.
    assert!(
        wait_until(Duration::from_secs(2), || vms_held(&pool) == 0),
        "the old generation's VM outlived it: {:?}",
        pool.stats()
    );
    ran(&domain);
    drop(domain);
    assert!(
        wait_until(Duration::from_secs(2), || vms_held(&pool) == 0),
        "the dropped domain's VM outlived it: {:?}",
        pool.stats()
    );
}
