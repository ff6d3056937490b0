#!/usr/bin/env bash
# Images through the cluster (issue 18 with issue 15's PD path): `ladle cluster --prefill 1
# --decode 1 --model-version v4` runs the image stage at the entrypoint and sends the engines
# the placeholders' embeddings; greedy answers (text and logprobs) equal `ladle serve`'s for
# the same image requests, the hand-off is exact (no fallback), another image changes the
# answer, and a repeat hits the prefix cache across the image. About 30 s.
set -euo pipefail
LADLE=${1:?usage: vision_cluster_run.sh path/to/ladle}
E2E_NAME="vision cluster"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/common.sh"
command -v python3 >/dev/null || { echo "python3 missing" >&2; [ "${CI:-}" = true ] && exit 1; exit 77; }
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A small model with the full vocabulary (so <｜image｜> = 129279 exists) and the vision tower.
cat > "$work/model.json" <<'JSON'
{"vocab_size": 129280, "hidden": 64, "encoder_layers": 1, "decoder_layers": 1, "heads": 2, "head_dim": 32,
 "experts": 4, "experts_top_k": 2, "expert_hidden": 64, "vision_hidden": 64, "vision_heads": 2}
JSON
common=(--model-version v4 --model-config "$work/model.json" --kv-blocks 64 --max-running 8
        --cost-model "$work/cost_model.json")

start_ladle "$LADLE" "$work/serve.log" "${common[@]}"
serve_port=$port

"$LADLE" cluster --port 0 --prefill 1 --decode 1 --ready-file "$work/ready" "${common[@]}" > "$work/cluster.log" 2>&1 &
cluster_pid=$!
pids+=("$cluster_pid")
for _ in $(seq 1 600); do
  [[ -f "$work/ready" ]] && break
  kill -0 "$cluster_pid" 2>/dev/null || { cat "$work/cluster.log" >&2; exit 1; }
  sleep 0.2
done
[[ -f "$work/ready" ]] || { echo "cluster did not start within 120 s" >&2; cat "$work/cluster.log" >&2; exit 1; }
cluster_port=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['port'])" "$work/ready")

E2E_DIR="$here" python3 - "$serve_port" "$cluster_port" <<'PY'
import base64, os, struct, sys, time, zlib
sys.path.insert(0, os.environ["E2E_DIR"])
from serve_util import metrics, post_chat, run_all

serve, cluster = sys.argv[1:3]

def png(w, h, seed):
    raw = b"".join(b"\x00" + bytes(((x * 7 + y * 13 + seed * 31 + c * 50) % 256) for x in range(w) for c in range(3))
                   for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

def chat(port, seed, words=400):
    url = "data:image/png;base64," + base64.b64encode(png(256, 128, seed)).decode()
    c = post_chat(port, {"model": "ladle", "temperature": 0, "max_tokens": 12, "logprobs": True,
                         "messages": [{"role": "user", "content": [
                             # Text of its own per image: no request hits another's prefix (a hit's
                             # bounded replay moves logprobs a little, on either server).
                             {"type": "text", "text": " ".join(f"w{i}x{seed}" for i in range(words))},
                             {"type": "image_url", "image_url": {"url": url}},
                             {"type": "text", "text": "What is in the image?"}]}]})
    return c["message"]["content"], [t["logprob"] for t in c["logprobs"]["content"]]

seeds = [1, 2, 3, 1]
want = [chat(serve, s) for s in seeds[:3]]
got = run_all(lambda i: chat(cluster, seeds[i]), 3)
for s, w, g in zip(seeds, want, got):
    assert g == w, f"image {s}: the cluster answered {g[0]!r}, ladle serve {w[0]!r}"
assert got[0] != got[1], "two different images gave the same answer"
again = chat(cluster, 1)
assert again[0] == got[0][0], "the repeat changed the answer"
# The entrypoint learns its engines' counters from their load reports (polled), so wait
# (bounded) for the four hand-offs to show.
deadline = time.time() + 20
while True:
    m = metrics(cluster)
    if m.get("ladle_handoff_imports_total", 0) >= 4 or time.time() > deadline:
        break
    time.sleep(0.2)
handoff = {k: v for k, v in m.items() if "handoff" in k}
assert m.get("ladle_handoff_imports_total", 0) >= 4, handoff
assert m.get("ladle_handoff_fallbacks_total", 0) == 0, handoff
assert m.get("ladle_vision_images_total", 0) >= 4, {k: v for k, v in m.items() if "vision" in k}
print("vision cluster: 3 image requests equal to ladle serve through PD, hand-offs exact, repeat consistent")
PY

# Both stop cleanly on SIGTERM.
for pid in "${pids[@]}"; do kill -TERM "$pid"; done
for pid in "${pids[@]}"; do
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then echo "pid $pid did not stop within 60 s" >&2; exit 1; fi
  wait "$pid" || { echo "pid $pid exited non-zero" >&2; exit 1; }
done
pids=()
echo "e2e_vision_cluster: ok"
