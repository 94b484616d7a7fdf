#!/bin/bash
# Per-item instructions of one dispatch + await, engine thread and workers, from
# benches/dispatch_cost.rs under callgrind (see that file's header for what it runs).
#   benches/dispatch_cost.sh [empty|keyed|map|rust]
# (map: one jobs.map over N elements instead of N dispatches, so the figures are per element;
# rust: issued from Rust, ScriptDomain::dispatch, then Promise::wait on each)
# Builds the release driver, runs it at N = 2,000 and 12,000 with one callgrind file per thread,
# and prints each thread's difference over 10,000: thread 1 is the engine, the others are the
# workers (and the executor's idle threads, which count next to nothing). The workers' figure is
# the difference of their sums: which file holds which worker can differ between the two runs
# (a thread that ran items in one ran none in the other), so they are not subtracted one by one.
# A worker's one-off work is taken out of its thread's count first: the state `Lua::new` makes
# (a worker makes its spare while idle, so how many it makes in a run depends on the timing), its
# VM's build on it, and its shutdown; what is left of a worker is the items' cost.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
cargo build --release --bench dispatch_cost >/dev/null 2>&1
bin=$(ls -t target/release/deps/dispatch_cost-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
for n in 2000 12000; do
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg.$n.%p" \
        "$bin" "$n" $mode >/dev/null 2>&1
done
python3 - "$out" <<'PY'
import glob, re, subprocess, sys
d = sys.argv[1]
ONE_OFF = ("mlua::state::Lua::new", "skein::vm::core::Vm::build_on", "WorkerLogic>::on_shutdown")
def one_off(f):
    """A worker thread's one-off work: the inclusive count of each ONE_OFF function."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", f],
                         capture_output=True, text=True).stdout
    best = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(.*?\)\s+\S*?\.\w+:(\S.*?) \[", line)
        if m and m.group(2).endswith(ONE_OFF):
            name = next(n for n in ONE_OFF if m.group(2).endswith(n))
            best[name] = max(best.get(name, 0), int(m.group(1).replace(",", "")))
    return sum(best.values())
def totals(n):
    found = {}
    for f in glob.glob(f"{d}/cg.{n}.*"):
        m = re.search(r"-(\d+)$", f)
        thread = int(m.group(1)) if m else 0
        for line in open(f):
            if line.startswith(("totals:", "summary:")):
                found[thread] = int(line.split()[1])
                break
        if thread > 1 and thread in found:
            found[thread] -= one_off(f)
    return found
a, b = totals(2000), totals(12000)
engine = (b.get(1, 0) - a.get(1, 0)) / 10000
workers = (sum(v for t, v in b.items() if t != 1) - sum(v for t, v in a.items() if t != 1)) / 10000
print(f"engine {engine:.0f} workers {workers:.0f} total {engine + workers:.0f}")
PY
