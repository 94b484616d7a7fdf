//! Runs that nest on one thread: host code called from one domain's run runs another domain's
//! Luau on the same thread. The nested run's budget must not leak into the outer run's report.

use std::rc::Rc;
use std::time::Duration;

use skein::{ContextSpec, DomainSpec, Message, Phase, Pool, ScriptDomain};

use crate::support::assert_contains;

#[test]
fn an_outer_run_failing_after_a_nested_run_was_stopped_reports_its_own_failure() {
    let pool = Pool::new(1);
    let spec = DomainSpec::new("inner")
        .context(
            ContextSpec::new("spin")
                .phases([Phase::OnDemand])
                .budget(Duration::from_millis(30)),
        )
        .unwrap();
    let inner = Rc::new(ScriptDomain::new(&pool, spec).unwrap());
    inner
        .exec(r#"require("@skein/context").bind("spin", { onDemand = function() while true do end end })"#)
        .unwrap();
    let outer = ScriptDomain::new(&pool, DomainSpec::new("outer")).unwrap();
    let nested = inner.clone();
    outer
        .register_query("inner.spin", move |()| {
            let report = nested
                .run_phase(Phase::OnDemand, &[])
                .map_err(|e| e.to_string())?;
            let message = report
                .errors
                .first()
                .map(|d| d.message.clone())
                .unwrap_or_default();
            Ok(Message::String(message.into()))
        })
        .unwrap();
    // The nested handler is stopped by its context's budget ...
    let stopped = outer.eval("return inner.spin()").unwrap();
    let Message::String(text) = stopped else {
        panic!("{stopped:?}")
    };
    assert_contains(
        std::str::from_utf8(&text).unwrap(),
        "deadline exceeded: one run took longer than 0.03 s",
    );
    // ... and an outer run that then fails for its own reason is reported with that reason.
    let err = outer
        .eval("inner.spin() error('the outer script failed on its own')")
        .unwrap_err()
        .to_string();
    assert_contains(&err, "the outer script failed on its own");
    assert!(!err.contains("deadline"), "{err}");
}
