//! The built-in `@skein/*` modules: every VM of a domain (its engine VM, a pool thread's VM, a
//! `@skein/worker` VM) answers the same names, and a name no layer registered is refused by the
//! loader as the alias it reads as.

use skein::capability::{CapabilityId, CapabilitySet, RootAuthority};
use skein::{DomainSpec, Plan, Pool, ScriptDomain};

use crate::support::{text, Tree};

/// Luau that requires every built-in and an unknown name, and answers what it got.
const PROBE: &str = r#"
    local seen = {}
    for _, name in { "@skein/jobs", "@skein/context", "@skein/events", "@skein/interfaces",
                     "@skein/worker", "@skein/log", "@skein/fs" } do
        table.insert(seen, name .. "=" .. typeof(require(name)))
    end
    local ok, err = pcall(function() return require("@skein/nope") end)
    table.insert(seen, if ok then "loaded" else string.match(tostring(err), "^[^\n]*"))
    return table.concat(seen, "\n")
"#;

const SEEN: &str = "@skein/jobs=table\n@skein/context=table\n@skein/events=table\n\
                    @skein/interfaces=table\n@skein/worker=table\n@skein/log=table\n\
                    @skein/fs=table\nunknown alias '@skein' in require path \
                    '@skein/nope' from ";

#[test]
fn every_vm_of_a_domain_answers_the_same_built_ins_and_refuses_an_unknown_one() {
    let tree = Tree::new(&[(
        "probe.luau",
        &format!("return {{ run = function()\n{PROBE}\nend }}\n"),
    )]);
    let pool = Pool::new(1);
    let grant = RootAuthority::new().grant(CapabilitySet::from_iter([CapabilityId::new(
        "worker.spawn",
    )
    .unwrap()]));
    let domain = ScriptDomain::new(
        &pool,
        DomainSpec::new("builtins")
            .plan(Plan::new().root(tree.path()))
            .grant(grant),
    )
    .expect("domain");

    let engine = text(&domain.eval(PROBE).expect("engine probe"));
    let job = text(
        &domain
            .eval(r#"return jobs.dispatch("./probe", "run"):await()"#)
            .expect("job probe"),
    );
    let actor = text(
        &domain
            .eval(&format!(
                "local w = require('@skein/worker').spawn {{ name = 'probe', source = [==[
                    return function() {PROBE} end
                ]==] }}
                w:send(1)
                return w:receive(20)"
            ))
            .expect("actor probe"),
    );
    for (vm, seen) in [("engine", &engine), ("job", &job), ("actor", &actor)] {
        assert!(seen.starts_with(SEEN), "{vm}:\n{seen}");
        assert!(
            seen.ends_with(": no .luaurc above it defines it"),
            "{vm}:\n{seen}"
        );
    }
}
