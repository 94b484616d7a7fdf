//! Typed values: every scalar form crosses every path (a service's argument and
//! answer, in the engine VM and forwarded from a worker; a shared table and queue; a promise;
//! `eval`)
//! and comes back as it went, and typed services read their arguments by position, naming a
//! mismatch.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use skein::message::Args;
use skein::{FromMessage, IntoMessage, MapKey, Message, Plan, Pool, ScriptDomain};

use crate::support::{assert_contains, Tree};

const ECHO: &str = "return { \
    echo = function(x) return x end, \
    viaServices = function() local v = host.value() host.take(v) return v end, \
    viaTable = function() local t = jobs.shared.table('paths') t.copied = t.given return true end, \
}";

/// Every scalar form a `Message` has, the bounds of each number form among them.
fn scalars() -> Vec<Message> {
    vec![
        Message::Nil,
        Message::Boolean(true),
        Message::Boolean(false),
        Message::Integer(0),
        Message::Integer(2),
        Message::Integer(-7),
        Message::Integer((1 << 60) + 1),
        Message::Integer(i64::MIN),
        Message::Integer(i64::MAX),
        Message::Number(0.0),
        Message::Number(-0.0),
        Message::Number(2.0),
        Message::Number(0.5),
        Message::Number(2f64.powi(53)),
        Message::Number(2f64.powi(53) + 2.0),
        Message::Number(-2f64.powi(63)),
        Message::Number(f64::INFINITY),
        Message::Number(f64::NEG_INFINITY),
        Message::Number(f64::NAN),
        Message::Number(f64::MIN_POSITIVE / 2.0),
        Message::from("two"),
        Message::from(""),
        Message::from(&b"nul\0 and \xff"[..]),
        Message::Vector([1.0, -0.0, f32::MAX]),
        Message::buffer(Vec::new()),
        Message::buffer(vec![0, 1, 255]),
    ]
}

/// A domain with `host.value()` (answers the value under test) and `host.take(v)` (keeps it).
struct Paths {
    domain: ScriptDomain,
    value: Rc<RefCell<Message>>,
    taken: Rc<RefCell<Vec<Message>>>,
    _tree: Tree,
    _pool: Pool,
}

fn paths() -> Paths {
    let tree = Tree::new(&[("echo.luau", ECHO)]);
    let pool = Pool::new(2);
    let domain = tree.domain(&pool);
    let value = Rc::new(RefCell::new(Message::Nil));
    let taken = Rc::new(RefCell::new(Vec::new()));
    let v = value.clone();
    domain
        .register_query("host.value", move |()| Ok(v.borrow().clone()))
        .unwrap();
    let t = taken.clone();
    domain
        .register_command("host.take", move |v: Message| {
            t.borrow_mut().push(v);
            Ok(())
        })
        .unwrap();
    Paths {
        domain,
        value,
        taken,
        _tree: tree,
        _pool: pool,
    }
}

impl Paths {
    /// Sends `sent` through every path, asserting each gives it back.
    fn round_trip(&self, sent: &Message) {
        let d = &self.domain;
        *self.value.borrow_mut() = sent.clone();
        // Promise: host → worker entry → host.
        let back = d.dispatch("./echo", "echo", sent.clone()).unwrap().wait();
        assert_eq!(back.unwrap(), *sent, "promise");
        // Service answer → eval's result, and the same value as a service argument.
        assert_eq!(d.eval("return host.value()").unwrap(), *sent, "eval");
        d.eval("host.take(host.value())").unwrap();
        assert_eq!(self.took(), *sent, "service argument in the engine VM");
        // Forwarded from a worker: a query's answer, a recorded command's argument, a result.
        // The engine thread answers the query, so the job is awaited from Luau, not blocked on.
        let back = d.eval("return jobs.dispatch('./echo', 'viaServices', nil):await()");
        assert_eq!(back.unwrap(), *sent, "worker's result");
        assert_eq!(self.took(), *sent, "service argument from a worker");
        // Shared table: host → engine VM → host, and host → worker → host.
        let table = d.shared().table("paths").unwrap();
        table.set("given", sent.clone()).unwrap();
        d.eval("local t = jobs.shared.table('paths') t.copied = t.given")
            .unwrap();
        assert_eq!(table_value(&table), *sent, "shared table, engine VM");
        table.set("copied", Message::Nil).unwrap();
        d.dispatch("./echo", "viaTable", Message::Nil)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(table_value(&table), *sent, "shared table, worker");
        // Shared queue: host → engine VM → host (a queue holds no nil).
        if !sent.is_nil() {
            let queue = d.shared().queue("paths.q", 4).unwrap();
            queue.push(sent.clone()).unwrap();
            d.eval("local q = jobs.shared.queue('paths.q') q:push(q:tryPop())")
                .unwrap();
            assert_eq!(queue.try_pop().unwrap(), Some(sent.clone()), "shared queue");
        }
        // A nested table reads as a handle on the shared one: a snapshot copies it out.
        assert_eq!(
            d.eval("return jobs.shared.snapshot(jobs.shared.table('paths')).given")
                .unwrap(),
            *sent,
            "shared table read by eval"
        );
    }

