#!/usr/bin/env bash
# End-to-end checks: run.sh <ladle binary> [load seconds] [load clients]
# Installs the pinned SDKs (npm ci, only when node_modules is missing or older than the lock
# file), starts two `ladle serve` instances on random loopback ports (--port 0; the port is
# read from the log), runs e2e.mjs against them, then stops them with SIGTERM and checks they
# drain and exit 0. Exits 77 (skipped) when node/npm or the tokenizer are missing, except
# under CI=true where that is a failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ladle="$1"
load_seconds="${2:-10}"
load_clients="${3:-256}"

E2E_NAME=e2e
source "$here/common.sh"
require_node
install_pinned "$here" npm

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

key="e2e-$RANDOM$RANDOM"
# Starts a server; sets $port and appends its pid. Extra flags follow the log file name.
start_server() {
  local log="$1"; shift
  LADLE_API_KEYS="$key" "$ladle" serve --port 0 --cost-model "$work/cost_model.json" "$@" >"$log" 2>&1 &
  pids+=("$!")
  local pid="$!"
  for _ in $(seq 1 1200); do
    port="$(grep -o 'server.listening host=[^ ]* port=[0-9]*' "$log" | head -1 | sed 's/.*port=//')" || true
    if [[ -n "$port" ]]; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      if grep -q "tokenizer" "$log" && grep -qi "no such file\|cannot open\|not found" "$log"; then
        skip_or_fail "tokenizer missing (run scripts/setup)"
      fi
      echo "e2e: server exited during start-up" >&2
      exit 1
    fi
    sleep 0.25
  done
  echo "e2e: server did not start within 300 s" >&2
  exit 1
}

# The main server holds every load client at once (queue and running batch).
start_server "$work/main.log" --max-queue $((load_clients + 32)) --max-running "$load_clients" --kv-blocks $((load_clients * 2 + 128)) --log-format json
main_port="$port"; main_pid="${pids[0]}"
start_server "$work/small.log" --max-queue 1
small_port="$port"; small_pid="${pids[1]}"
echo "e2e: servers on ports $main_port (main) and $small_port (max-queue 1)"

curl_ok=1
if command -v curl >/dev/null 2>&1; then
  curl -fsS "http://127.0.0.1:$main_port/health" >/dev/null || curl_ok=0
fi
[[ "$curl_ok" == 1 ]] || { echo "e2e: /health failed" >&2; exit 1; }

# HTTP/1.0 (no chunked encoding): curl's own HTTP/1.0 parser reads a Content-Length reply and a
# close-delimited stream.
if command -v curl >/dev/null 2>&1; then
  body='{"model":"ladle","messages":[{"role":"user","content":"Hi"}],"max_tokens":3'
  plain="$(curl -sS --http1.0 -D "$work/h10.head" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d "$body}" "http://127.0.0.1:$main_port/v1/chat/completions")" || plain=""
  streamed="$(curl -sS --http1.0 -N -D "$work/h10s.head" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d "$body,\"stream\":true}" "http://127.0.0.1:$main_port/v1/chat/completions")" || streamed=""
  if head -1 "$work/h10.head" | grep -q '^HTTP/1.0 200' && grep -qi '^content-length:' "$work/h10.head" &&
     [[ "$plain" == *'"completion_tokens":3'* ]] &&
     head -1 "$work/h10s.head" | grep -q '^HTTP/1.0 200' && ! grep -qi '^transfer-encoding' "$work/h10s.head" &&
     [[ "$streamed" == *'data: [DONE]'* ]]; then
    echo "ok   HTTP/1.0 client (curl --http1.0): Content-Length reply and close-delimited stream"
  else
    echo "FAIL HTTP/1.0 client"; cat "$work/h10.head" "$work/h10s.head"; echo "$plain"; echo "$streamed"
    http10_failed=1
  fi
fi

status="${http10_failed:-0}"
# A 300 MiB body from a client that sends it all before reading (Python http.client): 413 and a
# lingering close, so the client reads the answer.
python3 "$here/big_body.py" "$main_port" "$key" || status=1
node "$here/e2e.mjs" "http://127.0.0.1:$main_port" "http://127.0.0.1:$small_port" "$key" \
  "$load_seconds" "$load_clients" || status=1

# SIGTERM drains: both servers must exit 0 on their own.
for pid in "$main_pid" "$small_pid"; do
  kill -TERM "$pid"
  if wait "$pid"; then echo "ok   SIGTERM drain exits 0 (pid $pid)"; else echo "FAIL SIGTERM exit code $? (pid $pid)"; status=1; fi
done
pids=()
# The server's own lines in the JSON log must parse and carry a request id.
if node -e '
  const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l.includes("\"msg\":\"request."));
  let n = 0;
  for (const l of lines) { const o = JSON.parse(l); if (!/ rid=\S+/.test(o.msg)) throw new Error("no rid: " + l); n++; }
  if (n === 0) throw new Error("no request lines");
  console.log("ok   " + n + " request log lines are valid JSON with a request id");
' "$work/main.log"; then :; else echo "FAIL JSON request logs"; status=1; fi
if grep -q "$key" "$work/main.log" "$work/small.log"; then
  echo "FAIL an API key appeared in the server log"
  status=1
else
  echo "ok   API keys never logged"
fi
if [[ "$status" != 0 ]]; then
  echo "---- main server log (tail) ----" >&2
  tail -50 "$work/main.log" >&2
fi
exit "$status"
