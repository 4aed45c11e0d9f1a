#!/usr/bin/env bash
# Side-by-side speed of shortlist-engine and llama.cpp's own `llama-bench` (built natively by
# scripts/install-llama-server from the llama.cpp that llama-cpp-python vendors) on the same GGUF
# files: interleaved rounds (ours, then llama-bench, per model and thread count), one JSON line
# per measurement on stdout, then a table of medians and ratios (ours / llama.cpp) on stderr,
# with decode as a fraction of the memory-bandwidth bound (weights read once per token).
#
# usage: compare-llama-bench.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf ...]
#
#   ROUNDS   rounds (default 3)        THREADS   thread counts, comma-separated (default 1,2)
#   SIZES    prefill sizes (512,2048)  DECODE    decode tokens (128)
#   BENCH_BIN / MEMBW_BIN  our bench and membw examples (default: built with cargo)
#
# llama-bench runs with its defaults (f16 KV cache, flash attention as its build decides,
# batch 2048 / micro-batch 512), one repetition per round; ours prefills in 512-token batches
# with an f32 KV cache, and decodes after an 8-token prompt. `scripts/install-llama-server`
# builds llama-bench without AMX kernels (llama.cpp 0.3.36's crash on AMX CPUs when weights
# are repacked); a build of your own with them may crash there.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
llama_bench="${1:?usage: compare-llama-bench.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf ...]}"
shift
[ "$#" -ge 1 ] || { echo "no model given" >&2; exit 2; }
rounds="${ROUNDS:-3}"
threads="${THREADS:-1,2}"
sizes="${SIZES:-512,2048}"
decode="${DECODE:-128}"

if [ -z "${BENCH_BIN:-}" ] || [ -z "${MEMBW_BIN:-}" ]; then
  (cd "$here/../../.." && cargo build --release -q -p shortlist-engine --example bench --example membw)
  BENCH_BIN="${BENCH_BIN:-${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/bench}"
  MEMBW_BIN="${MEMBW_BIN:-${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/membw}"
fi

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
max_threads="$(echo "$threads" | tr ',' '\n' | sort -n | tail -n 1)"
"$MEMBW_BIN" "$max_threads" | while IFS= read -r l; do echo "{\"membw\": $l}"; done | tee -a "$out"
for model in "$@"; do
  echo "{\"weights_bytes\": $(stat -c %s "$model"), \"model\": \"$(basename "$model" .gguf)\"}" | tee -a "$out"
done
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    name="$(basename "$model" .gguf)"
    for t in ${threads//,/ }; do
      load="$(cut -d' ' -f1 /proc/loadavg)"
      CANDLE_NUM_THREADS=$t RAYON_NUM_THREADS=$t "$BENCH_BIN" "$model" "$sizes" "$decode" \
        | while IFS= read -r l; do
            echo "{\"round\": $round, \"model\": \"$name\", \"threads\": $t, \"engine\": \"shortlist\", \"load\": $load, \"m\": $l}"
          done | tee -a "$out"
      load="$(cut -d' ' -f1 /proc/loadavg)"
      # The file's name only: a path of this machine means nothing elsewhere.
      "$llama_bench" -m "$model" -p "$sizes" -n "$decode" -t "$t" -r 1 -o jsonl 2>/dev/null \
        | sed 's#"model_filename": "[^"]*/#"model_filename": "#' \
        | while IFS= read -r l; do
            echo "{\"round\": $round, \"model\": \"$name\", \"threads\": $t, \"engine\": \"llama-bench\", \"load\": $load, \"lb\": $l}"
          done | tee -a "$out"
    done
  done
done

python3 - "$out" >&2 <<'PY'
import json, statistics, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
membw = {r["membw"]["threads"]: r["membw"]["read_gb_s"] for r in rows if "membw" in r}
weights = {r["model"]: r["weights_bytes"] for r in rows if "weights_bytes" in r}
vals = collections.defaultdict(list)
loads = []
for r in rows:
    if "engine" not in r:
        continue
    loads.append(r["load"])
    key = (r["model"], r["threads"])
    if r["engine"] == "shortlist":
        metric, v = r["m"]["metric"], r["m"]["value"]
        if not metric.endswith("_tok_s"):
            continue
    else:
        lb = r["lb"]
        if lb.get("n_gen", 0) > 0:
            metric = f"decode_{lb['n_gen']}_tok_s"
        else:
            metric = f"prefill_{lb['n_prompt']}_tok_s"
        v = lb["avg_ts"]
    vals[key + (metric, r["engine"])].append(v)
print(f"memory read bandwidth: " + ", ".join(f"{t} thread(s) {g:.1f} GB/s" for t, g in sorted(membw.items())))
print(f"load average during the runs: median {statistics.median(loads):.2f}, max {max(loads):.2f}")
print("| model | threads | metric | shortlist | llama-bench | ours / llama.cpp | ours / bandwidth bound |")
print("|---|---|---|---|---|---|---|")
for (model, t, metric, engine) in sorted(vals):
    if engine != "shortlist":
        continue
    ours = statistics.median(vals[(model, t, metric, "shortlist")])
    theirs = vals.get((model, t, metric, "llama-bench"))
    if not theirs:
        continue
    theirs = statistics.median(theirs)
    bound = ""
    if metric.startswith("decode") and t in membw and model in weights:
        bound = f"{ours / (membw[t] * 1e9 / weights[model]):.2f}"
    print(f"| {model} | {t} | {metric} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} | {bound} |")
PY
