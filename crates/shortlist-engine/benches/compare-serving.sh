#!/usr/bin/env bash
# Serving comparison: shortlist-engine against llama.cpp's own server (llama-cpp-python[server])
# on the chapter's three practice traces (uniform, bursts, prefix-groups), scaled to what a small
# CPU serves, each driven by `shortlist bench` (open loop) with the same SLO. Reports, per server
# and trace: goodput beside throughput, attainment, TTFT p99, and prompt tokens actually computed
# (prefill work) beside the trace's distinct and sent input tokens.
#
# Usage: compare-serving.sh MODEL.gguf OUT_DIR
# Environment:
#   SHORTLIST     the shortlist binary (default: $CARGO_TARGET_DIR/debug/shortlist)
#   LLAMA_PYTHON  a python that can `import llama_cpp.server` (set PYTHONPATH and
#                 LLAMA_CPP_LIB_PATH as that install needs); leave unset to run ours only
#   THREADS       compute threads of each server (default 1: the other core drives the load)
#   REQUESTS      requests per trace (default 20), RATE mean req/s (default 0.2)
#   INPUT, OUTPUT distinct input and output tokens per trace (default 4000 and 800)
#   SHAPES        which traces to run (default "uniform bursts prefix-groups")
#   SERVE_ARGS    more options for our server (e.g. "--max-step-ms 0" to size chunks by tokens)
set -euo pipefail
model=${1:?usage: compare-serving.sh MODEL.gguf OUT_DIR}
out=${2:?usage: compare-serving.sh MODEL.gguf OUT_DIR}
mkdir -p "$out"
sl=${SHORTLIST:-${CARGO_TARGET_DIR:-$HOME/.cache/shortlist-target}/debug/shortlist}
threads=${THREADS:-1}
n=${REQUESTS:-20}
rate=${RATE:-0.2}
input=${INPUT:-4000}
output=${OUTPUT:-800}
shapes=${SHAPES:-uniform bursts prefix-groups}
read -r -a serve_args <<< "${SERVE_ARGS:-}"

cat > "$out/serving.slo.toml" <<'SLO'
name = "serving-cpu"
ttft_ms = 3000
max_itl_ms = 300
attainment = 0.9
SLO

# The practice traces scaled: n requests, `input` distinct input and `output` output tokens;
# prefix groups: 4 conversations sharing prefixes of a tenth of the distinct input each.
groups=4
bursts=$((n < 5 ? n : 5))
prefix=$((input / 10))
for shape in uniform bursts prefix-groups; do
  "$sl" trace synth --shape "$shape" --requests "$n" --input-tokens "$input" \
    --output-tokens "$output" --rate "$rate" --seed 11 --groups "$groups" --bursts "$bursts" \
    --prefix-tokens "$prefix" -o "$out/$shape.trace.jsonl" --json > "$out/$shape.stats.json"
done

wait_up() {
  for _ in $(seq 1 240); do
    if curl -fsS "http://127.0.0.1:$1/v1/models" > /dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "server on port $1 did not come up" >&2
  return 1
}

prompt_tokens_ours() {
  curl -fsS "http://127.0.0.1:$1/metrics" | awk '/^vllm:prompt_tokens_total/ {print $2}'
}

# No self-calibration: at these rates (well under 1 req/s) it would only measure how busy the
# host is; each run's own schedule-lag p99 still marks it client-bound if the client fell behind.
run_trace() { # server port shape [bench options]
  local server=$1 port=$2 shape=$3
  shift 3
  "$sl" bench --quiet --target "http://127.0.0.1:$port/v1/completions" --model bench \
    --trace "$out/$shape.trace.jsonl" --slo "$out/serving.slo.toml" --timeout-s 300 \
    --no-calibrate "$@" -o "$out/$server-$shape.records.jsonl" --json \
    > "$out/$server-$shape.report.json" || true
}

# A fresh server per trace: a warm prefix cache from the previous trace (the synthesized traces
# reuse request ids, hence prompt text) would flatter the next one.
port=18491
for shape in $shapes; do
  CANDLE_NUM_THREADS=$threads RAYON_NUM_THREADS=$threads \
    "$sl" engine serve --model "$model" --addr "127.0.0.1:$port" --threads "$threads" \
    "${serve_args[@]}" > "$out/ours-$shape.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  wait_up $port
  run_trace ours $port "$shape"
  prompt_tokens_ours $port > "$out/ours-$shape.prefill_tokens"
  kill $server; wait $server 2>/dev/null || true
done

# llama.cpp's server: one sequence at a time, reusing the previous prompt's KV for a common
# prefix; its verbose timings say how many prompt tokens each request evaluated. It answers 400
# to an x-request-id that is not a UUID, hence `--request-ids uuid`.
if [ -n "${LLAMA_PYTHON:-}" ]; then
  port=18492
  for shape in $shapes; do
    "$LLAMA_PYTHON" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port $port \
      --n_threads "$threads" --n_threads_batch "$threads" --n_ctx 8192 --verbose true \
      > "$out/llama-$shape.log" 2>&1 &
    server=$!
    wait_up $port
    run_trace llama $port "$shape" --request-ids uuid
    kill $server; wait $server 2>/dev/null || true
    # Each request logs "N prefix-match hit, remaining M prompt tokens to eval" except the first
    # of a fresh server, whose full prompt shows in its "prompt eval time = … / M tokens" line.
    python3 - "$out/llama-$shape.log" > "$out/llama-$shape.prefill_tokens" <<'PY'
import re, sys
total, matched = 0, False
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"prefix-match hit, remaining (\d+) prompt tokens", line)
    if m:
        total += int(m.group(1)); matched = True; continue
    m = re.search(r"prompt eval time = .*/\s*(\d+) tokens", line)
    if m:
        if not matched:
            total += int(m.group(1))
        matched = False
print(total)
PY
  done
fi

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"{'server':8} {'trace':14} {'thru/s':>7} {'good/s':>7} {'attain':>7} {'TTFT p99':>9} "
      f"{'prefill tok':>11} {'distinct':>8} {'sent':>7} {'prefill/distinct':>16}")
print("(tokens: prefill = prompt tokens the server computed; distinct and sent as the trace "
      "counts them, each shared prefix once for distinct)")
for server in ("ours", "llama"):
    for shape in ("uniform", "bursts", "prefix-groups"):
        rep = os.path.join(out, f"{server}-{shape}.report.json")
        if not os.path.exists(rep) or os.path.getsize(rep) == 0:
            continue
        r = json.load(open(rep))
        stats = json.load(open(os.path.join(out, f"{shape}.stats.json")))
        prefill = int(open(os.path.join(out, f"{server}-{shape}.prefill_tokens")).read().strip() or 0)
        distinct = stats["input_tokens"]["distinct"]
        sent = stats["input_tokens"]["sent"]
        p99 = r["latency"]["ttft"]["p99"]
        att = r["goodput"]["attainment"]
        print(f"{server:8} {shape:14} {r['throughput']['requests_per_s']:7.3f} "
              f"{r['goodput']['requests_per_s']:7.3f} {att if att is None else f'{att:.0%}':>7} "
              f"{'-' if p99 is None else f'{p99:.2f} s':>9} {prefill:>11} {distinct:>8} {sent:>7} "
              f"{prefill / distinct if distinct else float('nan'):16.2f}")
PY
