#!/usr/bin/env bash
# `ladle serve --ep 4 --redundant-experts 4` with live re-arrangement (issue 16), on a small
# built-in model with 16 experts: the same greedy answers as a server without EP while the
# placement changes every 4 steps; /metrics carries moe_lb and the re-arrangements; with the
# router bias on, the placement beats the contiguous layout on the same tokens; SIGTERM
# drains and exits 0. About 20 s on 2 cores.
set -euo pipefail
LADLE=${1:?usage: serve_run.sh path/to/ladle}
E2E_NAME="eplb serve"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../common.sh"
command -v python3 >/dev/null || { echo "python3 missing" >&2; [ "${CI:-}" = true ] && exit 1; exit 77; }
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/model.json" <<'JSON'
{"vocab_size": 129280, "hidden": 64, "encoder_layers": 1, "decoder_layers": 2, "heads": 2, "head_dim": 32,
 "experts": 16, "experts_top_k": 2, "expert_hidden": 64}
JSON

start() {  # start LOG flags...: sets $port, appends the pid
  local log="$1"; shift
  start_ladle "$LADLE" "$log" --model-config "$work/model.json" --chunk-policy fixed --max-running 16 "$@"
}

start "$work/plain.log"
plain=$port
start "$work/ep.log" --ep 4 --redundant-experts 4 --eplb-window 4 --eplb-interval 4
ep=$port
start "$work/skew.log" --ep 4 --redundant-experts 4 --eplb-window 8 --eplb-interval 8 --router-skew 1.2 \
  --router-skew-half-life 1000000
skew=$port

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" python3 - "$plain" "$ep" "$skew" <<'PY'
import os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from serve_util import metrics, post_chat, run_all as run_streams

plain, ep, skew = sys.argv[1:4]

def chat(port, i):
    return post_chat(port, {"model": "ladle", "temperature": 0, "max_tokens": 24,
                            "messages": [{"role": "user", "content": f"Question {i}: " + "tell me about experts " * (i % 5 + 1)}]})["message"]["content"]

def run_all(port, n=16):
    return run_streams(lambda i: chat(port, i), n)

a = run_all(plain)
b = run_all(ep)
assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:2]
m = metrics(ep)
assert m["ladle_ep_ranks"] == 4, m.get("ladle_ep_ranks")
assert m["ladle_eplb_rearrangements_total"] >= 2, m["ladle_eplb_rearrangements_total"]
assert m["ladle_eplb_bytes_moved_total"] + m["ladle_eplb_bytes_copied_local_total"] > 0
assert m['ladle_moe_lb{agg="max"}'] >= m['ladle_moe_lb{agg="mean"}'] >= 1.0
assert "ladle_moe_lb_wall" in m and "ladle_eplb_last_rearrange_seconds" in m
assert "ladle_moe_lb_wall" not in metrics(plain), "a server without EP reports no moe_lb"

run_all(skew)
run_all(skew)
s = metrics(skew)
assert s["ladle_eplb_rearrangements_total"] >= 1, s
static, mean = s['ladle_moe_lb{agg="static"}'], s['ladle_moe_lb{agg="mean"}']
assert static > 1.2 and mean < static, (static, mean)
print(f"eplb serve: greedy equal over 16 streams, {int(m['ladle_eplb_rearrangements_total'])} re-arrangements; "
      f"skewed: moe_lb {mean:.3f} vs {static:.3f} without EPLB")
PY

for pid in "${pids[@]}"; do kill -TERM "$pid"; done
for pid in "${pids[@]}"; do
  if ! timeout 60 tail --pid="$pid" -f /dev/null; then echo "server $pid did not drain" >&2; exit 1; fi
  wait "$pid" || { echo "server $pid exited $?" >&2; exit 1; }
done
pids=()
grep -q "ep.rearranged" "$work/ep.log" || { echo "no ep.rearranged log line" >&2; exit 1; }
echo "eplb serve: ok"
