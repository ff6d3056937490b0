#!/usr/bin/env bash
# Remote vision encoders end to end (issue 18): vision_encoder_run.sh <ladle binary>
# 1. Two `ladle vision-encoder --port 0 --workers 2` machines and `ladle serve --vision-encoder A
#    --vision-encoder B`; chat requests with data-URL PNG images are answered.
# 2. The kill test: ~20 concurrent image requests, encoder A killed with SIGKILL while they are in
#    flight; every request still succeeds (A's images re-routed to B), and the server logs A dead.
# 3. With B alone, new image requests all succeed.
# 4. With both killed, an image request gets a clear 503 naming the machines, promptly, and a
#    text-only request is still served. SIGTERM stops the server, and a third encoder, cleanly.
# The built-in model at a tiny size (bench/serve/tiny_model.json) on both sides, so the encoders'
# fingerprint matches the server's. Bounded (< 2 min); every process is stopped by its PID.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ladle="$1"
E2E_NAME=e2e_vision_encoder
source "$here/common.sh"
[[ -f "${LADLE_TOKENIZER:-$root/.cache/tokenizers/deepseek-v3/tokenizer.json}" ]] || skip_or_fail "tokenizer missing (run scripts/setup)"
command -v python3 >/dev/null 2>&1 || skip_or_fail "python3 not found"

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
tiny="$root/bench/serve/tiny_model.json"

# start_encoder NAME: starts a vision encoder on any port; sets $enc_port and $enc_pid.
start_encoder() {
  local name="$1"
  "$ladle" vision-encoder --port 0 --workers 2 --model-config "$tiny" >"$work/$name.log" 2>&1 &
  enc_pid=$!
  pids+=("$enc_pid")
  for _ in $(seq 1 300); do
    enc_port=$(grep -o 'vision_encoder.listening host=[^ ]* port=[0-9]*' "$work/$name.log" | head -1 | sed 's/.*port=//') || true
    [[ -n "$enc_port" ]] && return 0
    if ! kill -0 "$enc_pid" 2>/dev/null; then cat "$work/$name.log" >&2; echo "e2e_vision_encoder: $name exited" >&2; exit 1; fi
    sleep 0.1
  done
  echo "e2e_vision_encoder: $name did not start within 30 s" >&2
  exit 1
}

start_encoder enc_a
a_port="$enc_port"; a_pid="$enc_pid"
start_encoder enc_b
b_port="$enc_port"; b_pid="$enc_pid"
start_ladle "$ladle" "$work/serve.log" --model-version v4 --model-config "$tiny" --eos-logit-bias -100 \
  --vision-encoder "127.0.0.1:$a_port" --vision-encoder "127.0.0.1:$b_port" --vision-encoder-cooldown-ms 5000
serve_port="$port"; serve_pid="$pid"
echo "e2e_vision_encoder: encoders on $a_port (pid $a_pid) and $b_port (pid $b_pid), serve on $serve_port"

status=0
timeout 100 python3 - "$serve_port" "$a_pid" "$b_pid" "$a_port" "$b_port" "$work/serve.log" <<'EOF' || status=1
import base64, json, os, signal, struct, sys, threading, time, urllib.error, urllib.request, zlib

port, a_pid, b_pid, a_port, b_port, serve_log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
failures = []

def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)

def png(w, h, seed):
    """An RGB PNG whose pixels depend on seed, so every request's image is its own. Rows are
    slices of one seeded stripe (cheap in pure Python, so 20 images are ready at once)."""
    stripe = bytes(((i * 7 + seed * 13) ^ (i >> 3) ^ seed) & 255 for i in range(3 * (w + h)))
    rows = bytearray()
    for y in range(h):
        rows.append(0)
        rows += stripe[3 * y:3 * (y + w)]
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(rows), 1)) + chunk(b"IEND", b""))

def body(seed, side=640):
    url = "data:image/png;base64," + base64.b64encode(png(side, side, seed)).decode()
    return json.dumps({"model": "ladle", "max_tokens": 4, "temperature": 0,
                       "messages": [{"role": "user", "content": [{"type": "text", "text": f"what is in picture {seed}?"},
                                                                 {"type": "image_url", "image_url": {"url": url}}]}]}).encode()

