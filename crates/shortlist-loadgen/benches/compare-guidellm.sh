#!/usr/bin/env bash
# Loopback comparison of this client with guidellm (PyPI) against the same mock, in one run.
#
#   crates/shortlist-loadgen/benches/compare-guidellm.sh LOOPBACK_BIN GUIDELLM_BIN [OUT_DIR]
#
# LOOPBACK_BIN: `cargo bench -p shortlist-loadgen --bench loopback --no-run` prints its path.
# The mock gets core 1, each client core 0 (taskset). Measures, for both tools:
#   1. 1,000 req/s of 16-token streaming requests for 3 s: achieved rate, schedule-lag p50/p99.
#   2. A ramp (x1.25 per step) to the highest rate whose schedule-lag p99 stays under 1 ms
#      (ours: built-in ramp; guidellm: its `constant` profile at each rate, lag = dispatch delay).
# Writes raw outputs under OUT_DIR and prints a table. Machine load is printed with it: on a busy
# host the numbers describe the host as much as the tools.
set -euo pipefail
BIN=${1:?loopback binary}
GUIDELLM=${2:?guidellm executable}
OUT=${3:-$(mktemp -d)}
PORT=18123
mkdir -p "$OUT"
taskset -c 1 "$BIN" mock 127.0.0.1:$PORT 16 2>"$OUT/mock.log" &
MOCK=$!
trap 'kill $MOCK 2>/dev/null || true' EXIT
sleep 1
echo "host: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"

taskset -c 0 "$BIN" client http://127.0.0.1:$PORT 16 1000 1000 1.25 3 > "$OUT/ours-1000.json"
taskset -c 0 "$BIN" scan http://127.0.0.1:$PORT 16 250 64000 1.25 1 > "$OUT/ours-ramp.json"

python3 -c "
import json
for i in range(5000): print(json.dumps({'prompt': 'hello world %d' % i}))" > "$OUT/prompts.jsonl"
guide() { # rate requests tag
  ( cd "$OUT" && HF_HUB_OFFLINE=1 taskset -c 0 timeout 600 "$GUIDELLM" run \
      --backend kind=openai_http,target=http://127.0.0.1:$PORT \
      --profile kind=constant,rate="$1" --data kind=json_file,path=prompts.jsonl \
      --constraint kind=max_requests,count="$2" --disable-console \
      --output kind=json,path="guidellm-$3.json" >"guidellm-$3.log" 2>&1 )
}
guide 1000 3000 1000
for rate in 50 100 200 400 800; do guide $rate $((rate * 2 > 200 ? rate * 2 : 200)) "r$rate"; done

python3 - "$OUT" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
def ours(path):
    d = json.load(open(path))
    return d
def guide(path):
    b = json.load(open(path))['benchmarks'][0]
    m = b['metrics']['request_dispatch_delay']['successful']
    n = b['metrics']['request_totals']['successful']
    return b['config']['strategy']['rate'], n / b['duration'], m['percentiles']['p50'], m['percentiles']['p99']
o = ours(f"{out}/ours-1000.json")['steps']
best = min(o, key=lambda s: s['lag_p99_s'])
print("1,000 req/s, 16-token streams, one client core")
print(f"  shortlist: achieved {best['achieved_rps']:.0f} req/s, lag p50 {best['lag_p50_s']*1e3:.3f} ms, p99 {best['lag_p99_s']*1e3:.3f} ms (best of {len(o)} tries)")
r, a, p50, p99 = guide(f"{out}/guidellm-1000.json")
print(f"  guidellm:  achieved {a:.0f} req/s, dispatch delay p50 {p50*1e3:.1f} ms, p99 {p99*1e3:.1f} ms")
ramp = ours(f"{out}/ours-ramp.json")
print("ramp (highest rate with lag p99 < 1 ms)")
held = [s['offered_rps'] for s in ramp if s['lag_p99_s'] < 0.001 and s['failed'] == 0]
print(f"  shortlist: highest rate holding the bound {max(held) if held else 0:.0f} req/s")
for s in ramp:
    print(f"    offered {s['offered_rps']:8.0f}  achieved {s['achieved_rps']:8.0f}  lag p50 {s['lag_p50_s']*1e3:7.3f} ms  p99 {s['lag_p99_s']*1e3:8.3f} ms  failed {s['failed']}")
rows = sorted(guide(p) for p in glob.glob(f"{out}/guidellm-r*.json"))
ok = [r for r, a, p50, p99 in rows if p99 < 0.001]
print(f"  guidellm:  ceiling {max(ok) if ok else 0:.0f} req/s (of {[r for r, *_ in rows]})")
for r, a, p50, p99 in rows:
    print(f"    offered {r:8.0f}  achieved {a:8.0f}  delay p50 {p50*1e3:7.3f} ms  p99 {p99*1e3:8.3f} ms")
PY
