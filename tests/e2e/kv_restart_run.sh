#!/usr/bin/env bash
# Prefix hits across a restart (issue 14): `ladle serve --kv-store fs:DIR --exact-replay` answers
# a long prompt, its blocks reach the store, the server is killed with SIGKILL, and a new server
# on the same store answers the same request from the store's blocks: the same greedy text,
# usage.prompt_tokens_details.cached_tokens > 0 and ladle_prefix_hit_tokens_store_total > 0.
# A third server with the bounded replay (the default) hits too. About 15 s on 2 cores.
set -euo pipefail
LADLE=${1:?usage: kv_restart_run.sh path/to/ladle}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_NAME="kv restart"
source "$here/common.sh"
command -v python3 >/dev/null || { echo "python3 missing" >&2; [ "${CI:-}" = true ] && exit 1; exit 77; }
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/store"

start() {  # start LOG flags...: sets $port and $pid
  local log="$1"; shift
  start_ladle "$LADLE" "$log" --model-config "$here/../../bench/serve/tiny_model.json" --chunk-policy fixed \
    --kv-store "fs:$work/store" "$@"
}

ask() {  # ask PORT OUT [VARIANT]: one greedy chat request, the JSON response to OUT
  python3 - "$1" "$2" "${3:-}" <<'PY'
import json, sys, urllib.request
port, out, variant = sys.argv[1], sys.argv[2], sys.argv[3]
text = variant + " ".join(f"Paragraph {i}: the persistent KV store keeps every full block of this prompt." for i in range(60))
body = {"model": "ladle", "temperature": 0, "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    open(out, "w").write(r.read().decode())
PY
}

metric() {  # metric PORT NAME
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
port, name = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
    for line in r.read().decode().splitlines():
        if line.startswith(name + " "):
            print(line.split()[1]); break
    else:
        print(0)
PY
}

start "$work/a.log" --exact-replay
ask "$port" "$work/a.json"
ask "$port" "$work/a2.json" "Second: "  # stored for the fetcher-restart check below
blocks=$(python3 -c "import json,sys; print(sum(json.load(open(p))['usage']['prompt_tokens'] // 128 for p in sys.argv[1:]))" "$work/a.json" "$work/a2.json")
for _ in $(seq 1 300); do
  w=$(metric "$port" ladle_kv_store_writes_total)
  [[ "${w%.*}" -ge "$blocks" ]] && break
  sleep 0.1
done
[[ "${w%.*}" -ge "$blocks" ]] || { echo "only $w of $blocks blocks reached the store" >&2; exit 1; }
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
killed=$pid
# Its private directory (fetcher socket, cost model) is left behind by SIGKILL...
compgen -G "/tmp/ladle-serve-$killed-*" > /dev/null || { echo "no private directory of server $killed" >&2; exit 1; }

start "$work/b.log" --exact-replay
ask "$port" "$work/b.json"
# ... and removed by the next server's start, its process being gone.
if compgen -G "/tmp/ladle-serve-$killed-*" > /dev/null; then
  echo "the private directory of killed server $killed was not swept" >&2; exit 1
fi
hit=$(metric "$port" ladle_prefix_hit_tokens_store_total)
kill -TERM "$pid"; wait "$pid" || { echo "server b did not exit 0 on SIGTERM" >&2; exit 1; }
start "$work/c.log"
ask "$port" "$work/c.json"
hit_c=$(metric "$port" ladle_prefix_hit_tokens_store_total)
# The traffic class (the store's TTL class) from the header or metadata.ladle_traffic_class; an
# unknown class is a 400 in the API's shape.
python3 - "$port" <<'PY'
import json, sys, urllib.request, urllib.error
port = sys.argv[1]
def post(body, headers={}):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
text = " ".join(f"Agent step {i}: an agent's blocks live three days in the store, a chat's seven." for i in range(30))
msg = lambda t: {"model": "ladle", "max_tokens": 2, "messages": [{"role": "user", "content": t}]}
st, _ = post(msg(text), {"x-ladle-traffic-class": "agent"})
assert st == 200, st
st, _ = post({**msg("metadata " + text), "metadata": {"ladle_traffic_class": "agent"}})
assert st == 200, st
st, err = post({**msg("x"), "metadata": {"ladle_traffic_class": "batch"}})
assert st == 400 and err["error"]["type"] == "invalid_request_error" and "traffic class" in err["error"]["message"], (st, err)
PY
# The store is owned by a `ladle kv-fetcher` child. kill -9 it: the next request that needs the
# store recomputes with the same text, nothing hangs, the fetcher is restarted (a new pid), the
# engine reconnects, and a request for the second primed prompt hits from the store again.
fpid=$(pgrep -P "$pid" -f kv-fetcher || true)
[[ -n "$fpid" ]] || { echo "no kv-fetcher child of $pid" >&2; exit 1; }
kill -9 "$fpid"
ask "$port" "$work/d.json" "Third: "  # not in the store: recomputes whatever the fetcher's state
for _ in $(seq 1 100); do
  fpid2=$(pgrep -P "$pid" -f kv-fetcher || true)
  [[ -n "$fpid2" && "$fpid2" != "$fpid" ]] && break
  sleep 0.1
done
[[ -n "$fpid2" && "$fpid2" != "$fpid" ]] || { echo "the kv-fetcher was not restarted" >&2; exit 1; }
grep -q "kvfetch.exited" "$work/c.log" || { echo "no kvfetch.exited in the log" >&2; exit 1; }
for _ in $(seq 1 100); do  # the engine's writer thread reconnects within reconnect_every
  grep -q "kvfetch.reconnected" "$work/c.log" && break
  ask "$port" "$work/d.json" "Third: "
  sleep 0.1
done
grep -q "kvfetch.reconnected" "$work/c.log" || { echo "the engine did not reconnect to the new fetcher" >&2; exit 1; }
reconnects=$(metric "$port" ladle_kv_fetcher_reconnects_total); up=$(metric "$port" ladle_kv_fetcher_up)
[[ "${reconnects%.*}" -ge 1 && "${up%.*}" -eq 1 ]] ||
  { echo "/metrics does not show the fetcher reconnected and up" >&2; exit 1; }
ask "$port" "$work/e.json" "Second: "
hit_e=$(metric "$port" ladle_prefix_hit_tokens_store_total)
python3 - "$work/a2.json" "$work/e.json" "$hit_c" "$hit_e" <<'PY'
import json, sys
a2, e = (json.load(open(p)) for p in sys.argv[1:3])
hit_c, hit_e = float(sys.argv[3]), float(sys.argv[4])
text = lambda r: r["choices"][0]["message"]["content"]
assert e["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 and hit_e > hit_c, (hit_c, hit_e)
print(f"kv restart: kill -9 of the fetcher: restarted, reconnected, store hits {hit_c:.0f} -> {hit_e:.0f}; "
      f"second prompt's text {'same' if text(e) == text(a2) else 'differs (bounded replay)'}")
PY
for _ in $(seq 1 100); do
  agent=$(metric "$port" ladle_kv_store_writes_agent_total)
  [[ "${agent%.*}" -ge 4 ]] && break
  sleep 0.1
done
[[ "${agent%.*}" -ge 4 ]] || { echo "agent-class writes: $agent, want >= 4 (two agent prompts of 2+ blocks)" >&2; exit 1; }
kill -TERM "$pid"; wait "$pid" || { echo "server c did not exit 0 on SIGTERM" >&2; exit 1; }
pids=()

python3 - "$work/a.json" "$work/b.json" "$work/c.json" "$hit" "$hit_c" <<'PY'
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:4])
hit, hit_c = float(sys.argv[4]), float(sys.argv[5])
text = lambda r: r["choices"][0]["message"]["content"]
cached = lambda r: r["usage"]["prompt_tokens_details"]["cached_tokens"]
assert cached(a) == 0, cached(a)
assert cached(b) > 0 and hit >= cached(b), (cached(b), hit)
assert text(b) == text(a), (text(a), text(b))
assert cached(c) > 0 and hit_c > 0, (cached(c), hit_c)
print(f"kv restart: {a['usage']['prompt_tokens']} prompt tokens; after kill -9 and restart {cached(b)} cached from the "
      f"store, same text (exact replay); bounded replay {cached(c)} cached, text {'same' if text(c) == text(a) else 'differs'}")
PY
echo "kv restart: ok"
