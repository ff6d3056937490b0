#!/usr/bin/env bash
# `ladle serve --speculative fixed:3|dspark --draft DIR` (issue 17) with a drafter that
# `ladle dspark fit` makes for a small built-in model: the same greedy answers as a server
# without speculation over 8 concurrent streams, the spec counters and the verify-length
# histogram in /metrics, a bad drafter folder refused at start-up, SIGTERM drains. About 30 s.
set -euo pipefail
LADLE=${1:?usage: spec_serve_run.sh path/to/ladle}
E2E_NAME="spec serve"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
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
{"vocab_size": 129280, "hidden": 64, "encoder_layers": 1, "decoder_layers": 1, "heads": 2, "head_dim": 32,
 "experts": 4, "experts_top_k": 2, "expert_hidden": 64}
JSON

"$LADLE" dspark fit --out "$work/drafter" --model-config "$work/model.json" --prompts 16 --gen-tokens 64 \
  --draft-vocab 512 --rank 8 > "$work/fit.log" 2>&1 || { cat "$work/fit.log" >&2; exit 1; }
grep -q "held-out mean acceptance length" "$work/fit.log" || { echo "no fit report" >&2; cat "$work/fit.log" >&2; exit 1; }

# A drafter folder that does not load is a start-up error, not a server without speculation.
mkdir -p "$work/bad" && echo '{}' > "$work/bad/drafter.json"
if "$LADLE" serve --model-config "$work/model.json" --port 0 --speculative dspark --draft "$work/bad" \
    > "$work/bad.log" 2>&1; then
  echo "a bad drafter was accepted" >&2; exit 1
fi

start() {  # start LOG flags...: sets $port, appends the pid
  local log="$1"; shift
  start_ladle "$LADLE" "$log" --model-config "$work/model.json" --chunk-policy fixed --max-running 16 "$@"
}
start "$work/plain.log"
plain=$port
start "$work/fixed.log" --speculative fixed:3 --draft "$work/drafter" --draft-tokens 3
fixed=$port
# A nearly flat throughput curve (a GPU's shape at small batches), so Algorithm 1 verifies drafts
# even at this drafter's low confidences.
printf 'ladle-sps/v1\n1 100\n512 99.9\n' > "$work/sps.txt"
start "$work/dspark.log" --speculative dspark --draft "$work/drafter" --spec-sps "$work/sps.txt"
dspark=$port

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" python3 - "$plain" "$fixed" "$dspark" <<'PY'
import os, sys
sys.path.insert(0, os.environ["E2E_DIR"])
from serve_util import metrics, post_chat, run_all as run_streams

plain, fixed, dspark = sys.argv[1:4]

def chat(port, i):
    c = post_chat(port, {"model": "ladle", "temperature": 0, "max_tokens": 24, "logprobs": True,
                         "messages": [{"role": "user", "content": f"Question {i}: " + "speculate about drafts " * (i % 4 + 1)}]})
    return c["message"]["content"], [t["logprob"] for t in c["logprobs"]["content"]]

def run_all(port, n=8):
    return run_streams(lambda i: chat(port, i), n)

a = run_all(plain)
for port in (fixed, dspark):
    b = run_all(port)
    assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:2]
m = metrics(fixed)
assert m["ladle_spec_verify_tokens_total"] > m["ladle_spec_draft_tokens_total"] > 0, m
assert m["ladle_spec_accepted_tokens_total"] <= m["ladle_spec_draft_tokens_total"]
assert m['ladle_spec_verify_length_bucket{le="3"}'] == m["ladle_spec_verify_length_count"] > 0
assert m['ladle_spec_verify_length_bucket{le="+Inf"}'] == m["ladle_spec_verify_length_count"]
d = metrics(dspark)
assert d["ladle_spec_draft_tokens_total"] > 0 and d["ladle_spec_verify_length_count"] > 0, d
assert "ladle_spec_verify_tokens_total" not in metrics(plain), "a server without speculation reports no spec counters"
print(f"spec serve: greedy text and logprobs equal over 8 streams; fixed:3 verified "
      f"{int(m['ladle_spec_draft_tokens_total'])} drafts, accepted {int(m['ladle_spec_accepted_tokens_total'])}; "
      f"dspark verified {int(d['ladle_spec_draft_tokens_total'])}")
PY

for pid in "${pids[@]}"; do kill -TERM "$pid"; done
for pid in "${pids[@]}"; do
  if ! timeout 60 tail --pid="$pid" -f /dev/null; then echo "server $pid did not drain" >&2; exit 1; fi
  wait "$pid" || { echo "server $pid exited $?" >&2; exit 1; }
done
pids=()
echo "spec serve: ok"
