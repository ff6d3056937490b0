#!/usr/bin/env python3
"""The balancers on a real cluster: the Mooncake conversation trace replayed against
`ladle cluster --prefill P --decode D --dp R`, once per routing policy, in one run.

  bench/cluster/cluster_trace_bench.py build/apps/ladle/ladle [--requests 240] [--time-scale 0.5]
      [--len-scale 0.0625] [--out-scale 0.25] [--policies balanced,round-robin,least-requests]
      [--svg bench/cluster/cluster_trace.svg]

Each policy gets a fresh cluster (the built-in model at bench/serve/tiny_model.json, so 2 cores
can serve it) and the same open-loop replay: request i is sent at its trace timestamp × time
scale, with a prompt whose 512-token blocks (the trace's hash_ids, scaled by --len-scale) are
the same text wherever the trace shares them, so prefixes are shared as in the trace, and
max_tokens = output_length × --out-scale (at least 2, at most 256), greedy.

Measured per policy:
- quota m/m: compute-quota dispatched per prefill rank (ladle_rank_quota_seconds_total, the
  entrypoint's /metrics, polled every 0.25 s) per 5 s window, max over mean, averaged over
  windows with work (DualPath reports 1.06 for its rule);
- KV m/m: KV tokens per decode rank (ladle_rank_kv_tokens) at each poll, max over mean,
  averaged over polls with any KV;
- TTFT and TPOT p50/p99 from the client's streams; output tokens/s over the replay;
- errors (any non-200 or an error event).
The balanced policy is the recipe's (the Prefill Load Balancer and DualPath's decode rule);
round-robin and least-requests are the naive alternatives. Ratios are against balanced. The
machine's load average is printed: figures from a busy machine compare within one run only.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from serve_util import sse_events  # noqa: E402


def load_trace(path, n):
    out = []
    with open(path) as f:
        for line in f:
            out.append(json.loads(line))
            if len(out) >= n:
                break
    return out


def block_text(h, words):
    # One trace block: `words` words unique to hash id h (about 2 tokens each).
    return "".join(f" b{h}w{i}" for i in range(words))


def prompt_for(req, len_scale):
    words = max(4, int(512 * len_scale / 2))
    return "".join(block_text(h, words) for h in req["hash_ids"])


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def start_cluster(ladle, policy, args, work):
    ready = os.path.join(work, f"{policy}.ready")
    log = open(os.path.join(work, f"{policy}.log"), "w")
    cmd = [ladle, "cluster", "--port", "0", "--model-config", os.path.join(ROOT, "bench/serve/tiny_model.json"),
           "--ready-file", ready, "--prefill", str(args.prefill), "--decode", str(args.decode), "--dp", str(args.dp),
           "--policy", policy, "--max-queue", "4096", "--max-running", "256", "--kv-blocks", "2048",
           "--max-model-len", "131072"] + (["--prefill-quota-ms", str(args.prefill_quota_ms)] if args.prefill_quota_ms else [])
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline:
        if os.path.exists(ready):
            return p, json.load(open(ready))["port"]
        if p.poll() is not None:
            raise SystemExit(f"cluster_trace_bench: the {policy} cluster exited during start-up (log {log.name})")
        time.sleep(0.25)
    p.kill()
    raise SystemExit("cluster_trace_bench: the cluster did not start within 300 s")


def stop_cluster(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def one_request(port, prompt, max_tokens, res):
    body = json.dumps({"model": "ladle", "stream": True, "temperature": 0, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": prompt}]})
    t0 = time.time()
    first = None
    n = 0
    try:
        for j in sse_events("127.0.0.1", port, body, 600):
            if "error" in j:
                res["error"] = json.dumps(j["error"])[:200]
            for ch in j.get("choices", []):
                if (ch.get("delta") or {}).get("content"):
                    n += 1
                    if first is None:
                        first = time.time()
    except Exception as e:  # a client-visible failure
        res["error"] = repr(e)
        return
    end = time.time()
    res["ttft"] = (first or end) - t0
    res["tpot"] = (end - first) / max(1, n - 1) if first and n > 1 else None
    res["tokens"] = n  # content deltas: one per token (an EOS may end an answer early)


METRIC = re.compile(r'^(ladle_rank_quota_seconds_total|ladle_rank_kv_tokens)\{engine="([^"]*)",role="([^"]*)",rank="(\d+)"\} (\S+)$')


def poll_metrics(port, stop, samples):
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            now = time.time()
            quota, kv = {}, {}
            for line in text.splitlines():
                m = METRIC.match(line)
                if not m:
                    continue
                key = (m.group(2), int(m.group(4)))
                if m.group(1) == "ladle_rank_quota_seconds_total" and m.group(3) == "prefill":
                    quota[key] = float(m.group(5))
                elif m.group(1) == "ladle_rank_kv_tokens" and m.group(3) == "decode":
                    kv[key] = float(m.group(5))
            samples.append((now, quota, kv))
        except Exception:
            pass
        stop.wait(0.25)


HANDOFF = re.compile(r'^ladle_handoff_latency_seconds_bucket\{le="([^"]+)"\} (\S+)$')


def handoff_quantiles(port):
    """The hand-off latency's p50 and p99 upper bounds from the entrypoint's histogram (the
    bucket each falls in), and the count."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    buckets = []
    for line in c.getresponse().read().decode().splitlines():
        m = HANDOFF.match(line)
        if m:
            buckets.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
    total = buckets[-1][1] if buckets else 0
    if total == 0:
        return float("nan"), float("nan"), 0
    q = lambda p: next(le for le, cum in buckets if cum >= p * total)  # noqa: E731
    return q(0.5), q(0.99), int(total)


