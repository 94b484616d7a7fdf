//! One game loop: a host that runs `frame` serves a forwarded query and the commands recorded
//! after it in the frame that answers the query, so the promise an engine task awaits settles
//! there.

use std::collections::HashMap;
use std::time::Duration;

use skein::{Message, Pool};

use crate::support::{serve_world, wait_until, Tree, World};

const FRAME: Duration = Duration::from_millis(1);

const MODULE: &str = r#"
return { run = function(id)
    jobs.shared.queue("asking", { capacity = 4 }):push(true)
    local v = world.get(id)
    world.set(id, v + 1)
    world.set(id + 1, v)
    return v
end }
"#;

#[test]
fn a_job_that_queries_then_records_settles_in_the_frame_that_answers_its_query() {
    let tree = Tree::new(&[("q.luau", MODULE)]);
    let pool = Pool::new(1);
    let domain = tree.domain(&pool);
    let world: World = World::default();
    world.borrow_mut().insert(1, Message::Number(41.0));
    serve_world(&domain, &world);
    let asking = domain.shared().queue("asking", 4).unwrap();
    let mut settled_in = None;
    let mut answered_in = None;
    for attempt in 0..20 {
        // A task of the engine VM awaits the job: the frame that answers its query serves
        // what the job does next, for that task.
        domain
            .exec(r#"task.spawn(function() result = jobs.dispatch("./q", "run", 1):await() end)"#)
            .unwrap();
        // The job is about to ask: its query is in the mailbox, or nearly, for the next frame.
        assert!(wait_until(Duration::from_secs(10), || asking
            .try_pop()
            .unwrap()
            .is_some()));
        std::thread::sleep(Duration::from_millis(1));
        let mut frames = 0;
        while domain.eval("return result").unwrap() == Message::Nil {
            let report = domain.frame(FRAME);
            frames += 1;
            if report.forwarded_calls > 0 {
                answered_in = Some(frames);
                assert_eq!(report.forwarded_calls, 1);
            }
            assert!(frames < 1000, "never settled");
        }
        assert_eq!(
            domain.eval("return result").unwrap(),
            Message::Number(41.0 + attempt as f64)
        );
        domain.exec("result = nil").unwrap();
        settled_in = Some(frames);
        if answered_in == Some(1) && settled_in == Some(1) {
            break;
        }
    }
    assert_eq!(
        (answered_in, settled_in),
        (Some(1), Some(1)),
        "the frame that answered the query applied the commands and settled the promise"
    );
    let world: HashMap<_, _> = world.borrow().clone();
    let (Some(Message::Number(now)), Some(Message::Number(before))) =
        (world.get(&1), world.get(&2))
    else {
        panic!("{world:?}");
    };
    assert_eq!(*now, before + 1.0, "both commands applied, in order");
}