def chat(seed_or_body, timeout=90):
    data = seed_or_body if isinstance(seed_or_body, bytes) else body(seed_or_body)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data,
                                 {"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = json.load(r)
            return r.status, out, time.time() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), time.time() - t0

def in_flight():
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("ladle_vision_in_flight "):
                return float(line.split()[1])
    return 0.0

def run_all(seeds, during=None):
    # The bodies first: built inside the threads, they would trickle out one by one (the GIL).
    bodies = [body(s) for s in seeds]
    out = [None] * len(seeds)
    def one(i):
        out[i] = chat(bodies[i])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(seeds))]
    for t in ts:
        t.start()
    if during:
        during()
    for t in ts:
        t.join(95)
    return out

# 1. Both encoders up.
code, out, _ = chat(1)
check(code == 200 and out["usage"]["prompt_tokens"] > 256, f"an image request through the remote encoders: {code} {out.get('usage')}")

# 2. Kill A (SIGKILL) while ~20 image requests are in the image stage.
killed_with = []
def kill_a():
    deadline = time.time() + 20
    while time.time() < deadline and in_flight() < 10:
        time.sleep(0.01)
    n = in_flight()
    os.kill(a_pid, signal.SIGKILL)
    killed_with.append(n)
    print(f"     killed encoder A (pid {a_pid}) with {n:.0f} requests in the image stage", flush=True)
results = run_all(list(range(100, 120)), kill_a)
check(killed_with and killed_with[0] >= 10, "the kill came while at least 10 requests were in the image stage")
bad = [(i, r[0], r[1]) for i, r in enumerate(results) if r is None or r[0] != 200]
check(not bad, f"20 concurrent image requests, encoder A killed mid-flight: all 200 (bad: {bad[:3]})")
log = open(serve_log, encoding="utf-8", errors="replace").read()
dead = [l for l in log.splitlines() if f"vision_remote.machine_dead address=127.0.0.1:{a_port}" in l]
check(bool(dead), "the server marked A dead and re-routed its images" + (f" ({dead[0].split(' error=')[-1]})" if dead else ""))

# 3. B alone serves every new request.
results = run_all(list(range(200, 206)))
check(all(r is not None and r[0] == 200 for r in results), f"6 requests with only B alive: {[r and r[0] for r in results]}")

# 4. Both dead: a clear 503 naming the machines, promptly; text still works.
os.kill(b_pid, signal.SIGKILL)
time.sleep(0.2)
code, out, secs = chat(300)
msg = json.dumps(out)
check(code == 503 and "no vision encoder machine is reachable" in msg and a_port in msg and b_port in msg and secs < 20,
      f"both encoders dead: {code} in {secs:.1f} s: {msg[:300]}")
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                             json.dumps({"model": "ladle", "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "text only"}]}).encode(),
                             {"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as r:
    check(r.status == 200, "a text-only request with no encoder alive: 200")
sys.exit(1 if failures else 0)
EOF

# SIGTERM: the server drains and exits.
kill -TERM "$serve_pid" 2>/dev/null || true
for _ in $(seq 1 300); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$serve_pid" 2>/dev/null; then echo "FAIL serve did not exit on SIGTERM"; status=1; else echo "ok   serve exited on SIGTERM"; fi
# SIGTERM: an encoder stops gracefully (exit 0).
start_encoder enc_c
kill -TERM "$enc_pid"
c_rc=0
wait "$enc_pid" || c_rc=$?
if [[ "$c_rc" == 0 ]] && grep -q 'vision_encoder.exit code=0' "$work/enc_c.log"; then
  echo "ok   a vision encoder exits 0 on SIGTERM"
else
  echo "FAIL vision encoder on SIGTERM: exit $c_rc"; status=1
fi
if [[ "$status" != 0 ]]; then
  echo "--- serve log (tail)"; tail -40 "$work/serve.log"
  echo "--- encoder B log (tail)"; tail -20 "$work/enc_b.log"
fi
exit "$status"
