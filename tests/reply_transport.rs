//! The mailbox that carries workers' replies to the engine thread: every reply from several
//! workers arrives exactly once, whether one drain takes them all or several do, and host
//! promises settled by workers are each taken once.

use std::time::Duration;

use skein::{Message, Pool};

use crate::support::{number, wait_until, Marks, Tree};

const ECHO: &str = r#"
local M = {}
function M.run(x) hostMark() return x end
return M
"#;

const ITEMS: usize = 2_000;

/// `ITEMS` dispatches from Luau on two workers, left unpumped until every item ran; then the
/// host pumps until every promise settled. Each reply settles its own promise once: the sum
/// of the results and the count of resolved promises both come out exact.
#[test]
fn replies_from_two_workers_all_arrive_once_in_one_drain_or_several() {
    let marks = Marks::default();
    let tree = Tree::new(&[("echo.luau", ECHO)]);
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, marks.plan());
    domain
        .exec(&format!(
            r#"ps = table.create({ITEMS})
            for i = 1, {ITEMS} do ps[i] = jobs.dispatch("./echo", "run", i) end"#
        ))
        .unwrap();
    assert!(wait_until(Duration::from_secs(30), || marks.count() == ITEMS));
    let count_resolved = r#"local n = 0
        for _, p in ps do if p:status() == "resolved" then n += 1 end end
        return n"#;
    let mut pumps = 0;
    assert!(wait_until(Duration::from_secs(30), || {
        pumps += 1;
        domain.pump();
        number(&domain.eval(count_resolved).unwrap()) == ITEMS as f64
    }));
    assert!(pumps >= 1);
    let sum = domain
        .eval("local s = 0 for _, p in ps do s += p:await() end return s")
        .unwrap();
    assert_eq!(number(&sum), (ITEMS * (ITEMS + 1) / 2) as f64);
    assert_eq!(marks.count(), ITEMS, "no item ran twice");
}

/// The same from Rust: host promises settled in place by two workers, each taken exactly once,
/// waited on in the order issued and in reverse.
#[test]
fn host_promises_from_two_workers_each_settle_once() {
    let marks = Marks::default();
    let tree = Tree::new(&[("echo.luau", ECHO)]);
    let pool = Pool::new(2);
    let domain = tree.domain_with(&pool, marks.plan());
    for reverse in [false, true] {
        let mut promises: Vec<_> = (1..=ITEMS as i64)
            .map(|i| {
                domain
                    .dispatch("./echo", "run", Message::Integer(i))
                    .unwrap()
            })
            .collect();
        if reverse {
            promises.reverse();
        }
        let mut sum = 0.0;
        for mut p in promises {
            sum += number(&p.wait_timeout(Duration::from_secs(30)).unwrap().unwrap());
            assert!(matches!(
                p.try_take(),
                Some(Err(skein::Error::PromiseTaken))
            ));
        }
        assert_eq!(sum, (ITEMS * (ITEMS + 1) / 2) as f64);
    }
    assert_eq!(marks.count(), 2 * ITEMS);
}
