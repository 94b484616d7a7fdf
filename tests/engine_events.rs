//! Engine events: `ScriptDomain::raise_engine_event` and `engine.on` watchers in worker VMs
//! (delivered when the VM starts its next item) and in the engine VM (delivered at its next
//! frame), with the name bounds and the log's ring bound.

use std::time::Duration;

use skein::job::JobOptions;
use skein::refusal::NameRefusal;
use skein::{DomainSpec, Error, Message, Pool, ScriptDomain};

const EVENT_LOG_BOUND: usize = DomainSpec::EVENT_LOG_BOUND;

use crate::support::{assert_contains, field, list, map, number, refusal, string, text, Tree};

const WATCHER: &str = r#"
local seen = {}
local removers = {}
local M = {}
-- Watches `a.name` as watcher `a.id`, recording "id:name:payload".
function M.watch(a)
    removers[tostring(a.id)] = engine.on(a.name, function(p)
        table.insert(seen, `{a.id}:{a.name}:{p}`)
    end)
    return true
end
-- Watches `name`, recording the payloads themselves.
function M.watchRaw(name)
    engine.on(name, function(p) table.insert(seen, p) end)
    return true
end
function M.unwatch(id)
    removers[tostring(id)]()
    removers[tostring(id)] = nil
    return true
end
function M.boom(name)
    engine.on(name, function(p) error(`watcher blew up on {p}`) end)
    return true
end
-- What the watchers saw before this item's entry ran; starts over.
function M.seen()
    local s = seen
    seen = {}
    return s
end
function M.summary()
    local s = seen
    seen = {}
    return { n = #s, first = s[1], last = s[#s] }
end
return M
"#;

fn tree() -> Tree {
    Tree::new(&[("w.luau", WATCHER)])
}

/// Runs `entry(args)` in the VM of key "k" and answers its result.
fn keyed(domain: &ScriptDomain, entry: &str, args: Message) -> Message {
    domain
        .dispatch_with("./w", entry, args, &JobOptions::new().key("k"))
        .unwrap()
        .wait()
        .unwrap()
}

fn watch(domain: &ScriptDomain, id: i64, name: &str) {
    let args = map(&[("id", Message::Integer(id)), ("name", string(name))]);
    assert_eq!(keyed(domain, "watch", args), Message::Boolean(true));
}

fn seen(domain: &ScriptDomain) -> Vec<String> {
    items(&keyed(domain, "seen", Message::Nil))
        .iter()
        .map(text)
        .collect()
}

/// The items of a list; an empty Luau table crosses as an empty map.
#[track_caller]
fn items(m: &Message) -> Vec<Message> {
    match m {
        Message::Map(entries) if entries.is_empty() => Vec::new(),
        other => list(other).to_vec(),
    }
}

#[test]
fn a_keyed_item_sees_an_event_raised_since_its_watcher_registered() {
    let (tree, pool) = (tree(), Pool::new(2));
    let domain = tree.domain(&pool);
    watch(&domain, 1, "hit");
    domain
        .raise_engine_event("hit", Message::Integer(5))
        .unwrap();
    assert_eq!(seen(&domain), ["1:hit:5"]);
    // Each event is delivered once.
    assert!(seen(&domain).is_empty());
}

#[test]
fn events_raised_before_a_watcher_registered_are_not_delivered_to_it() {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    assert!(seen(&domain).is_empty()); // the key's VM exists before the first event
    domain
        .raise_engine_event("hit", Message::Integer(1))
        .unwrap();
    watch(&domain, 1, "hit");
    domain
        .raise_engine_event("hit", Message::Integer(2))
        .unwrap();
    assert_eq!(seen(&domain), ["1:hit:2"]);
    // A VM built after an event was raised does not see it either.
    domain
        .raise_engine_event("late", Message::Integer(3))
        .unwrap();
    let other = JobOptions::new().key("other");
    let args = map(&[("id", Message::Integer(2)), ("name", string("late"))]);
    let run = |entry: &str, args: Message| {
        domain
            .dispatch_with("./w", entry, args, &other)
            .unwrap()
            .wait()
            .unwrap()
    };
    assert_eq!(run("watch", args), Message::Boolean(true));
    let fresh = run("seen", Message::Nil);
    assert!(items(&fresh).is_empty(), "{fresh:?}");
}

#[test]
fn watchers_fire_in_raise_order_then_registration_order() {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    watch(&domain, 1, "a");
    watch(&domain, 2, "b");
    watch(&domain, 3, "a");
    for (name, p) in [("a", 1), ("b", 2), ("a", 3), ("c", 4)] {
        domain
            .raise_engine_event(name, Message::Integer(p))
            .unwrap();
    }
    assert_eq!(seen(&domain), ["1:a:1", "3:a:1", "2:b:2", "1:a:3", "3:a:3"]);
}

#[test]
fn a_removed_watcher_sees_nothing_more() {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    watch(&domain, 1, "hit");
    watch(&domain, 2, "hit");
    assert_eq!(
        keyed(&domain, "unwatch", Message::Integer(1)),
        Message::Boolean(true)
    );
    domain
        .raise_engine_event("hit", Message::Integer(7))
        .unwrap();
    assert_eq!(seen(&domain), ["2:hit:7"]);
    assert_eq!(
        keyed(&domain, "unwatch", Message::Integer(2)),
        Message::Boolean(true)
    );
    domain
        .raise_engine_event("hit", Message::Integer(8))
        .unwrap();
    assert!(seen(&domain).is_empty());
}

#[test]
fn a_watcher_that_raises_is_reported_and_the_item_runs() {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    assert_eq!(
        keyed(&domain, "boom", string("bad")),
        Message::Boolean(true)
    );
    watch(&domain, 1, "bad");
    domain
        .raise_engine_event("bad", Message::Integer(7))
        .unwrap();
    // The failing watcher does not stop the other watcher nor the item.
    assert_eq!(seen(&domain), ["1:bad:7"]);
    // The worker posted the report to the domain's mailbox before the item ran, so before it
    // answered: the next frame's drain holds it.
    domain.frame(Duration::from_millis(16));
    let reports = domain.take_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "engine event 'bad' watcher");
    assert_contains(&reports[0].message, "watcher blew up on 7");
}