def max_over_mean(vals):
    vals = list(vals)
    mean = sum(vals) / len(vals) if vals else 0
    return max(vals) / mean if mean > 0 else None


def run_policy(ladle, policy, trace, args, work):
    proc, port = start_cluster(ladle, policy, args, work)
    try:
        # Warm-up: one short request (the engines' first forward) outside the figures.
        one_request(port, "warm up", 4, {})
        samples, stop = [], threading.Event()
        poller = threading.Thread(target=poll_metrics, args=(port, stop, samples))
        poller.start()
        results = [dict() for _ in trace]
        threads = []
        t0 = time.time()
        base = trace[0]["timestamp"]
        for i, req in enumerate(trace):
            at = t0 + (req["timestamp"] - base) / 1000.0 * args.time_scale
            time.sleep(max(0.0, at - time.time()))
            mt = max(2, min(256, int(req["output_length"] * args.out_scale)))
            t = threading.Thread(target=one_request, args=(port, prompt_for(req, args.len_scale), mt, results[i]))
            t.start()
            threads.append(t)
        for t in threads:
            t.join(900)
        wall = time.time() - t0
        time.sleep(0.5)
        stop.set()
        poller.join()
        h50, h99, handoffs = handoff_quantiles(port)
    finally:
        stop_cluster(proc)
    errors = sum(1 for r in results if "error" in r or "ttft" not in r)
    for i, r in enumerate(results):
        if "error" in r or "ttft" not in r:
            print(f"  {policy}: request {i} failed: {r.get('error', 'no answer')}", flush=True)
    ttft = [r["ttft"] for r in results if "ttft" in r]
    tpot = [r["tpot"] for r in results if r.get("tpot") is not None]
    out_tokens = sum(r.get("tokens", 0) for r in results if "error" not in r)
    # Quota per prefill rank per 5 s window (differences of the counters), max/mean.
    qmm = []
    if samples:
        w0 = samples[0][0]
        prev = samples[0][1]
        for ts, quota, _ in samples[1:]:
            if ts - w0 < 5.0 and ts != samples[-1][0]:
                continue
            keys = set(quota) | set(prev)
            d = [quota.get(k, 0.0) - prev.get(k, 0.0) for k in keys]
            if keys and sum(d) > 0:
                qmm.append(max_over_mean(d))
            prev, w0 = quota, ts
    kvmm = [max_over_mean(kv.values()) for _, _, kv in samples if kv and sum(kv.values()) > 0]
    kvmm = [x for x in kvmm if x is not None]
    return {
        "policy": policy, "errors": errors, "wall": wall,
        "quota_mm": statistics.mean(qmm) if qmm else float("nan"),
        "kv_mm": statistics.mean(kvmm) if kvmm else float("nan"),
        "ttft50": percentile(ttft, 50), "ttft99": percentile(ttft, 99),
        "tpot50": percentile(tpot, 50), "tpot99": percentile(tpot, 99),
        "tok_s": out_tokens / wall if wall > 0 else 0.0,
        "handoff50": h50, "handoff99": h99, "handoffs": handoffs,
    }


