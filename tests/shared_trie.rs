//! Shared tables over the hash trie, end to end from Luau: a loop over an array-like table goes
//! 1, 2, 3 … before any other key; every entry is visited once, from a loop, `pairs` and `next`;
//! `next` from a key no longer present answers a successor instead of raising; and many keys,
//! written and removed, read back exactly.

use skein::{DomainSpec, Message, Pool, ScriptDomain};

fn eval(domain: &ScriptDomain, source: &str) -> Message {
    domain
        .eval(source)
        .unwrap_or_else(|e| panic!("{e}\n---\n{source}"))
}

#[test]
fn a_loop_gives_the_list_part_first_then_every_other_key_once() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("trie")).expect("domain");
    let out = eval(
        &domain,
        r#"
        local t = jobs.shared.table("walk")
        for i = 1, 300 do t[i] = i * 2 end
        for i = 1, 200 do t["k" .. i] = i end
        t[302] = "past the border"
        t[0.5] = "half"
        local function check(f, s, init)
            local seen, count = {}, 0
            for k, v in f, s, init do
                count += 1
                assert(seen[k] == nil, "each key once: " .. tostring(k))
                seen[k] = v
                if count <= 300 then
                    assert(k == count and v == count * 2, "the list part in order at " .. count)
                end
            end
            assert(count == 502, "every entry: " .. count)
            assert(seen[302] == "past the border" and seen[0.5] == "half" and seen.k200 == 200)
        end
        check(t)
        check(pairs(t))
        -- `next` by hand, the same walk.
        local k, count = next(t), 0
        while k ~= nil do
            count += 1
            k = next(t, k)
        end
        assert(count == 502)
        -- A key removed mid-walk still answers a successor (or the end), never an error.
        t.k7 = nil
        local after = next(t, "k7")
        assert(after == nil or t[after] ~= nil)
        assert(#t == 300)
        local n = 0
        for _, v in ipairs(t) do n += 1; assert(v == n * 2) end
        assert(n == 300 and table.concat({table.unpack(t, 299, 300)}, ",") == "598,600")
        return true
        "#,
    );
    assert_eq!(out, Message::Boolean(true));
}

#[test]
fn many_keys_written_and_removed_read_back_exactly() {
    let pool = Pool::new(1);
    let domain = ScriptDomain::new(&pool, DomainSpec::new("trie")).expect("domain");
    let t = domain.shared().table("many").expect("table");
    for i in 0..20_000i64 {
        t.set(i, Message::Integer(i * 3)).expect("set");
        t.set(format!("s{i}"), Message::Integer(-i)).expect("set");
    }
    for i in (0..20_000i64).step_by(3) {
        t.set(i, Message::Nil).expect("remove");
    }
    for i in 0..20_000i64 {
        let want = (i % 3 != 0).then_some(Message::Integer(i * 3));
        assert_eq!(t.get(i).expect("get"), want, "integer key {i}");
        assert_eq!(
            t.get(format!("s{i}")).expect("get"),
            Some(Message::Integer(-i))
        );
    }
    let Message::Map(all) = t.snapshot().expect("snapshot") else {
        panic!("a map")
    };
    assert_eq!(all.len(), 20_000 + 20_000 - 6_667);
    let frozen = t.freeze().expect("freeze");
    t.set("s5", Message::Nil).expect("remove");
    assert_eq!(
        frozen.get("s5"),
        Some(Message::Integer(-5)),
        "an old version keeps it"
    );
    assert_eq!(t.get("s5").expect("get"), None);
}