#[test]
fn event_names_are_1_to_256_bytes() {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    let refused = |name: &str| match domain.raise_engine_event(name, Message::Nil) {
        Err(Error::Name {
            refusal: NameRefusal::EventName,
            message,
        }) => message,
        other => panic!("expected an event name refusal, got {other:?}"),
    };
    assert_eq!(
        refused(""),
        "raise_engine_event: event name must be 1 to 256 bytes, got 0"
    );
    assert_eq!(
        refused(&"e".repeat(257)),
        "raise_engine_event: event name must be 1 to 256 bytes, got 257"
    );
    domain.raise_engine_event("e", Message::Nil).unwrap();
    domain
        .raise_engine_event(&"e".repeat(256), Message::Nil)
        .unwrap();
    let e = refusal(&domain, "engine.on('', function() end)");
    assert_contains(&e, "engine.on: event name must be 1 to 256 bytes, got 0");
    let e = refusal(&domain, "engine.on(string.rep('e', 257), function() end)");
    assert_contains(&e, "engine.on: event name must be 1 to 256 bytes, got 257");
    let e = refusal(&domain, "engine.on('e', 5)");
    assert_contains(&e, "engine.on: watcher must be a function, got a number");
    let both = domain
        .eval(
            r#"
            local got = {}
            engine.on("e", function() table.insert(got, 1) end)
            engine.on(string.rep("e", 256), function() table.insert(got, 256) end)
            return got
            "#,
        )
        .unwrap();
    assert!(items(&both).is_empty());
    domain.raise_engine_event("e", Message::Nil).unwrap();
    domain
        .raise_engine_event(&"e".repeat(256), Message::Nil)
        .unwrap();
}