    fn took(&self) -> Message {
        let mut taken = self.taken.borrow_mut();
        assert_eq!(taken.len(), 1, "one call");
        taken.remove(0)
    }
}

fn table_value(table: &skein::shared::SharedTableRef) -> Message {
    table.get("copied").unwrap().unwrap_or(Message::Nil)
}

#[test]
fn every_scalar_form_comes_back_as_it_went_through_every_path() {
    let p = paths();
    for scalar in scalars() {
        p.round_trip(&scalar);
        if !scalar.is_nil() {
            // Nested, in a list and in a map, as well as at the top level.
            p.round_trip(&Message::List(vec![scalar.clone(), Message::Boolean(true)]));
            p.round_trip(&Message::Map(vec![
                (MapKey::from("v"), scalar.clone()),
                (MapKey::Integer(3), Message::from(1)),
            ]));
        }
    }
}

/// A Rust value made a `Message` (by the rule for whole numbers) goes into Luau and comes back
/// as the Rust value it was; Luau sees a number wherever a number holds it exactly.
#[test]
fn rust_values_come_back_as_they_went() {
    let p = paths();
    fn check<T>(p: &Paths, value: T, luau_type: &str)
    where
        T: IntoMessage + FromMessage + Clone + PartialEq + std::fmt::Debug,
    {
        let sent = value.clone().into_message().unwrap();
        p.round_trip(&sent);
        *p.value.borrow_mut() = sent;
        let seen = p.domain.eval("return typeof(host.value())").unwrap();
        assert_eq!(seen.as_str(), Some(luau_type), "{value:?}");
        p.domain.eval("host.take(host.value())").unwrap();
        assert_eq!(T::from_message(p.took()).unwrap(), value);
    }
    check(&p, 2i64, "number");
    check(&p, -(1i64 << 53), "number");
    check(&p, (1i64 << 53) + 1, "integer");
    check(&p, i64::MIN, "integer");
    check(&p, u64::try_from(i64::MAX).unwrap(), "integer");
    check(&p, 300usize, "number");
    check(&p, 255u8, "number");
    check(&p, -3i32, "number");
    check(&p, 0.1f64, "number");
    check(&p, 0.5f32, "number");
    check(&p, true, "boolean");
    check(&p, "héllo".to_owned(), "string");
    check(&p, [1.5f32, 0.0, -2.0], "vector");
    check(&p, vec![1i64, 2, 3], "table");
    check(&p, Vec::<i64>::new(), "table");
    check(&p, Some(4u32), "number");
    check(&p, None::<u32>, "nil");
    check(
        &p,
        HashMap::from([("a".to_owned(), 1.5f64), ("b".to_owned(), 2.0)]),
        "table",
    );
}

/// The same Luau number `2` reaches the host as `Number(2.0)` on every path, and
/// `integer.create(2)` as `Integer(2)`.
#[test]
fn a_luau_number_is_a_number_and_an_integer_an_integer_on_every_path() {
    let p = paths();
    let d = &p.domain;
    let table = d.shared().table("paths").unwrap();
    for (code, expected) in [
        ("2", Message::Number(2.0)),
        ("integer.create(2)", Message::Integer(2)),
    ] {
        assert_eq!(d.eval(&format!("return {code}")).unwrap(), expected);
        d.eval(&format!("host.take({code})")).unwrap();
        assert_eq!(p.took(), expected, "service argument");
        d.eval(&format!("jobs.shared.table('paths').copied = {code}"))
            .unwrap();
        assert_eq!(table_value(&table), expected, "shared table");
        let job = d
            .eval(&format!(
                "return jobs.dispatch('./echo', 'echo', {code}):await()"
            ))
            .unwrap();
        assert_eq!(job, expected, "a job's result");
        // Either form reads as the same Rust number.
        assert_eq!(expected.as_i64(), Some(2));
        assert_eq!(expected.as_f64(), Some(2.0));
    }
}

