"""Tests of ladle.StreamParser (python/frontend_parser_py.cc), the streaming output parser.

Run through CTest (with the other tests in tests/python) or by hand:

    PYTHONPATH=build-py/python /usr/bin/python3 -m pytest -q tests/python/test_parser.py

The tokenizer is found as in test_tokenizer.py ($LADLE_TOKENIZER, the set-up cache, ../shared);
without it the tests skip, except under CI=true, where that is a failure.
"""

import json
import os
import pathlib

import pytest

import ladle

REPO = pathlib.Path(__file__).resolve().parents[2]
REL = pathlib.Path("tokenizers") / "deepseek-v3" / "tokenizer.json"

# Control-token ids (include/ladle/frontend/model_version.h).
END_THINK_V31 = 128799
CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP = 128806, 128807, 128808, 128809, 128814
DSML_V4 = 128825


def _tokenizer_path():
    env = os.environ.get("LADLE_TOKENIZER")
    if env:
        cands = [pathlib.Path(env)]
    else:
        cache = pathlib.Path(os.environ.get("LADLE_CACHE_DIR") or REPO / ".cache")
        shared = pathlib.Path(os.environ.get("LADLE_SHARED_DIR") or REPO.parent / "shared")
        cands = [cache / REL, shared / REL]
    for p in cands:
        if p.is_file():
            return p
    msg = "DeepSeek-V3 tokenizer.json not found (looked at: %s)" % ", ".join(str(p) for p in cands)
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def tok():
    return ladle.Tokenizer.from_file(str(_tokenizer_path()))


def enc(tok, text):
    """Ordinary tokens only: text can never become a control id."""
    return list(tok.encode(text, plain=True))


def run(parser, ids, chunk=None, reason="stop"):
    events = []
    if chunk is None:
        events += parser.push(ids)
    else:
        for i in range(0, len(ids), chunk):
            events += parser.push(ids[i:i + chunk])
    events += parser.finish(reason)
    return events


def summary(events):
    """What a client reconstructs: reasoning, content, calls, finish."""
    out = {"reasoning": "", "content": "", "calls": [], "finish": None}
    for e in events:
        t = e["type"]
        if t == "reasoning":
            out["reasoning"] += e["text"]
        elif t == "content":
            out["content"] += e["text"]
        elif t == "tool_call_start":
            assert e["index"] == len(out["calls"])
            out["calls"].append({"id": e["id"], "name": e["name"], "arguments": ""})
        elif t == "tool_call_args":
            assert e["index"] == len(out["calls"]) - 1
            out["calls"][-1]["arguments"] += e["text"]
        elif t == "finish":
            out["finish"] = (e["reason"], e["malformed"])
    assert events[-1]["type"] == "finish"
    return out


def test_reasoning_then_content(tok):
    ids = enc(tok, "Let me think.") + [END_THINK_V31] + enc(tok, "The answer is 4.")
    p = ladle.StreamParser("v3.1", tok, start_in_reasoning=True)
    s = summary(run(p, ids))
    assert s["reasoning"] == "Let me think."
    assert s["content"] == "The answer is 4."
    assert s["finish"] == ("stop", False)
    assert p.finished
    assert p.reasoning_tokens == len(enc(tok, "Let me think.")) + 1


def test_think_spelled_as_text_stays_reasoning(tok):
    ids = enc(tok, "a </think> b")
    s = summary(run(ladle.StreamParser("v3.1", tok, start_in_reasoning=True), ids))
    assert s["reasoning"] == "a </think> b"
    assert s["content"] == ""


def test_tool_call_v31_streams_name_then_arguments(tok):
    ids = ([CALLS_BEGIN, CALL_BEGIN] + enc(tok, "get_weather") + [SEP] + enc(tok, '{"location": "NYC"}') +
           [CALL_END, CALLS_END])
    p = ladle.StreamParser("v3.1", tok, tool_id_prefix="call_")
    upto_sep = 3 + len(enc(tok, "get_weather"))  # the two markers, the name, <｜tool▁sep｜>
    assert p.push(ids[:upto_sep - 1]) == []  # the name could still turn out broken
    first = p.push(ids[upto_sep - 1:upto_sep])
    assert first == [{"type": "tool_call_start", "index": 0, "id": "call_0", "name": "get_weather"}]
    s = summary(first + run(p, ids[upto_sep:]))
    assert [c["name"] for c in s["calls"]] == ["get_weather"]
    assert json.loads(s["calls"][0]["arguments"]) == {"location": "NYC"}
    assert s["finish"] == ("tool_calls", False)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunking_does_not_change_the_result(tok, chunk):
    ids = (enc(tok, "thinking…") + [END_THINK_V31] + enc(tok, "Checking. ") + [CALLS_BEGIN, CALL_BEGIN] +
           enc(tok, "f") + [SEP] + enc(tok, '{"q": "é 🦜"}') + [CALL_END, CALLS_END])
    whole = summary(run(ladle.StreamParser("v3.1", tok, True, tool_id_prefix="x"), ids))
    chunked = summary(run(ladle.StreamParser("v3.1", tok, True, tool_id_prefix="x"), ids, chunk=chunk))
    assert whole == chunked
    assert json.loads(whole["calls"][0]["arguments"]) == {"q": "é 🦜"}


