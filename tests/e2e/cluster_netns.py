#!/usr/bin/env python3
"""Client side of cluster_netns_run.sh (the multi-host cluster test in network namespaces); it
runs inside the entrypoint's namespace and talks only to the address it is given.

  cluster_netns.py streams HOST PORT STREAMS MAX_TOKENS OUT [--reference FILE] [--hook CMD] [--hook-after-tokens K]
      STREAMS concurrent greedy Chat Completions streams (SSE, logprobs), the results written to
      OUT (JSON). With --hook, CMD (a shell command: kill an engine, cut a link) runs once every
      stream has K tokens (default 1: the prefill's; more: every stream is decoding). Fails on any client-visible error, a stream that does not end
      with finish_reason "length" and exactly MAX_TOKENS tokens (or "stop" at an EOS), and, with
      --reference, any stream whose text or tokens differ from the reference's (greedy: a fault
      must change nothing the client sees).
  cluster_netns.py complete HOST PORT REQUESTS MAX_TOKENS
      REQUESTS concurrent non-streaming requests; fails unless each completes (MAX_TOKENS tokens,
      or "stop").
  cluster_netns.py metric HOST PORT NAME
      Prints the value of the entrypoint's /metrics line NAME (no labels).
Every call is bounded (DEADLINE_S per connection, the whole run by the caller's `timeout`)."""
import http.client
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import sse_events  # noqa: E402

DEADLINE_S = 120


def prompt(i):
    return f"stream {i}: " + "the quick brown fox " * (5 + 7 * i)


def stream(host, port, i, max_tokens, out, started, hook_after):
    body = json.dumps({"model": "ladle", "stream": True, "temperature": 0, "max_tokens": max_tokens,
                       "stream_options": {"include_usage": True}, "logprobs": True,
                       "messages": [{"role": "user", "content": prompt(i)}]})
    res = {"text": "", "tokens": [], "finish": None, "error": None, "usage": None, "end_s": None}
    try:
        for j in sse_events(host, port, body, DEADLINE_S):
            if "error" in j:
                res["error"] = json.dumps(j["error"])
            if j.get("usage"):
                res["usage"] = j["usage"]
            for ch in j.get("choices", []):
                res["text"] += (ch.get("delta") or {}).get("content") or ""
                for t in (ch.get("logprobs") or {}).get("content") or []:
                    res["tokens"].append(t["token"])
                if ch.get("finish_reason"):
                    res["finish"] = ch["finish_reason"]
            if len(res["tokens"]) >= hook_after:
                started.set()
    except Exception as e:  # a client-visible failure (HttpStatusError included)
        res["error"] = repr(e)
    finally:
        res["end_s"] = time.time()
        started.set()  # a stream that failed before its first token must not hold the hook back
    out[i] = res


def bad_result(r, max_tokens):
    """Why a stream's result is not a clean, complete answer (None when it is)."""
    if r is None:
        return "no result (the stream did not end within the deadline)"
    if r["error"]:
        return "error: " + r["error"][:300]
    usage = r.get("usage") or {}
    if r["finish"] not in ("length", "stop"):
        return f"finish_reason {r['finish']!r}"
    # EOS may end a random-weight model's answer early ("stop"); otherwise every token is there.
    if r["finish"] == "length" and (usage.get("completion_tokens") != max_tokens or len(r["tokens"]) != max_tokens):
        return f"{len(r['tokens'])} tokens streamed, usage {usage.get('completion_tokens')}, want {max_tokens}"
    return None


