#!/usr/bin/env bash
# Side-by-side speed and memory of shortlist-engine and llama.cpp on the same GGUF files:
# interleaved rounds (ours, then llama.cpp, per model and thread count), one JSON line per
# measurement on stdout, then a table of medians and ratios (ours / llama.cpp) on stderr.
#
# usage: compare-llamacpp.sh PYTHON MODEL.gguf [MODEL.gguf ...]
#
#   PYTHON       a Python with llama-cpp-python and numpy (PYTHONPATH / LLAMA_CPP_LIB_PATH are
#                passed through for a package built from its sdist without installing it)
#   ROUNDS       rounds (default 3)        THREADS   thread counts, comma-separated (default 1)
#   SIZES        prefill sizes (512,2048)  DECODE    decode tokens (128)
#   LLAMACPP_BENCH  the llama.cpp-side script (default: llamacpp_bench.py next to this file)
#   BENCH_BIN    our bench binary (default: built with cargo into $CARGO_TARGET_DIR or target/)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
python="${1:?usage: compare-llamacpp.sh PYTHON MODEL.gguf [MODEL.gguf ...]}"
shift
[ "$#" -ge 1 ] || { echo "no model given" >&2; exit 2; }
rounds="${ROUNDS:-3}"
threads="${THREADS:-1}"
sizes="${SIZES:-512,2048}"
decode="${DECODE:-128}"
lcpp="${LLAMACPP_BENCH:-$here/llamacpp_bench.py}"

if [ -z "${BENCH_BIN:-}" ]; then
  (cd "$here/../../.." && cargo build --release -q -p shortlist-engine --example bench)
  BENCH_BIN="${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/bench"
fi

out="$(mktemp)"
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    name="$(basename "$model" .gguf)"
    for t in ${threads//,/ }; do
      for engine in shortlist llama.cpp; do
        load="$(cut -d' ' -f1 /proc/loadavg)"
        if [ "$engine" = shortlist ]; then
          lines="$(CANDLE_NUM_THREADS=$t RAYON_NUM_THREADS=$t "$BENCH_BIN" "$model" "$sizes" "$decode")"
        else
          lines="$("$python" "$lcpp" "$model" "$sizes" "$decode" "$t" 2>/dev/null)"
        fi
        while IFS= read -r l; do
          echo "{\"round\": $round, \"model\": \"$name\", \"threads\": $t, \"engine\": \"$engine\", \"load\": $load, \"m\": $l}"
        done <<< "$lines" | tee -a "$out"
      done
    done
  done
done

"$python" - "$out" >&2 <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
vals = collections.defaultdict(list)
stages = collections.defaultdict(list)
for r in rows:
    v = r["m"]["value"]
    if isinstance(v, dict):  # our load time by stage
        for stage, s in v.items():
            stages[(r["model"], stage)].append(s)
    else:
        vals[(r["model"], r["threads"], r["m"]["metric"], r["engine"])].append(v)
loads = [r["load"] for r in rows]
print(f"load average during the runs: median {statistics.median(loads):.2f}, max {max(loads):.2f}")
print("| model | threads | metric | shortlist | llama.cpp | ours / llama.cpp |")
print("|---|---|---|---|---|---|")
for (model, t, metric, engine) in sorted(vals):
    if engine != "shortlist":
        continue
    ours = statistics.median(vals[(model, t, metric, "shortlist")])
    theirs = vals.get((model, t, metric, "llama.cpp"))
    if not theirs:
        continue
    theirs = statistics.median(theirs)
    print(f"| {model} | {t} | {metric} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} |")
for (model, stage), v in sorted(stages.items()):
    print(f"shortlist load stage {model} {stage}: median {statistics.median(v):.3f} s")
PY
rm -f "$out"
