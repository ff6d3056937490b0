#!/usr/bin/env bash
# The serving figures of docs/server.md ("Measured"), one after another, each with the load
# average beside it (the machine may be shared):
#   1. `ladle bench serve` against one `ladle serve` (default model) at 1, 16 and 256
#      concurrent streams (Chat), plus 16 streams through Responses and Messages;
#   2. `engine_bench`: device idle fraction with async scheduling on and off (reference model,
#      and the fake model with 100 µs of host work per output), and budget-tracking error.
# The 60 s load test is separate: bench/serve/load.sh.
#
#   bench/serve/figures.sh [build dir]      (default: build)
# Output: out/bench/serve/figures.txt
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$ROOT/build}"
ladle="$build/apps/ladle/ladle"
engine_bench="$build/bench/engine/engine_bench"
out="$ROOT/out/bench/serve"
mkdir -p "$out"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
log="$out/figures.txt"
: >"$log"
note() { echo "$*" | tee -a "$log"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

note "# ladle serving figures, $(date -u +%FT%TZ), $(nproc) CPUs"
"$ladle" serve --port 0 --max-queue 300 --max-running 256 --kv-blocks 640 --cost-model "$work/cost_model.json" \
  >"$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 1200); do
  port="$(grep -o 'server.listening host=[^ ]* port=[0-9]*' "$work/server.log" 2>/dev/null | head -1 | sed 's/.*port=//')" || true
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.25
done
[[ -n "$port" ]] || { echo "figures.sh: server did not start" >&2; exit 1; }
note "$(grep -o 'engine.cost_model.*' "$work/server.log")"

bench() {  # label, then bench serve flags
  local label="$1"; shift
  note "## $label: ladle bench serve --port P $* (load before: $(load))"
  "$ladle" bench serve --port "$port" "$@" 2>/dev/null | tee -a "$log"
  note "(load after: $(load))"
}
# A short warm-up so the first measured request does not pay first-touch costs.
"$ladle" bench serve --port "$port" -n 2 --input 16 --output 4 -c 2 >/dev/null 2>&1
bench "c=1" --api chat -n 8 --input 128 --output 32 -c 1
bench "c=16" --api chat -n 32 --input 128 --output 32 -c 16
bench "c=16 responses" --api responses -n 32 --input 128 --output 32 -c 16
bench "c=16 messages" --api messages -n 32 --input 128 --output 32 -c 16
bench "c=256" --api chat -n 256 --input 64 --output 16 -c 256
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""

note "## engine_bench --batch 8 (load before: $(load))"
"$engine_bench" --batch 8 --cost-model "$work/cost_model.json" 2>/dev/null | tee -a "$log"
note "## engine_bench --fake --host-us 100 --batch 8 (load before: $(load))"
"$engine_bench" --fake --host-us 100 --batch 8 2>/dev/null | tee -a "$log"
note "(load after: $(load))"
