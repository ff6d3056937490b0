#!/usr/bin/env bash
# Structured output end to end: structured_run.sh <ladle binary>
# Starts a `ladle grammar-worker` and a `ladle serve --grammar-worker` (random loopback ports,
# read from the logs), runs structured.mjs with the official SDKs (tests/e2e/package.json)
# and ajv (tests/e2e/ajv), then stops the worker and checks the server falls back to
# compiling in-process. Exits 77 (skipped) when node/npm or the tokenizer are missing, except
# under CI=true where that is a failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ladle="$1"

E2E_NAME="structured e2e"
source "$here/common.sh"
require_node
install_pinned "$here" npm
install_pinned "$here/ajv" ajv

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits for "<event> host=... port=N" in a log; sets $port.
wait_port() {
  local log="$1" event="$2" pid="$3"
  for _ in $(seq 1 1200); do
    port="$(grep -o "$event host=[^ ]* port=[0-9]*" "$log" | head -1 | sed 's/.*port=//')" || true
    if [[ -n "$port" ]]; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      if grep -qi "tokenizer" "$log" && grep -qi "no such file\|cannot open\|not found" "$log"; then
        skip_or_fail "tokenizer missing (run scripts/setup)"
      fi
      echo "structured e2e: process exited during start-up" >&2
      exit 1
    fi
    sleep 0.25
  done
  echo "structured e2e: no '$event' within 300 s" >&2
  exit 1
}

"$ladle" grammar-worker --port 0 >"$work/worker.log" 2>&1 &
worker_pid="$!"
pids+=("$worker_pid")
wait_port "$work/worker.log" grammar_worker.listening "$worker_pid"
worker_port="$port"

key="so-$RANDOM$RANDOM"
LADLE_API_KEYS="$key" "$ladle" serve --port 0 --chunk-policy fixed \
  --grammar-worker "127.0.0.1:$worker_port" >"$work/server.log" 2>&1 &
server_pid="$!"
pids+=("$server_pid")
wait_port "$work/server.log" server.listening "$server_pid"
echo "structured e2e: server on port $port, grammar worker on port $worker_port"

status=0
node "$here/structured.mjs" "http://127.0.0.1:$port" "$key" || status=1

kill -TERM "$worker_pid"
if wait "$worker_pid"; then echo "ok   grammar worker exits 0 on SIGTERM"; else echo "FAIL grammar worker exit code $?"; status=1; fi
node "$here/structured.mjs" "http://127.0.0.1:$port" "$key" --fallback || status=1

kill -TERM "$server_pid"
if wait "$server_pid"; then echo "ok   server drains and exits 0"; else echo "FAIL server exit code $?"; status=1; fi
pids=()
if [[ "$status" != 0 ]]; then
  echo "---- server log (tail) ----" >&2
  tail -40 "$work/server.log" >&2
  echo "---- worker log (tail) ----" >&2
  tail -20 "$work/worker.log" >&2
fi
exit "$status"
