#!/usr/bin/env python3
"""Kill test for `ladle cluster`:
cluster_kill.py PORT READY_FILE STREAMS MAX_TOKENS ENGINE_NAME [--duration S]

Runs STREAMS concurrent greedy streams (Chat Completions, SSE) twice: once unfaulted (the
reference), once while ENGINE_NAME (e.g. decode-0) is killed with SIGKILL after every stream has
its first tokens. With --duration S the faulted pass is a sustained load instead: each of the
STREAMS clients sends its prompt again and again for S seconds, and the engine is killed at S/2.
Passes when no stream sees an error, every stream ends with finish_reason "length" and exactly
MAX_TOKENS tokens (or "stop" at an EOS) (nothing lost or repeated), and every faulted stream's
tokens and text equal its unfaulted reference (greedy), all within a deadline."""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import sse_events  # noqa: E402

port, ready_file, streams, max_tokens, victim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
duration = float(sys.argv[sys.argv.index("--duration") + 1]) if "--duration" in sys.argv else 0.0
DEADLINE_S = 240


def stream(i, out, started):
    body = json.dumps({"model": "ladle", "stream": True, "temperature": 0, "max_tokens": max_tokens,
                       "stream_options": {"include_usage": True}, "logprobs": True,
                       "messages": [{"role": "user", "content": f"stream {i}: " + "the quick brown fox " * (5 + 7 * i)}]})
    res = {"text": "", "tokens": [], "finish": None, "error": None, "usage": None}
    try:
        for j in sse_events("127.0.0.1", int(port), body, DEADLINE_S):
            if "error" in j:
                res["error"] = json.dumps(j["error"])
            if j.get("usage"):
                res["usage"] = j["usage"]
            for ch in j.get("choices", []):
                d = ch.get("delta", {})
                res["text"] += d.get("content") or ""
                lp = ch.get("logprobs") or {}
                for t in lp.get("content") or []:
                    res["tokens"].append(t["token"])
                if ch.get("finish_reason"):
                    res["finish"] = ch["finish_reason"]
                if res["tokens"]:
                    started.set()
    except Exception as e:  # a client-visible failure
        res["error"] = repr(e)
    finally:
        started.set()  # a stream that failed before its first token must not hold the kill back
    out[i] = res


def run(kill):
    out = [None] * streams
    started = [threading.Event() for _ in range(streams)]
    ts = [threading.Thread(target=stream, args=(i, out, started[i])) for i in range(streams)]
    t0 = time.time()
    for t in ts:
        t.start()
    killed_at = None
    if kill:
        for e in started:
            e.wait(DEADLINE_S)
        ready = json.load(open(ready_file))
        pid = next(e["pid"] for e in ready["engines"] if e["name"] == victim)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        print(f"cluster_kill: killed {victim} (pid {pid}) {killed_at - t0:.1f} s in")
    for t in ts:
        t.join(DEADLINE_S)
    return out, time.time() - t0, killed_at


def check(i, name, r):
    """A client-visible failure of stream i's answer r, or None."""
    usage = (r or {}).get("usage") or {}
    # EOS may end a random-weight model's answer early ("stop"); otherwise every token is there.
    if r is None or r["error"] or r["finish"] not in ("length", "stop") or (
            r["finish"] == "length" and usage.get("completion_tokens") != max_tokens):
        return f"FAIL stream {i} ({name}): {json.dumps(r)[:400]}"
    return None


def sustained(ref):
    """Each client resends its prompt until `duration` s have passed; the victim dies at half time.
    Returns (answers checked, failures)."""
    fails, answers, lock = [], [0], threading.Lock()
    t_end = time.time() + duration

    def client(i):
        while time.time() < t_end:
            out = {}
            stream(i, out, threading.Event())
            r = out.get(i)
            msg = check(i, "sustained", r)
            if msg is None and (r["tokens"] != ref[i]["tokens"] or r["text"] != ref[i]["text"]):
                msg = f"FAIL stream {i} (sustained) differs from its reference: {r['text'][:120]!r} vs {ref[i]['text'][:120]!r}"
            with lock:
                answers[0] += 1
                if msg:
                    fails.append(msg)

    ts = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    for t in ts:
        t.start()
    time.sleep(duration / 2)
    ready = json.load(open(ready_file))
    pid = next(e["pid"] for e in ready["engines"] if e["name"] == victim)
    os.kill(pid, signal.SIGKILL)
    print(f"cluster_kill: killed {victim} (pid {pid}) {duration / 2:.0f} s into a {duration:.0f} s load")
    for t in ts:
        t.join(duration + DEADLINE_S)
    if any(t.is_alive() for t in ts):
        fails.append("FAIL a client did not finish within the deadline")
    return answers[0], fails


ref, ref_s, _ = run(False)
bad = 0
for i, a in enumerate(ref):
    msg = check(i, "reference", a)
    if msg:
        bad += 1
        print(msg)
if duration > 0:
    t0 = time.time()
    n, fails = sustained(ref)
    for msg in fails[:20]:
        print(msg)
    bad += len(fails)
    print(f"cluster_kill: {streams} clients x {duration:.0f} s, {n} answers of {max_tokens} tokens in "
          f"{time.time() - t0:.1f} s; client-visible errors or differences: {len(fails)}")
    sys.exit(1 if bad else 0)

got, got_s, _ = run(True)
same = 0
for i, (a, b) in enumerate(zip(ref, got)):
    msg = check(i, "faulted", b)
    if msg:
        bad += 1
        print(msg)
    elif a and a["tokens"] == b["tokens"] and a["text"] == b["text"]:
        same += 1
    else:
        bad += 1
        print(f"FAIL stream {i}: faulted output differs from its reference: {b['text'][:120]!r} vs {a['text'][:120]!r}")
print(f"cluster_kill: {streams} streams x {max_tokens} tokens; unfaulted {ref_s:.1f} s, faulted {got_s:.1f} s; "
      f"client-visible errors or differences {bad}; faulted == unfaulted tokens and text: {same}/{streams}")
sys.exit(1 if bad else 0)
