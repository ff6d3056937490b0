#!/usr/bin/env python3
"""A 300 MiB request body, sent the way Python's http.client (and so `requests`) sends one:
the whole body first, then the response is read. The server must answer 413 in the API's error
shape and keep reading (lingering close, RFC 9112 §9.6) so this client reads the 413 instead of
a connection reset. Checked with a Content-Length body (refused at the header) and a chunked one
(refused mid-body). Usage: big_body.py PORT API_KEY"""
import http.client
import json
import sys
import time

port, key = int(sys.argv[1]), sys.argv[2]
total = 300 << 20
piece = b"x" * (1 << 20)


def chunks():
    yield b'{"model":"ladle","messages":[{"role":"user","content":"'
    for _ in range(total // len(piece)):
        yield piece
    yield b'"}]}'


def attempt(path, chunked, shape):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key, "x-api-key": key}
    if not chunked:
        headers["Content-Length"] = str(total + 60)
    t0 = time.time()
    try:
        conn.request("POST", path, body=chunks(), headers=headers, encode_chunked=chunked)
    except (BrokenPipeError, ConnectionResetError) as e:
        # http.client reads the answer only after sending: a reset here is the bug.
        print(f"FAIL 300 MiB body to {path} ({'chunked' if chunked else 'content-length'}): {e!r} while sending")
        return False
    r = conn.getresponse()
    body = r.read()
    conn.close()
    ok = r.status == 413
    try:
        doc = json.loads(body)
        ok = ok and shape(doc)
    except ValueError:
        ok = False
    how = "chunked" if chunked else "content-length"
    print(f"{'ok  ' if ok else 'FAIL'} 300 MiB body to {path} ({how}): {r.status} in {time.time() - t0:.1f} s: {body[:120]!r}")
    return ok


openai = lambda d: isinstance(d.get("error"), dict) and "exceeds" in d["error"].get("message", "")
anthropic = lambda d: d.get("type") == "error" and d["error"].get("type") == "request_too_large"
good = attempt("/v1/chat/completions", False, openai)
good = attempt("/v1/chat/completions", True, openai) and good
good = attempt("/v1/messages", False, anthropic) and good
sys.exit(0 if good else 1)