def cmd_streams(argv):
    host, port, n, max_tokens, out_file = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    reference, hook, hook_after = None, None, 1
    rest = argv[5:]
    while rest:
        if rest[0] == "--reference":
            reference = json.load(open(rest[1]))
        elif rest[0] == "--hook":
            hook = rest[1]
        elif rest[0] == "--hook-after-tokens":
            hook_after = int(rest[1])
        else:
            sys.exit(f"cluster_netns: unknown option {rest[0]}")
        rest = rest[2:]
    out = [None] * n
    started = [threading.Event() for _ in range(n)]
    ts = [threading.Thread(target=stream, args=(host, port, i, max_tokens, out, started[i], hook_after), daemon=True) for i in range(n)]
    t0 = time.time()
    for t in ts:
        t.start()
    hook_at = None
    if hook:
        for e in started:
            e.wait(max(0.0, DEADLINE_S - (time.time() - t0)))
        in_flight = sum(1 for r in out if r is None)
        hook_at = time.time()
        rc = subprocess.run(hook, shell=True, timeout=30).returncode
        print(f"cluster_netns: hook `{hook}` ran {hook_at - t0:.1f} s in (exit {rc}), when every stream had "
              f"{hook_after}+ tokens; {in_flight}/{n} streams in flight")
        if rc != 0:
            print("FAIL the hook failed")
            sys.exit(1)
    for t in ts:
        t.join(max(0.0, DEADLINE_S - (time.time() - t0)))
    took = time.time() - t0
    json.dump(out, open(out_file, "w"))
    bad = 0
    for i, r in enumerate(out):
        why = bad_result(r, max_tokens)
        if why:
            bad += 1
            print(f"FAIL stream {i}: {why}")
    differ = 0
    if reference is not None:
        for i, (a, b) in enumerate(zip(reference, out)):
            if a is None or b is None or a["tokens"] != b["tokens"] or a["text"] != b["text"]:
                differ += 1
                ta, tb = (a or {}).get("tokens") or [], (b or {}).get("tokens") or []
                at = next((k for k in range(min(len(ta), len(tb))) if ta[k] != tb[k]), min(len(ta), len(tb)))
                print(f"FAIL stream {i} differs from its unfaulted reference at token {at}: "
                      f"{json.dumps(ta[at:at + 4])} != {json.dumps(tb[at:at + 4])}")
    after = f"; {sum(1 for r in out if r and r['end_s'] and r['end_s'] > hook_at)} ended after the hook" if hook_at else ""
    print(f"cluster_netns: {n} streams x {max_tokens} tokens in {took:.1f} s; client-visible errors {bad}"
          + (f"; different from the reference {differ}/{n}" if reference is not None else "") + after)
    sys.exit(1 if bad or differ else 0)


def cmd_complete(argv):
    host, port, n, max_tokens = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    out = [None] * n

    def one(i):
        body = json.dumps({"model": "ladle", "temperature": 0, "max_tokens": max_tokens,
                           "messages": [{"role": "user", "content": f"after {i}: " + "jumps over the lazy dog " * (3 + 9 * i)}]})
        try:
            c = http.client.HTTPConnection(host, port, timeout=DEADLINE_S)
            c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                out[i] = f"HTTP {r.status}: {data[:300]!r}"
                return
            j = json.loads(data)
            fin = j["choices"][0]["finish_reason"]
            got = j["usage"]["completion_tokens"]
            out[i] = "" if fin == "stop" or (fin == "length" and got == max_tokens) else f"finish {fin}, {got} tokens"
        except Exception as e:
            out[i] = repr(e)

    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(DEADLINE_S)
    bad = [(i, r if r is not None else "no answer within the deadline") for i, r in enumerate(out) if r != ""]
    for i, why in bad:
        print(f"FAIL request {i}: {why}")
    sys.exit(1 if bad else 0)


def cmd_metric(argv):
    host, port, name = argv[0], int(argv[1]), argv[2]
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/metrics")
    r = c.getresponse()
    for line in r.read().decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            print(parts[1])
            return
    sys.exit(f"cluster_netns: no metric {name}")


if __name__ == "__main__":
    cmds = {"streams": cmd_streams, "complete": cmd_complete, "metric": cmd_metric}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](sys.argv[2:])
