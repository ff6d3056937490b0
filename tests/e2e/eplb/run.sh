#!/usr/bin/env bash
# `ladle eplb plan` on DeepSeek EPLB's published example (deepseek-ai/EPLB README): the exact
# phy2log, max/mean per-GPU load 1.208 and 1.242, log2phy consistent with phy2log, the
# layer-budget policy keeping the slot total, and shape errors exiting 1. Under a second.
set -euo pipefail
LADLE=${1:?usage: run.sh path/to/ladle}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "python3 missing" >&2; [ "${CI:-}" = true ] && exit 1; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$LADLE" eplb plan --loads "$HERE/golden_loads.json" --replicas 16 --groups 4 --nodes 2 --gpus 8 > "$TMP/eplb.json"
"$LADLE" eplb plan --loads "$HERE/golden_loads.json" --replicas 16 --groups 4 --nodes 2 --gpus 8 \
  --policy layer-budget > "$TMP/budget.json"
python3 - "$TMP/eplb.json" "$TMP/budget.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
assert plan["policy"] == "eplb", plan["policy"]
assert plan["phy2log"] == [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                           [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]], plan["phy2log"]
after = plan["moe_lb"]["after"]["per_layer"]
assert ["%.3f" % x for x in after] == ["1.208", "1.242"], after
assert plan["moe_lb"]["before"]["max"] > plan["moe_lb"]["after"]["max"]
for phy2log, log2phy, logcnt in zip(plan["phy2log"], plan["log2phy"], plan["logcnt"]):
    for e, slots in enumerate(log2phy):
        real = [s for s in slots if s >= 0]
        assert len(real) == logcnt[e] >= 1 and all(phy2log[s] == e for s in real), (e, slots)
        assert slots[len(real):] == [-1] * (len(slots) - len(real))
budget = json.load(open(sys.argv[2]))
assert budget["policy"] == "layer-budget"
assert sum(budget["num_physical"]) == 32 and all(n % 8 == 0 for n in budget["num_physical"])
assert budget["moe_lb"]["after"]["mean"] <= plan["moe_lb"]["after"]["mean"] + 1e-12
PY

# 18 slots do not split over 8 GPUs: an error naming the padded count, exit 1.
if "$LADLE" eplb plan --loads "$HERE/golden_loads.json" --replicas 18 --groups 4 --nodes 2 --gpus 8 \
    2> "$TMP/err" > /dev/null; then
  echo "expected a failure for 18 replicas on 8 GPUs" >&2; exit 1
fi
grep -q "pad: 24" "$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
echo '[[1, 2], [3]]' > "$TMP/ragged.json"
if "$LADLE" eplb plan --loads "$TMP/ragged.json" --replicas 2 --gpus 2 2> /dev/null > /dev/null; then
  echo "expected a failure for ragged loads" >&2; exit 1
fi
echo "eplb cli: ok"
