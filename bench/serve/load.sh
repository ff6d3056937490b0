#!/usr/bin/env bash
# Load test of `ladle serve`: C concurrent streaming clients back to back for S seconds
# (`ladle bench serve --duration`), zero errors and flat memory. The server's RSS comes from
# its /metrics (process_resident_memory_bytes) once a second; the run fails when any request
# fails or when the RSS trend after the warm-up (a fifth of the run) exceeds a bound.
#
#   bench/serve/load.sh [options]
#     --ladle PATH        ladle binary (default: $LADLE_BUILD_DIR/apps/ladle/ladle, build dir "build")
#     -c N                concurrent streams (default 256)
#     -d SECONDS          duration (default 60)
#     --api A             chat, responses, messages or mixed (default: mixed = a third each,
#                         run as three concurrent `bench serve` processes)
#     --input N --output N   synthetic prompt / max_tokens per request (default 32 / 16)
#     --model default|tiny   the built-in model at its default size (default), or
#                         bench/serve/tiny_model.json (64 wide; barely faster on a CPU, where
#                         sampling over the 129,280-column vocabulary dominates each step)
#     --max-rss-growth-mb N  the flat-memory bound (default 32)
#     --out DIR           where the table, JSON and plot go (default out/bench/serve)
# Writes DIR/load.txt (the tables), DIR/load-<api>.json (per-request results and server
# samples) and DIR/load-<api>.svg (TTFT, ITL CDF, server RSS and tokens/s over time).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ladle="${LADLE_BUILD_DIR:-$ROOT/build}/apps/ladle/ladle"
clients=256
seconds=60
api=mixed
input=32
output=16
model=default
growth=32
out="$ROOT/out/bench/serve"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ladle) ladle="$2"; shift ;;
    -c) clients="$2"; shift ;;
    -d) seconds="$2"; shift ;;
    --api) api="$2"; shift ;;
    --input) input="$2"; shift ;;
    --output) output="$2"; shift ;;
    --model) model="$2"; shift ;;
    --max-rss-growth-mb) growth="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "load.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$ladle" ]] || { echo "load.sh: no ladle binary at $ladle (build it, or pass --ladle)" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

model_flags=()
[[ "$model" == tiny ]] && model_flags=(--model-config "$ROOT/bench/serve/tiny_model.json")
# Room for every stream at once: the queue and the running batch hold all clients, and the KV
# pool covers their prompts plus outputs (one 128-token block each at these lengths).
"$ladle" serve --port 0 "${model_flags[@]}" --max-queue "$((clients + 16))" --max-running "$clients" \
  --kv-blocks "$((clients * 2 + 64))" --io-threads 2 --cost-model "$work/cost_model.json" >"$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 1200); do
  port="$(grep -o 'server.listening host=[^ ]* port=[0-9]*' "$work/server.log" 2>/dev/null | head -1 | sed 's/.*port=//')" || true
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; echo "load.sh: server exited" >&2; exit 1; }
  sleep 0.25
done
[[ -n "$port" ]] || { echo "load.sh: server did not start" >&2; exit 1; }

{
  echo "# ladle serve load test: $clients streams x ${seconds} s, api $api, model $model, input $input, output $output"
  echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/load.txt"

run_bench() {  # api clients: one `bench serve` process
  "$ladle" bench serve --port "$port" --api "$1" -c "$2" --duration "$seconds" -n "$2" --input "$input" \
    --output "$output" --max-rss-growth-mb "$growth" --json "$out/load-$1.json" --plot "$out/load-$1.svg"
}
status=0
if [[ "$api" == mixed ]]; then
  third=$((clients / 3))
  pids=()
  for a in chat responses messages; do
    n=$third
    [[ "$a" == chat ]] && n=$((clients - 2 * third))
    run_bench "$a" "$n" >"$work/bench-$a.txt" 2>"$work/bench-$a.err" &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  for a in chat responses messages; do { echo "## $a"; cat "$work/bench-$a.txt"; } | tee -a "$out/load.txt"; done
else
  run_bench "$api" "$clients" 2>"$work/bench.err" | tee -a "$out/load.txt" || status=1
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
if [[ "$status" != 0 ]]; then
  echo "load.sh: FAILED (errors or growing memory; see above)" | tee -a "$out/load.txt"
  tail -20 "$work/server.log" >&2
else
  echo "load.sh: passed (zero errors, flat memory)" | tee -a "$out/load.txt"
fi
exit "$status"