#[test]
fn typed_service_arguments_are_read_by_position_and_a_mismatch_names_the_argument() {
    let tree = Tree::new(&[(
        "mover.luau",
        "return { run = function() world.move(2, vector.create(1, 2, 3)) \
         return world.near(2, vector.create(1, 2, 3), 0.5) end }",
    )]);
    let pool = Pool::new(1);
    let d = tree.domain(&pool);
    let moves = Rc::new(RefCell::new(Vec::new()));
    let m = moves.clone();
    d.register_command("world.move", move |(id, pos): (i64, [f32; 3])| {
        m.borrow_mut().push((id, pos));
        Ok(())
    })
    .unwrap();
    d.register_query(
        "world.near",
        |(id, pos, radius): (u32, [f32; 3], Option<f64>)| {
            Ok(vec![
                f64::from(id),
                f64::from(pos[0]),
                radius.unwrap_or(1.0),
            ])
        },
    )
    .unwrap();
    // From the engine VM, and forwarded from a worker.
    assert_eq!(
        d.eval("world.move(1, vector.create(4, 5, 6)) return world.near(1, vector.zero)")
            .unwrap(),
        Message::list([1.0, 0.0, 1.0])
    );
    let near = d.eval("return jobs.dispatch('./mover', 'run', nil):await()");
    assert_eq!(near.unwrap(), Message::list([2.0, 1.0, 0.5]));
    assert_eq!(
        *moves.borrow(),
        vec![(1, [4.0, 5.0, 6.0]), (2, [1.0, 2.0, 3.0])]
    );
    // A mismatch is raised to the caller naming the service, the argument and both types;
    // the closure never runs.
    let err = d.eval("world.move(1, 'north')").unwrap_err().to_string();
    assert_contains(
        &err,
        "engine service 'world.move' failed: args[2]: expected a vector, got a string",
    );
    let err = d
        .eval("world.move(1.5, vector.zero)")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "engine service 'world.move' failed: args[1]: expected an integer, got the number 1.5",
    );
    let err = d
        .eval("return world.near(-1, vector.zero)")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "engine service 'world.near' failed: args[1]: expected an integer from 0 to 4294967295, \
         got the number -1",
    );
    let err = d.eval("world.move(1)").unwrap_err().to_string();
    assert_contains(&err, "args[2]: expected a vector, got nil");
    // Forwarded from a worker, the same words reach the job.
    tree.write(
        "bad.luau",
        "return { run = function() return world.near('x', vector.zero) end }",
    );
    let err = d
        .eval("return jobs.dispatch('./bad', 'run', nil):await()")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "engine service 'world.near' failed: args[1]: expected an integer, got a string",
    );
    assert_eq!(moves.borrow().len(), 2, "no call ran on a mismatch");
}

/// `host.first`/`firstOf` take a `Message` (the first argument), `host.count`/`countOf` take
/// `Args` (every one); `host.note` and `host.noteAll` record what they got. The module calls each
/// with extra arguments, with none, and with a `nil` between others.
const ARGUMENT_CALLS: &str = "\
    host.note(7, 'extra', true) host.note() host.noteAll() host.noteAll(1, nil, 'three') \
    return { host.first(7, 'extra'), host.first() == nil, host.count(), host.count(1, nil, 'three'), \
             firstOf(7, 'extra'), firstOf() == nil, countOf(), countOf(1, nil, 'three') }";

