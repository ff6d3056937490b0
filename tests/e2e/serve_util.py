"""Helpers the e2e scripts share: chat completions over many streams at once, an SSE stream's
events, and /metrics as a dict. Imported by the Python in tests/e2e/spec_serve_run.sh and
eplb/serve_run.sh, by cluster_kill.py and cluster_netns.py, and by bench/cluster."""
import http.client
import json
import threading
import urllib.request


class HttpStatusError(Exception):
    """A non-200 answer: its status and the head of its body."""

    def __init__(self, status, head):
        super().__init__(f"HTTP {status}: {head!r}")
        self.status = status


def sse_events(host, port, body, timeout, path="/v1/chat/completions"):
    """POSTs `body` (JSON text) and yields each SSE `data:` event, parsed, in order ([DONE]
    ends it). Raises HttpStatusError on a non-200 answer; socket errors propagate."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body, {"content-type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise HttpStatusError(r.status, r.read()[:300])
        buf = b""
        while True:
            chunk = r.read1(65536)
            if not chunk:
                return
            buf += chunk
            while b"\n\n" in buf:
                frame, buf = buf.split(b"\n\n", 1)
                for line in frame.split(b"\n"):
                    if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                        yield json.loads(line[6:])
    finally:
        c.close()


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
