//! Keyed dispatch from Rust (`ScriptDomain::dispatch_with`, `ScriptDomain::release`): the same
//! lanes as `opts.key` in Luau, the same rules, refusals that name the option and queue nothing.

use std::time::Duration;

use skein::job::JobOptions;
use skein::refusal::DispatchRefusal;
use skein::{Error, Message, Pool, ScriptDomain};

use crate::support::{assert_contains, field, text, wait_until, Tree};

const MODULE: &str = r#"
local lists = {}
return {
    append = function(x)
        local c = jobs.context()
        lists[c.key] = (lists[c.key] or "") .. tostring(x)
        return { list = lists[c.key], worker = c.worker, fresh = c.fresh }
    end,
    -- Says it started on the shared queue "started", then holds its key's turn until the test
    -- pushes to "gate".
    slow = function(x)
        jobs.shared.queue("started"):push(x)
        jobs.shared.queue("gate"):pop()
        return x
    end,
}
"#;

fn setup(workers: usize) -> (Tree, Pool) {
    (Tree::new(&[("m.luau", MODULE)]), Pool::new(workers))
}

fn append(domain: &ScriptDomain, key: &str, x: i64) -> skein::Promise<Message> {
    domain
        .dispatch_with(
            "./m",
            "append",
            Message::Integer(x),
            &JobOptions::new().key(key),
        )
        .unwrap()
}

fn keys_held(pool: &Pool) -> usize {
    pool.stats().iter().map(|s| s.keys_held).sum()
}

#[test]
fn host_and_luau_items_of_one_key_share_its_vm_in_dispatch_order() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let first = append(&domain, "h", 1);
    let from_luau = domain
        .eval(r#"return jobs.dispatch("./m", "append", 2, { key = "h" }):await()"#)
        .unwrap();
    let third = append(&domain, "h", 3).wait().unwrap();
    let first = first.wait().unwrap();
    assert_eq!(text(field(&first, "list")), "1");
    assert_eq!(field(&first, "fresh"), &Message::Boolean(true));
    assert_eq!(text(field(&from_luau, "list")), "12");
    assert_eq!(text(field(&third, "list")), "123");
    assert_eq!(field(&third, "fresh"), &Message::Boolean(false));
    assert_eq!(field(&first, "worker"), field(&third, "worker"));
    assert_eq!(keys_held(&pool), 1);
}

#[test]
fn release_answers_whether_the_pool_held_the_key_and_the_next_item_is_fresh() {
    // One worker, so the key binds to the same VM again.
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    append(&domain, "r", 1).wait().unwrap();
    assert!(domain.release("r").unwrap());
    // The item's promise settles just before its lane turn ends, and the release waits for that
    // turn: the binding goes a moment after the call.
    assert!(
        wait_until(Duration::from_secs(10), || keys_held(&pool) == 0),
        "{:?}",
        pool.stats()
    );
    assert!(!domain.release("r").unwrap());
    assert!(!domain.release("never bound").unwrap());
    let again = append(&domain, "r", 2).wait().unwrap();
    assert_eq!(field(&again, "fresh"), &Message::Boolean(true));
    // The binding ended, the VM did not: its module state is still there.
    assert_eq!(text(field(&again, "list")), "12");
}

