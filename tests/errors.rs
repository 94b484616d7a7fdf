//! `skein::Error` keeps the structure of what refused: the queue and shared-table errors reached
//! through `?` from the public API, and the refusal families of the host calls, each matched by
//! its variant and rule, with its text unchanged.

use std::error::Error as _;
use std::time::Duration;

use skein::frame::FixedStep;
use skein::refusal::{DispatchRefusal, Halt, NameRefusal, SpecSetting};
use skein::shared::{
    PopError, PushError, PushErrorKind, QueueError, QueueOpenError, QueueOpenErrorKind,
    SharedTableError, SharedTableErrorKind,
};
use skein::{ContextSpec, DomainSpec, Error, Message, Pool, ScriptDomain};

fn domain(pool: &Pool) -> ScriptDomain {
    ScriptDomain::new(pool, DomainSpec::new("main")).expect("domain")
}

#[test]
fn a_push_past_capacity_through_question_mark_keeps_its_kind_and_value() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    let fill = || -> skein::Result<()> {
        let queue = domain.shared().queue("results", 1)?;
        queue.push(Message::Integer(1))?;
        queue.push(Message::Integer(2))?;
        Ok(())
    };
    let err = fill().unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedQueue:push: queue 'results' is full (capacity 1)"
    );
    let source = err.source().expect("a queue refusal has a source");
    let queue_error = source.downcast_ref::<QueueError>().expect("a QueueError");
    let push = queue_error
        .source()
        .and_then(|s| s.downcast_ref::<PushError>())
        .expect("the QueueError's source is the PushError");
    assert_eq!(push.kind, PushErrorKind::Full);
    assert_eq!(push.queue(), "results");
    let Error::Queue(QueueError::Push(refused)) = err else {
        panic!("not a push refusal: {err:?}");
    };
    assert_eq!(
        refused.into_inner(),
        Message::Integer(2),
        "the value comes back"
    );
    // Nothing changed: the queue still holds the first value only.
    let queue = domain.shared().queue("results", 1).unwrap();
    assert_eq!(queue.len(), 1);
}

#[test]
fn a_pop_of_a_closed_queue_and_a_refused_open_keep_their_kind() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    let queue = domain.shared().queue("done", 2).unwrap();
    queue.close().unwrap();
    let pop = || -> skein::Result<Option<Message>> { Ok(queue.try_pop()?) };
    let err = pop().unwrap_err();
    assert!(
        matches!(err, Error::Queue(QueueError::Pop(PopError::Closed))),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "the queue is closed and empty");

    let open = || -> skein::Result<()> {
        let _queue = domain.shared().queue("done", 3)?;
        Ok(())
    };
    let err = open().unwrap_err();
    assert_eq!(
        err.to_string(),
        "SharedStore::queue: queue 'done' exists with capacity 2, not 3"
    );
    let opened = err
        .source()
        .and_then(|s| s.source())
        .and_then(|s| s.downcast_ref::<QueueOpenError>())
        .expect("the open error under the QueueError");
    assert_eq!(opened.kind(), QueueOpenErrorKind::OtherCapacity);
    let bad = domain.shared().queue("", 2).unwrap_err();
    assert_eq!(bad.kind(), QueueOpenErrorKind::BadName);
}

#[test]
fn a_shared_table_refusal_through_question_mark_keeps_its_kind() {
    let pool = Pool::new(1);
    let domain = domain(&pool);
    let open = || -> skein::Result<()> {
        let _table = domain.shared().table("")?;
        Ok(())
    };
    let err = open().unwrap_err();
    assert_eq!(
        err.to_string(),
        "jobs.shared.table: a name must be 1 to 256 bytes, got 0 bytes"
    );
    assert!(
        matches!(&err, Error::SharedTable(e) if e.kind() == SharedTableErrorKind::BadName),
        "{err:?}"
    );
    let source = err
        .source()
        .and_then(|s| s.downcast_ref::<SharedTableError>())
        .expect("the SharedTableError is the source");
    assert_eq!(source.kind(), SharedTableErrorKind::BadName);

    let nested = || -> skein::Result<()> {
        let _nested = domain.shared().table("players")?.table_at("nobody")?;
        Ok(())
    };
    let err = nested().unwrap_err();
    assert!(
        matches!(&err, Error::SharedTable(e) if e.kind() == SharedTableErrorKind::NotATable),
        "{err:?}"
    );
}

#[test]
fn host_refusals_name_their_family_and_rule() {
    let pool = Pool::new(1);
    let domain = domain(&pool);

    let err = domain.dispatch("./nowhere", "f", Message::Nil).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Dispatch {
                refusal: DispatchRefusal::Module,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("dispatch: "), "{err}");

    let kernel = |_: Message| Ok(Message::Nil);
    domain.register_kernel("k", kernel).unwrap();
    let err = domain.register_kernel("k", kernel).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Name {
                refusal: NameRefusal::KernelTaken,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "register_kernel: kernel 'k' is registered already"
    );
    let err = domain.register_kernel("", kernel).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Name {
                refusal: NameRefusal::KernelName,
                ..
            }
        ),
        "{err:?}"
    );

    let err = domain.route("", domain.mailbox()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Name {
                refusal: NameRefusal::EventName,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "route: an event name must be 1 to 256 bytes, got 0"
    );
}

#[test]
fn spec_refusals_name_the_setting() {
    let pool = Pool::new(1);
    let zero = FixedStep {
        step: Duration::ZERO,
        max_catch_up: 1,
    };
    let err = ScriptDomain::new(&pool, DomainSpec::new("z").fixed_step(zero))
        .err()
        .expect("a zero step is refused");
    assert!(
        matches!(
            err,
            Error::Spec {
                setting: SpecSetting::FixedStep,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "fixed_step: the step must be longer than 0"
    );
    let err = ScriptDomain::new(&pool, DomainSpec::new("z").load_bound(Duration::ZERO))
        .err()
        .expect("a zero load bound is refused");
    assert!(
        matches!(
            err,
            Error::Spec {
                setting: SpecSetting::LoadBound,
                ..
            }
        ),
        "{err:?}"
    );
    let err = DomainSpec::new("z")
        .context(ContextSpec::new(""))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Spec {
                setting: SpecSetting::Context,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_stopped_domain_refuses_with_its_state() {
    let pool = Pool::new(1);
    let mut domain = ScriptDomain::new(&pool, DomainSpec::new("game")).unwrap();
    domain.stop();
    let err = domain.advance(Duration::from_millis(16)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Stopped {
                entry: "advance",
                domain,
                state: Halt::Stopped,
                new_generation: false,
            } if domain == "game"
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "advance: domain 'game' is stopped");
    assert!(err.source().is_none());
}
