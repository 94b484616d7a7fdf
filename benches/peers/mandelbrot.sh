#!/bin/sh
# The whole-process comparison of docs/performance.md: Skein (release, native code, 2 workers)
# running examples/mandelbrot_pool.luau against LuaJIT + luv's thread pool (2 threads) running
# benches/peers/mandelbrot_luv.lua, the same kernel at 800x600 and 200 iterations, 64 chunks.
# The two run interleaved, RUNS times each (default 7); each run is timed as a whole process,
# start to exit. Prints every run, the medians and the ratio. Needs the Debian packages luajit
# and lua-luv, and a release build (`cargo build --release`).
#
#   benches/peers/mandelbrot.sh [RUNS] [extra skein flags, e.g. --no-native]
set -eu
cd "$(dirname "$0")/../.."
RUNS=${1:-7}
[ $# -gt 0 ] && shift
SKEIN=target/release/skein
[ -x "$SKEIN" ] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v luajit >/dev/null || { echo "needs luajit and lua-luv (apt-get install luajit lua-luv)" >&2; exit 1; }

now_ns() { date +%s%N; }
skein_times=""
luv_times=""
i=0
while [ "$i" -lt "$RUNS" ]; do
    # Alternate which side goes first, so neither always runs right after the other.
    for side in $(if [ $((i % 2)) -eq 0 ]; then echo skein luv; else echo luv skein; fi); do
        t0=$(now_ns)
        if [ "$side" = skein ]; then
            out=$("$SKEIN" run --workers 2 "$@" examples/mandelbrot_pool.luau)
        else
            out=$(UV_THREADPOOL_SIZE=2 luajit benches/peers/mandelbrot_luv.lua)
        fi
        ms=$(( ($(now_ns) - t0) / 1000000 ))
        echo "run $i $side: $ms ms ($out)"
        if [ "$side" = skein ]; then skein_times="$skein_times $ms"; else luv_times="$luv_times $ms"; fi
    done
    i=$((i + 1))
done

median() { printf '%s\n' $1 | sort -n | awk '{ v[NR] = $1 } END { print v[int(NR / 2) + 1] }'; }
s=$(median "$skein_times")
l=$(median "$luv_times")
awk -v s="$s" -v l="$l" 'BEGIN {
    printf "mandelbrot 800x600x200, whole process, median: skein %d ms, luajit+luv %d ms; skein takes %.2fx the time of luajit+luv (goal: within 3x)\n", s, l, s / l
}'