#[test]
fn supersede_from_rust_rejects_the_queued_items_naming_the_superseding_one() {
    let (tree, pool) = setup(2);
    let domain = tree.domain(&pool);
    let started = domain.shared().queue("started", 8).unwrap();
    let gate = domain.shared().queue("gate", 8).unwrap();
    let slow = |x: &str, name: &str, supersede: bool| {
        let opts = JobOptions::new().key("s").name(name).supersede(supersede);
        domain
            .dispatch_with(
                "./m",
                "slow",
                Message::String(bytes::Bytes::copy_from_slice(x.as_bytes())),
                &opts,
            )
            .unwrap()
    };
    let running = slow("first", "first", false);
    // The first item runs, and holds the key's turn until the test pushes to "gate".
    let first = started.pop_blocking(Duration::from_secs(10)).unwrap();
    assert_eq!(first.as_ref().map(text), Some("first".to_owned()));
    let mut queued = slow("queued", "queued", false);
    let latest = slow("latest", "latest", true);
    // A hang guard: an item not superseded would wait on "gate".
    let err = queued
        .wait_timeout(Duration::from_secs(10))
        .expect("the queued item was not refused")
        .unwrap_err();
    assert!(matches!(err, Error::Job(_)), "{err:?}");
    assert_contains(
        &err.to_string(),
        "job 'queued' was refused unrun: superseded by job 'latest'",
    );
    for _ in 0..2 {
        gate.push(Message::Boolean(true)).unwrap();
    }
    assert_eq!(text(&running.wait().unwrap()), "first");
    assert_eq!(text(&latest.wait().unwrap()), "latest");
}

#[test]
fn bad_options_are_refused_naming_the_rule_and_queue_nothing() {
    let (tree, pool) = setup(1);
    let domain = tree.domain(&pool);
    let cases: [(JobOptions, DispatchRefusal, &str); 5] = [
        (
            JobOptions::new().key(""),
            DispatchRefusal::Key,
            "dispatch: key must be 1 to 256 bytes, got 0 bytes",
        ),
        (
            JobOptions::new().key("k".repeat(257)),
            DispatchRefusal::Key,
            "dispatch: key must be 1 to 256 bytes, got 257 bytes",
        ),
        (
            JobOptions::new().supersede(true),
            DispatchRefusal::Supersede,
            "dispatch: supersede needs a key: only the items of a key can be superseded",
        ),
        (
            JobOptions::new().key("k").deadline(Duration::ZERO),
            DispatchRefusal::Deadline,
            "dispatch: deadline must be above 0",
        ),
        (
            JobOptions::new().key("k").deadline(Duration::from_secs(61)),
            DispatchRefusal::Deadline,
            "dispatch: deadline of 61 s is past the cap of 60 s",
        ),
    ];
    for (opts, rule, expected) in cases {
        let err = domain
            .dispatch_with("./m", "append", Message::Integer(0), &opts)
            .unwrap_err();
        assert!(
            matches!(err, Error::Dispatch { refusal, .. } if refusal == rule),
            "{err:?}"
        );
        assert_contains(&err.to_string(), expected);
        assert_eq!(keys_held(&pool), 0, "after {expected}");
    }
    let err = domain.release("").unwrap_err();
    assert!(
        matches!(
            err,
            Error::Dispatch {
                refusal: DispatchRefusal::Key,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "release: key must be 1 to 256 bytes, got 0 bytes"
    );
    // A key of exactly 256 bytes is a key; nothing refused above ran.
    let key = "k".repeat(256);
    let done = append(&domain, &key, 7).wait().unwrap();
    assert_eq!(text(field(&done, "list")), "7");
    assert_eq!(pool.stats()[0].items_run, 1);
}

#[test]
fn the_key_bound_holds_for_rust_dispatches_too() {
    let tree = Tree::new(&[("m.luau", "return { nop = function() end }")]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    let nop =
        |key: &str| domain.dispatch_with("./m", "nop", Message::Nil, &JobOptions::new().key(key));
    let promises: Vec<_> = (0..65_536).map(|i| nop(&i.to_string()).unwrap()).collect();
    for p in promises {
        p.wait().unwrap();
    }
    assert_eq!(keys_held(&pool), 65_536);
    let err = nop("one too many").unwrap_err();
    assert_contains(
        &err.to_string(),
        "dispatch: key: the pool holds at most 65536 keys at once",
    );
    assert_eq!(keys_held(&pool), 65_536);
    // A held key still takes items; a released one makes room.
    nop("65535").unwrap().wait().unwrap();
    assert!(domain.release("0").unwrap());
    nop("one too many").unwrap().wait().unwrap();
    assert_eq!(keys_held(&pool), 65_536);
}