#[test]
fn a_message_argument_is_the_first_one_and_args_are_all_of_them() {
    let tree = Tree::new(&[(
        "calls.luau",
        &format!("return {{ run = function() {ARGUMENT_CALLS} end }}"),
    )]);
    let plan = Plan::new()
        .typed_function("firstOf", |first: Message| Ok(first))
        .typed_function("countOf", |args: Args| Ok(args.len()));
    let pool = Pool::new(1);
    let d = tree.domain_with(&pool, plan);
    let notes = Rc::new(RefCell::new(Vec::new()));
    let n = notes.clone();
    d.register_command("host.note", move |first: Message| {
        n.borrow_mut().push(first);
        Ok(())
    })
    .unwrap();
    let n = notes.clone();
    d.register_command("host.noteAll", move |Args(all): Args| {
        n.borrow_mut().push(Message::List(all));
        Ok(())
    })
    .unwrap();
    d.register_query("host.first", |first: Message| Ok(first))
        .unwrap();
    d.register_query("host.count", |args: Args| Ok(args.len()))
        .unwrap();
    let answers = Message::list([
        Message::from(7),
        Message::Boolean(true),
        Message::from(0),
        Message::from(3),
        Message::from(7),
        Message::Boolean(true),
        Message::from(0),
        Message::from(3),
    ]);
    let recorded = vec![
        Message::from(7),
        Message::Nil,
        Message::List(Vec::new()),
        Message::List(vec![Message::from(1), Message::Nil, Message::from("three")]),
    ];
    // In the engine VM, where each call runs the closure directly.
    assert_eq!(d.eval(ARGUMENT_CALLS).unwrap(), answers);
    assert_eq!(*notes.borrow(), recorded);
    // From a worker: the queries forwarded, the commands recorded and applied before the
    // promise settles.
    notes.borrow_mut().clear();
    let from_worker = d.eval("return jobs.dispatch('./calls', 'run'):await()");
    assert_eq!(from_worker.unwrap(), answers);
    assert_eq!(*notes.borrow(), recorded);
}

#[test]
fn a_typed_host_function_reads_its_arguments_in_every_vm_and_names_a_mismatch() {
    let plan = Plan::new().typed_function("hostScale", |(by, v): (f64, [f32; 3])| {
        Ok(v.map(|c| c * by as f32))
    });
    let tree = Tree::new(&[(
        "scale.luau",
        "return { run = function() return hostScale(2, vector.create(1, 2, 3)) end }",
    )]);
    let pool = Pool::new(1);
    let d = tree.domain_with(&pool, plan);
    assert_eq!(
        d.eval("return hostScale(3, vector.one)").unwrap(),
        Message::Vector([3.0; 3])
    );
    let scaled = d.dispatch("./scale", "run", Message::Nil).unwrap().wait();
    assert_eq!(scaled.unwrap(), Message::Vector([2.0, 4.0, 6.0]));
    let err = d
        .eval("return hostScale(vector.one, 2)")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "host function 'hostScale' failed: args[1]: expected a number (or an integer within \
         ±2^53), got a vector",
    );
    let err = d
        .eval("return hostScale(1, { f = print })")
        .unwrap_err()
        .to_string();
    assert_contains(
        &err,
        "hostScale: args[2].f: a function can't cross a worker or event boundary",
    );
}

