#!/usr/bin/env bash
# Image input end to end (issue 18): vision_run.sh <ladle binary>
# Starts three `ladle serve` instances on random loopback ports (--port 0; the port is read from
# the log) with the built-in model and its vision tower:
#   A  --model-version v4 --allow-private-image-urls, small limits (4 images, 1 MiB, 4096 patches,
#      2 s fetch timeout, 2 redirects);
#   B  --model-version v4 without --allow-private-image-urls (the SSRF guard);
#   C  --model-version v3.2 (no image token: images are refused).
# vision.mjs drives them with the official openai and @anthropic-ai/sdk clients and runs its own
# image server on 127.0.0.1. Then SIGTERM, and each server must drain and exit 0. Exits 77
# (skipped) when node/npm or the tokenizer are missing, except under CI=true. About a minute.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ladle="${1:?usage: vision_run.sh path/to/ladle}"

E2E_NAME="vision e2e"
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

# launch LOG flags...: starts `ladle serve --port 0 FLAGS` in the background; sets $pid.
launch() {
  local log="$1"; shift
  "$ladle" serve --port 0 --kv-blocks 64 --max-running 8 --cost-model "$work/cost_model.json" "$@" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
}
# wait_port LOG PID: waits (at most 180 s) for `server.listening ... port=N`; sets $port.
wait_port() {
  local log="$1" p="$2"
  for _ in $(seq 1 1800); do
    port="$(grep -o 'server.listening host=[^ ]* port=[0-9]*' "$log" | head -1 | sed 's/.*port=//')" || true
    [[ -n "$port" ]] && return 0
    if ! kill -0 "$p" 2>/dev/null; then
      cat "$log" >&2
      if grep -q "tokenizer" "$log" && grep -qi "no such file\|cannot open\|not found" "$log"; then
        skip_or_fail "tokenizer missing (run scripts/setup)"
      fi
      echo "vision e2e: server exited during start-up ($log)" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "vision e2e: server did not start within 180 s ($log)" >&2
  exit 1
}

# A first: it profiles the cost model and saves it; B and C load it.
launch "$work/a.log" --model-version v4 --allow-private-image-urls --max-images-per-request 4 \
  --image-max-bytes 1048576 --max-image-patches 4096 --image-fetch-timeout-ms 2000 --image-max-redirects 2
a_pid=$pid
wait_port "$work/a.log" "$a_pid"
a_port=$port
launch "$work/b.log" --model-version v4
b_pid=$pid
launch "$work/c.log" --model-version v3.2
c_pid=$pid
wait_port "$work/b.log" "$b_pid"
b_port=$port
wait_port "$work/c.log" "$c_pid"
c_port=$port
grep -q 'serve.vision enabled=true' "$work/a.log" || { echo "vision e2e: server A has no vision tower" >&2; cat "$work/a.log" >&2; exit 1; }
echo "vision e2e: servers on ports $a_port (A: v4, private URLs allowed), $b_port (B: v4, SSRF guard), $c_port (C: v3.2)"

status=0
timeout 240 node "$here/vision.mjs" "http://127.0.0.1:$a_port" "http://127.0.0.1:$b_port" "http://127.0.0.1:$c_port" || status=1

# SIGTERM drains: every server must exit 0 on its own, within 60 s.
for p in "$a_pid" "$b_pid" "$c_pid"; do kill -TERM "$p"; done
for p in "$a_pid" "$b_pid" "$c_pid"; do
  if ! timeout 60 tail --pid="$p" -f /dev/null; then echo "FAIL server $p did not exit within 60 s of SIGTERM"; status=1; continue; fi
  if wait "$p"; then echo "ok   SIGTERM drain exits 0 (pid $p)"; else echo "FAIL SIGTERM exit code $? (pid $p)"; status=1; fi
done
pids=()
if [[ "$status" != 0 ]]; then
  for name in a b c; do
    echo "---- server ${name^^} log (tail) ----" >&2
    tail -30 "$work/$name.log" >&2
  done
fi
exit "$status"