def svg(rows, path):
    metrics = [("quota_mm", "prefill quota max/mean"), ("kv_mm", "decode KV max/mean"), ("ttft99", "TTFT p99 (s)"),
               ("tpot99", "TPOT p99 (s)"), ("tok_s", "output tokens/s")]
    colors = ["#3b6ea5", "#d9822b", "#6a9f58", "#a05195"]
    w, h, pad = 180, 160, 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(metrics) + pad}" height="{h + 90}" '
           'font-family="sans-serif" font-size="11">']
    for mi, (key, label) in enumerate(metrics):
        vals = [r[key] if r[key] == r[key] else 0 for r in rows]
        top = max(vals) or 1
        x0 = pad + mi * w
        out.append(f'<text x="{x0}" y="15">{label}</text>')
        for ri, v in enumerate(vals):
            bh = h * v / top
            x = x0 + ri * 45
            out.append(f'<rect x="{x}" y="{25 + h - bh:.1f}" width="36" height="{bh:.1f}" fill="{colors[ri % 4]}"/>')
            out.append(f'<text x="{x}" y="{20 + h - bh:.1f}">{v:.3g}</text>')
    for ri, r in enumerate(rows):
        out.append(f'<rect x="{pad + ri * 140}" y="{h + 50}" width="10" height="10" fill="{colors[ri % 4]}"/>')
        out.append(f'<text x="{pad + ri * 140 + 14}" y="{h + 59}">{r["policy"]}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ladle")
    shared = os.environ.get("LADLE_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--trace", default=os.path.join(shared, "traces/mooncake_fast25/conversation_trace.jsonl"))
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--time-scale", type=float, default=0.5, help="trace seconds → replay seconds")
    ap.add_argument("--len-scale", type=float, default=1 / 16, help="prompt tokens per trace token")
    ap.add_argument("--out-scale", type=float, default=0.25, help="output tokens per trace output token")
    ap.add_argument("--prefill", type=int, default=2)
    ap.add_argument("--decode", type=int, default=2)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--policies", default="balanced,round-robin,least-requests")
    ap.add_argument("--prefill-quota-ms", type=float, help="the cluster's --prefill-quota-ms (default: its own)")
    ap.add_argument("--svg")
    args = ap.parse_args()
    if not os.path.exists(args.trace):
        print(f"cluster_trace_bench: no trace at {args.trace} (set LADLE_SHARED_DIR or --trace)", file=sys.stderr)
        sys.exit(1 if os.environ.get("CI") == "true" else 77)
    trace = load_trace(args.trace, args.requests)
    print(f"cluster_trace_bench: {len(trace)} requests of {args.trace}, {args.prefill} prefill + {args.decode} decode "
          f"engines x {args.dp} DP ranks, time x{args.time_scale}, prompts x{args.len_scale:.4g}, outputs x{args.out_scale}; "
          f"load average {os.getloadavg()[0]:.1f}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for policy in args.policies.split(","):
            rows.append(run_policy(args.ladle, policy, trace, args, work))
            print(f"  {policy}: done, load average {os.getloadavg()[0]:.1f}", flush=True)
    base = rows[0]
    print(f"{'policy':<16}{'quota m/m':>10}{'KV m/m':>9}{'TTFT50':>9}{'TTFT99':>9}{'TPOT50':>9}{'TPOT99':>9}"
          f"{'out tok/s':>11}{'errors':>8}")
    for r in rows:
        print(f"{r['policy']:<16}{r['quota_mm']:>10.3f}{r['kv_mm']:>9.3f}{r['ttft50']:>8.2f}s{r['ttft99']:>8.2f}s"
              f"{r['tpot50'] * 1e3:>7.1f}ms{r['tpot99'] * 1e3:>7.1f}ms{r['tok_s']:>11.1f}{r['errors']:>8}")
    for r in rows:
        print(f"{r['policy']}: {r['handoffs']} PD hand-offs, latency p50 <= {r['handoff50'] * 1e3:g} ms, "
              f"p99 <= {r['handoff99'] * 1e3:g} ms (histogram buckets)")
    for r in rows[1:]:
        print(f"{base['policy']} / {r['policy']}: quota m/m {base['quota_mm'] / r['quota_mm']:.3f}, "
              f"KV m/m {base['kv_mm'] / r['kv_mm']:.3f}, TTFT p99 {base['ttft99'] / r['ttft99']:.3f}, "
              f"TPOT p99 {base['tpot99'] / r['tpot99']:.3f}, tok/s {base['tok_s'] / r['tok_s']:.3f}")
    if args.svg:
        svg(rows, args.svg)
        print(f"cluster_trace_bench: wrote {args.svg}")
    sys.exit(1 if any(r["errors"] for r in rows) else 0)


if __name__ == "__main__":
    main()