/// Raises `n` events named "tick" with payloads 1..=n, with no item in between, then answers
/// what the key's watcher saw and the reports.
fn burst(n: usize) -> (Message, Vec<skein::Report>) {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    assert_eq!(
        keyed(&domain, "watchRaw", string("tick")),
        Message::Boolean(true)
    );
    for i in 1..=n {
        domain
            .raise_engine_event("tick", Message::Integer(i as i64))
            .unwrap();
    }
    let summary = keyed(&domain, "summary", Message::Nil);
    // A report of missed events is posted to the domain's mailbox as the VM delivers, before
    // the item runs and answers: the next frame's drain holds every report there is.
    domain.frame(Duration::from_millis(16));
    (summary, domain.take_reports())
}

#[test]
fn the_log_holds_the_last_bound_events_and_a_vm_behind_reports_what_it_missed() {
    assert_eq!(EVENT_LOG_BOUND, 4096);
    let (at, reports) = burst(EVENT_LOG_BOUND);
    assert_eq!(number(field(&at, "n")), 4096.0);
    assert_eq!(number(field(&at, "first")), 1.0);
    assert_eq!(number(field(&at, "last")), 4096.0);
    assert!(reports.is_empty(), "{reports:?}");
    let (past, reports) = burst(EVENT_LOG_BOUND + 1);
    assert_eq!(number(field(&past, "n")), 4096.0);
    assert_eq!(number(field(&past, "first")), 2.0);
    assert_eq!(number(field(&past, "last")), 4097.0);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].source, "engine events");
    assert_eq!(
        reports[0].message,
        "1 engine events were dropped from the log before this VM could deliver them \
         (the log holds the last 4096)"
    );
}

#[test]
fn the_engine_vm_delivers_at_its_next_frame_as_fresh_values() {
    let (tree, pool) = (tree(), Pool::new(1));
    let domain = tree.domain(&pool);
    domain
        .exec(
            r#"
            got = {}
            engine.on("moved", function(p)
                table.insert(got, p.x)
                p.x = 99 -- its own copy: the next watcher sees the value raised
            end)
            engine.on("moved", function(p) table.insert(got, p.x) end)
            "#,
        )
        .unwrap();
    let payload = map(&[("x", Message::Integer(3))]);
    domain.raise_engine_event("moved", payload).unwrap();
    let got = || domain.lua().load("return #got").eval::<i64>().unwrap();
    assert_eq!(got(), 0, "nothing is delivered before the frame");
    domain.frame(Duration::from_millis(16));
    assert_eq!(got(), 2);
    let values = domain.eval("return got").unwrap();
    assert_eq!(
        values,
        Message::List(vec![Message::Integer(3), Message::Integer(3)])
    );
}

#[test]
fn a_restart_empties_the_log_and_drops_the_old_watchers() {
    let (tree, pool) = (tree(), Pool::new(1));
    let mut domain = tree.domain(&pool);
    watch(&domain, 1, "hit");
    domain
        .exec("engine.on('hit', function(p) print('old watcher', p) end)")
        .unwrap();
    domain
        .raise_engine_event("hit", Message::Integer(1))
        .unwrap();
    domain.restart(skein::lifecycle::Load::Nothing).unwrap();
    domain
        .exec("got = {} engine.on('hit', function(p) table.insert(got, p) end)")
        .unwrap();
    watch(&domain, 2, "hit");
    domain
        .raise_engine_event("hit", Message::Integer(2))
        .unwrap();
    // Only the new generation's watchers, and only the new generation's event.
    assert_eq!(seen(&domain), ["2:hit:2"]);
    domain.frame(Duration::from_millis(16));
    let got = domain.eval("return got").unwrap();
    let got: Vec<f64> = list(&got).iter().map(number).collect();
    assert_eq!(got, [2.0]);
}