def test_dsml_text_v32(tok):
    text = ('Sure. <｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="location" string="true">Tōkyō "central"</｜DSML｜parameter>\n'
            '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
            '</｜DSML｜invoke>\n</｜DSML｜function_calls>')
    s = summary(run(ladle.StreamParser("v3.2", tok), enc(tok, text), chunk=1))
    assert s["content"] == "Sure. "
    assert s["calls"][0]["name"] == "get_weather"
    assert json.loads(s["calls"][0]["arguments"]) == {"location": 'Tōkyō "central"', "days": 3}
    assert s["finish"] == ("tool_calls", False)


def test_dsml_token_v4_by_id_only(tok):
    # V4 has ｜DSML｜ as a token: markup spelled in text is content, markup with the id is a call.
    def v4_ids(text):
        ids = []
        for i, part in enumerate(text.split("｜DSML｜")):
            if i:
                ids.append(DSML_V4)
            ids += enc(tok, part)
        return ids
    text = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="ls">\n'
            '<｜DSML｜parameter name="path" string="true">/tmp</｜DSML｜parameter>\n'
            '</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    real = summary(run(ladle.StreamParser("v4", tok), v4_ids(text)))
    assert [c["name"] for c in real["calls"]] == ["ls"]
    assert json.loads(real["calls"][0]["arguments"]) == {"path": "/tmp"}
    spelled = summary(run(ladle.StreamParser("v4", tok), enc(tok, text)))
    assert spelled["calls"] == []
    assert spelled["content"] == text


def test_malformed_call_degrades_to_content(tok):
    # No <｜tool▁sep｜>: the name is never confirmed, so the section comes back as text.
    ids = [CALLS_BEGIN, CALL_BEGIN] + enc(tok, "get_time") + [CALL_END, CALLS_END]
    s = summary(run(ladle.StreamParser("v3.1", tok), ids))
    assert s["calls"] == []
    assert s["content"] == "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    assert s["finish"] == ("stop", True)


def test_truncated_call_keeps_the_engine_reason(tok):
    ids = [CALLS_BEGIN, CALL_BEGIN] + enc(tok, "f") + [SEP] + enc(tok, '{"a": "unfini')
    s = summary(run(ladle.StreamParser("v3.1", tok), ids, reason="length"))
    assert s["calls"][0]["arguments"] == '{"a": "unfini'
    assert s["finish"] == ("length", True)


def test_errors_and_after_finish(tok):
    with pytest.raises(ValueError):
        ladle.StreamParser("v9", tok)
    p = ladle.StreamParser("r1", tok, start_in_reasoning=True)
    with pytest.raises(TypeError):
        p.push([True])
    with pytest.raises(ValueError):
        p.push([-1])
    with pytest.raises(ValueError):
        p.finish("done")
    p.push(enc(tok, "x"))
    assert p.finish()[-1] == {"type": "finish", "reason": "stop", "malformed": False}
    assert p.push(enc(tok, "y")) == []
    assert p.finish() == []


def test_invalid_ids_are_skipped_and_counted(tok):
    p = ladle.StreamParser("v3", tok)
    s = summary(run(p, enc(tok, "a") + [10_000_000] + enc(tok, "b")))
    assert s["content"] == "ab"
    assert p.invalid_ids == 1


def test_prompt_opens_reasoning(tok):
    ids = list(tok.encode("<｜User｜>hi<｜Assistant｜>", plain=False))
    assert ladle.prompt_opens_reasoning("v3.1", tok, ids + [128798])
    assert not ladle.prompt_opens_reasoning("v3.1", tok, ids + [END_THINK_V31])
    assert ladle.prompt_opens_reasoning("r1", tok, ids + enc(tok, "<think>\n"))
    assert not ladle.prompt_opens_reasoning("r1", tok, ids)
