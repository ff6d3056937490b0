#!/usr/bin/env bash
# `ladle cluster` end to end: cluster_run.sh <ladle binary> [streams] [max_tokens]
# 1. The official SDK suite (e2e.mjs, unchanged) against `ladle cluster --prefill 2 --decode 2`
#    (and a one-engine cluster with --max-queue 1 for its back-pressure checks).
# 2. The kill test on another `--prefill 2 --decode 2` cluster: 128 concurrent greedy streams, a
#    decode engine killed with SIGKILL mid-stream: no client-visible error, nothing lost or
#    repeated, every stream's tokens equal to its unfaulted reference (cluster_kill.py). The long
#    form, LADLE_E2E_CLUSTER_DURATION=60, then holds the 128 streams for 60 s (each client resending)
#    and kills the other decode engine at 30 s, with the same checks on every answer.
# 3. The killed engine is restarted by the cluster and rejoins the entrypoint.
# 4. SIGTERM stops the cluster and every process it started.
# The built-in model at a tiny size (bench/serve/tiny_model.json) so it runs on 2 cores.
# Exits 77 (skipped) when node/npm or the tokenizer are missing, except under CI=true.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ladle="$1"
streams="${2:-128}"
max_tokens="${3:-48}"
E2E_NAME=e2e_cluster
source "$here/common.sh"
require_node
install_pinned "$here" npm
[[ -f "${LADLE_TOKENIZER:-$root/.cache/tokenizers/deepseek-v3/tokenizer.json}" ]] || skip_or_fail "tokenizer missing (run scripts/setup)"

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
key="e2e-$RANDOM$RANDOM"
tiny="$root/bench/serve/tiny_model.json"

# start_cluster NAME FLAGS...: starts a cluster, waits (<= 300 s) for its ready file; sets $port.
start_cluster() {
  local name="$1"; shift
  LADLE_API_KEYS="${cluster_keys-$key}" "$ladle" cluster --port 0 --model-config "$tiny" --ready-file "$work/$name.ready" "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=("$!")
  local pid="$!"
  for _ in $(seq 1 1200); do
    if [[ -f "$work/$name.ready" ]]; then
      port="$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['port'])" "$work/$name.ready")"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then cat "$work/$name.log" >&2; echo "e2e_cluster: $name exited during start-up" >&2; exit 1; fi
    sleep 0.25
  done
  echo "e2e_cluster: $name did not start within 300 s" >&2
  exit 1
}

start_cluster main --prefill 2 --decode 2 --max-queue 512 --max-running 64 --kv-blocks 512
main_port="$port"; main_pid="${pids[0]}"
start_cluster small --prefill 0 --decode 0 --both 1 --max-queue 1
small_port="$port"; small_pid="${pids[1]}"
echo "e2e_cluster: clusters on ports $main_port (prefill 2 + decode 2) and $small_port (both 1, max-queue 1)"
status=0

node "$here/e2e.mjs" "http://127.0.0.1:$main_port" "http://127.0.0.1:$small_port" "$key" 5 32 || status=1

# The kill test's client sends no key: a keyless cluster.
cluster_keys="" start_cluster kill --prefill 2 --decode 2 --max-queue 512 --max-running 128 --kv-blocks 1024 --dead-after-ms 1000
kill_port="$port"; kill_pid="${pids[2]}"
python3 "$here/cluster_kill.py" "$kill_port" "$work/kill.ready" "$streams" "$max_tokens" decode-0 || status=1
if [[ -n "${LADLE_E2E_CLUSTER_DURATION:-}" ]]; then
  python3 "$here/cluster_kill.py" "$kill_port" "$work/kill.ready" "$streams" "$max_tokens" decode-1 \
    --duration "$LADLE_E2E_CLUSTER_DURATION" || status=1
fi

# The killed engine comes back on its port and rejoins (a second engine_alive for it).
rejoined=0
for _ in $(seq 1 240); do
  if [[ "$(grep -c 'cluster.engine_alive .*name=decode-0' "$work/kill.log")" -ge 2 ]]; then rejoined=1; break; fi
  sleep 0.25
done
if [[ "$rejoined" == 1 ]]; then echo "ok   the killed decode engine restarted and rejoined"; else echo "FAIL decode-0 did not rejoin"; status=1; fi
if curl -fsS -X POST "http://127.0.0.1:$kill_port/v1/chat/completions" -H 'Content-Type: application/json' \
     -d '{"model":"ladle","messages":[{"role":"user","content":"after"}],"max_tokens":4}' | grep -q '"completion_tokens":4'; then
  echo "ok   requests are served after the rejoin"
else
  echo "FAIL no answer after the rejoin"; status=1
fi

# SIGTERM: each cluster drains, exits 0 and leaves none of its processes behind.
for name in main small kill; do
  pid_var="${name}_pid"; pid="${!pid_var}"
  children="$(python3 -c "import json,sys;r=json.load(open(sys.argv[1]));print(' '.join(str(e['pid']) for e in r['engines']), r['kv_fetcher_pid'])" "$work/$name.ready")"
  kill -TERM "$pid"
  if wait "$pid"; then echo "ok   SIGTERM: $name exits 0"; else echo "FAIL $name exit code $?"; status=1; fi
  for c in $children; do
    for _ in $(seq 1 100); do kill -0 "$c" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$c" 2>/dev/null; then echo "FAIL $name left process $c running"; status=1; fi
  done
done
pids=()
if [[ "$status" != 0 ]]; then
  for name in main kill; do echo "---- $name cluster log (tail) ----" >&2; tail -40 "$work/$name.log" >&2; done
fi
exit "$status"