mod serde_values {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};
    use skein::message::{ConvertErrorKind, Limits, Serde};
    use skein::Message;

    use super::paths;
    use crate::support::assert_contains;

    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
    enum Order {
        Halt,
        Move([f32; 3]),
        Attack { target: u64, damage: f32 },
        Say(String, u8),
    }

    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
    struct Unit {
        id: u64,
        big: i64,
        name: String,
        tags: Vec<String>,
        stats: BTreeMap<String, f64>,
        by_slot: BTreeMap<u32, bool>,
        leader: Option<Box<Unit>>,
        orders: Vec<Order>,
        pair: (i8, bool),
    }

    fn sample() -> Unit {
        Unit {
            id: 7,
            big: i64::MIN,
            name: "ranger".into(),
            tags: vec!["fast".into(), "".into()],
            stats: BTreeMap::from([("hp".into(), 12.5), ("mp".into(), 0.0)]),
            by_slot: BTreeMap::from([(1, true), (5, false)]),
            leader: Some(Box::new(Unit {
                id: u64::try_from(i64::MAX).unwrap(),
                big: 1 << 53,
                name: "captain".into(),
                tags: Vec::new(),
                stats: BTreeMap::new(),
                by_slot: BTreeMap::new(),
                leader: None,
                orders: Vec::new(),
                pair: (-1, false),
            })),
            orders: vec![
                Order::Halt,
                Order::Move([1.0, 2.0, 3.5]),
                Order::Attack {
                    target: 3,
                    damage: 0.25,
                },
                Order::Say("hi".into(), 2),
            ],
            pair: (-128, true),
        }
    }

    /// A `Serialize` value crosses into Luau and back (a job echoes it) and reads as itself.
    #[test]
    fn a_serde_value_round_trips_through_luau() {
        let p = paths();
        let sent = Message::from_serde(&sample()).unwrap();
        p.round_trip(&sent);
        let back = p.domain.dispatch("./echo", "echo", sent).unwrap().wait();
        assert_eq!(back.unwrap().to_serde::<Unit>().unwrap(), sample());
        // A script reads it in its own words: numbers where an f64 holds them, a unit variant
        // by name.
        *p.value.borrow_mut() = Message::from_serde(&sample()).unwrap();
        let seen = p
            .domain
            .eval(
                "local u = host.value() \
                 return { typeof(u.id), typeof(u.big), u.orders[1], u.orders[3].Attack.target }",
            )
            .unwrap();
        assert_eq!(
            seen,
            Message::list([
                Message::from("number"),
                Message::from("integer"),
                Message::from("Halt"),
                Message::from(3),
            ])
        );
        // A vector reads as an `[f32; 3]`.
        let v: [f32; 3] = Message::Vector([1.0, 2.0, 3.0]).to_serde().unwrap();
        assert_eq!(v, [1.0, 2.0, 3.0]);
    }

    #[test]
    fn a_serde_argument_that_does_not_fit_names_its_path() {
        let p = paths();
        p.domain
            .register_query("units.strength", |Serde(unit): Serde<Unit>| {
                Ok(unit.stats.values().sum::<f64>())
            })
            .unwrap();
        *p.value.borrow_mut() = Message::from_serde(&sample()).unwrap();
        assert_eq!(
            p.domain
                .eval("return units.strength(host.value())")
                .unwrap(),
            Message::Number(12.5)
        );
        let err = p
            .domain
            .eval("local u = host.value() u.leader.pair = { 1, 'x' } return units.strength(u)")
            .unwrap_err()
            .to_string();
        assert_contains(
            &err,
            "engine service 'units.strength' failed: args[1].leader.pair[2]: invalid type: \
             string \"x\", expected a boolean",
        );
    }

    /// Building from `Serialize` is bounded as every copy is: at the byte bound and one past,
    /// at the depth bound and one past.
    #[test]
    fn serde_building_is_refused_one_past_each_bound() {
        // A list node, a string node and its bytes: exactly the bound, then one byte more.
        let fits = Limits::MAX_MESSAGE_BYTES - 2 * Limits::NODE_WEIGHT;
        let at = Message::from_serde(&("x".repeat(fits),)).unwrap();
        assert_eq!(at.queue_weight(), Limits::MAX_MESSAGE_BYTES);
        drop(at);
        let err = Message::from_serde(&("x".repeat(fits + 1),)).unwrap_err();
        assert_eq!(
            err.kind(),
            &ConvertErrorKind::TooLarge {
                limit: Limits::MAX_MESSAGE_BYTES
            }
        );
        assert_eq!(
            err.to_string(),
            "value[1]: a value weighing more than its limit of 67108864 bytes"
        );
        // Many small nodes are refused as they pass the bound, not built first.
        let nodes = Limits::MAX_MESSAGE_BYTES / Limits::NODE_WEIGHT;
        assert!(Message::from_serde(&vec![(); nodes - 1]).is_ok());
        let err = Message::from_serde(&vec![(); nodes]).unwrap_err();
        assert_eq!(err.path(), format!("value[{nodes}]"));

        #[derive(Serialize)]
        struct Nest(Vec<Nest>);
        let nest = |depth: usize| (1..depth).fold(Nest(Vec::new()), |n, _| Nest(vec![n]));
        let at = Message::from_serde(&nest(Limits::MAX_DEPTH)).unwrap();
        let mut depth = 0;
        let mut level = Some(&at);
        while let Some(m) = level {
            depth += 1;
            level = m.index(0);
        }
        assert_eq!(depth, Limits::MAX_DEPTH);
        let err = Message::from_serde(&nest(Limits::MAX_DEPTH + 1)).unwrap_err();
        assert_eq!(
            err.kind(),
            &ConvertErrorKind::TooDeep {
                max_depth: Limits::MAX_DEPTH
            }
        );
        // What Luau refuses is refused here too: the message built at the bound crosses.
        let p = paths();
        let back = p
            .domain
            .dispatch("./echo", "echo", at.clone())
            .unwrap()
            .wait();
        assert_eq!(back.unwrap(), at);
    }

    #[test]
    fn serde_refuses_what_a_message_cannot_hold() {
        let err = Message::from_serde(&u64::MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "value: expected an integer within the range of i64, got 18446744073709551615"
        );
        let keyed = BTreeMap::from([((1, 2), true)]);
        assert_eq!(
            Message::from_serde(&keyed).unwrap_err().to_string(),
            "value: expected a map key that is a string or a number (not NaN), got a table"
        );
        let err = Message::from("x").to_serde::<Order>().unwrap_err();
        assert_contains(&err.to_string(), "unknown variant `x`");
    }
}
