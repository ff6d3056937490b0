"""Helpers the `ladle serve` e2e scripts share: chat completions over many streams at once, and
/metrics as a dict. Imported by the Python in tests/e2e/spec_serve_run.sh and eplb/serve_run.sh."""
import json
import threading
import urllib.request


def post_chat(port, body, timeout=120):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]


def run_all(fn, n, join_s=180):
    """fn(i) for i in range(n), each on its own thread; the results in order."""
    out = [None] * n

    def one(i):
        out[i] = fn(i)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(join_s)
    assert all(o is not None for o in out), "a request did not finish"
    return out


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    m = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        m[name] = float(value)
    return m
