"""Tests of the `ladle` Python module (python/ladle_py.cc) against the DeepSeek-V3 tokenizer.

Run through CTest (`python_tokenizer`, which sets PYTHONPATH to <build>/python), or by hand:

    PYTHONPATH=build-py/python /usr/bin/python3 -m pytest -q tests/python

The tokenizer file is taken from $LADLE_TOKENIZER, else <cache>/tokenizers/deepseek-v3/
tokenizer.json (cache = $LADLE_CACHE_DIR or <repo>/.cache), else <shared>/tokenizers/deepseek-v3/
tokenizer.json (shared = $LADLE_SHARED_DIR or <repo>/../shared). When none exists the tests skip,
except under CI=true, where a missing tokenizer is a failure.

Expected ids were produced with Hugging Face `tokenizers` (node binding, encode with
addSpecialTokens=false). The "plain" column was produced by the same library with tokenizer.json's
added_tokens list emptied, i.e. pure byte-level BPE; None means it equals the trusted column.
"""

import os
import pathlib
import sys
import threading

import pytest

import ladle

REPO = pathlib.Path(__file__).resolve().parents[2]
REL = pathlib.Path("tokenizers") / "deepseek-v3" / "tokenizer.json"


def _candidates():
    env = os.environ.get("LADLE_TOKENIZER")
    if env:
        # An explicit path is the only candidate: a typo must not silently test another file.
        return [pathlib.Path(env)]
    cache = pathlib.Path(os.environ.get("LADLE_CACHE_DIR") or REPO / ".cache")
    shared = pathlib.Path(os.environ.get("LADLE_SHARED_DIR") or REPO.parent / "shared")
    return [cache / REL, shared / REL]


def _tokenizer_path():
    cands = _candidates()
    for p in cands:
        if p.is_file():
            return p
    msg = "DeepSeek-V3 tokenizer.json not found (looked at: %s; set LADLE_TOKENIZER)" % ", ".join(
        str(p) for p in cands)
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def tok():
    return ladle.Tokenizer.from_file(str(_tokenizer_path()))


GOLDEN = [
    # (text, HF ids with added tokens matched (= EncodeTrusted), pure BPE ids (= EncodePlain))
    ("Hello, world!", [19923, 14, 2058, 3], None),
    ("The quick brown fox jumps over the lazy dog.", [671, 4787, 13769, 46012, 54994, 1060, 270, 41638, 6397, 16], None),
    ("你好，世界", [30594, 303, 3427], None),
    ("emoji 🎉🚀 test", [18872, 7063, 7351, 239, 234, 74287, 225, 1950], None),
    ("  leading   spaces\n\n\ttabs", [223, 6646, 262, 13564, 271, 17299, 10284], None),
    ("12345 67890", [6895, 1883, 223, 27183, 2225], None),
    ("def f(x):\n    return x*2\n", [3465, 285, 4042, 3395, 361, 1354, 1527, 12, 20, 201], None),
    ("Привет, мир! Ça va? naïve café", [24797, 8919, 14, 74779, 3, 62101, 67, 10879, 33, 112752, 57664], None),
    ("こんにちは、カタカナ・ひらがな", [4549, 7245, 2298, 12457, 2841, 410, 15961, 11767, 15961, 27071, 4825, 40259, 4970, 2936, 2942], None),
    ("", [], None),
    (" ", [223], None),
    ("\n", [201], None),
    ("<｜User｜>", [128803], [30, 28217, 6756, 28217, 32]),
    ("<｜User｜>hi<｜Assistant｜>", [128803, 6366, 128804], [30, 28217, 6756, 28217, 32, 6366, 30, 28217, 88031, 28217, 32]),
    ("a<|EOT|>b", [67, 128805, 68], [67, 30, 94, 39, 4894, 94, 32, 68]),
    ("<｜begin▁of▁sentence｜>You are helpful.<｜User｜>2+2=?<｜Assistant｜></think>4<｜end▁of▁sentence｜>",
     [0, 3476, 477, 11502, 16, 128803, 20, 13, 20, 127252, 128804, 1718, 37947, 32, 22, 1],
     [30, 28217, 8277, 5487, 226, 2154, 5487, 226, 85, 51015, 28217, 32, 3476, 477, 11502, 32334, 28217, 6756, 28217, 32, 20, 13, 20, 127252, 30, 28217, 88031, 28217, 7339, 37947, 32, 22, 30, 28217, 523, 5487, 226, 2154, 5487, 226, 85, 51015, 28217, 32]),
    ("x <｜tool▁sep｜> y", [90, 223, 128814, 383], [90, 818, 28217, 72461, 5487, 226, 88351, 28217, 32, 383]),
]

BOS = 0
USER = 128803
ASSISTANT = 128804
EOS = 1

# A mixed text (scripts, digits, code, whitespace runs, emoji, added-token literals) used to build
# large inputs.
MIXED = (
    "The quick brown fox jumps over the lazy dog. 1234567 apples\n"
    "你好，世界！这是一个测试。こんにちは、カタカナ。\n"
    "def f(x):\n\treturn x ** 2  # comment\n\n\n"
    "Ünïcödé — “quotes” 🎉🚀👩‍👩‍👧 <｜User｜> <|EOT|>   trailing   \r\n"
)


def _big_text(min_bytes):
    reps = min_bytes // len(MIXED.encode("utf-8")) + 1
    return "".join("%d:%s" % (i, MIXED) for i in range(reps))


def _added_ids(tok):
    return {t.id for t in tok.added_tokens}


# ---------------------------------------------------------------------------------------------
# Loading and lookups


def test_vocab_and_lookups(tok):
    assert tok.vocab_size == 128815  # added tokens run to 128814
    assert len(tok) == tok.vocab_size
    assert tok.token_to_id("<｜User｜>") == USER
    assert tok.token_to_id("Ġthe") == 270
    assert tok.token_to_id("Hello") == 19923
    assert tok.token_to_id("definitely not a token \u2603") is None
    assert tok.id_to_token(USER) == "<｜User｜>"
    assert tok.id_to_token(270) == "Ġthe"
    assert tok.id_to_token(tok.vocab_size + 10) is None
    assert tok.id_to_token(-1) is None
    assert tok.is_added_token(USER) and not tok.is_added_token(270)
    assert tok.is_valid_id(0) and tok.is_valid_id(128814) and not tok.is_valid_id(128815)
    added = tok.added_tokens
    assert len(added) == 818
    by_id = {t.id: t for t in added}
    assert by_id[0].content == "<｜begin▁of▁sentence｜>" and by_id[0].special
    assert by_id[USER].content == "<｜User｜>" and not by_id[USER].special
    assert tok.memory_bytes > 0
    assert "vocab_size=128815" in repr(tok)


def test_from_file_accepts_pathlike():
    t = ladle.Tokenizer.from_file(_tokenizer_path())
    assert t.encode("Hello, world!") == [19923, 14, 2058, 3]


# ---------------------------------------------------------------------------------------------
# Encoding: parity with Hugging Face


@pytest.mark.parametrize("text,trusted,plain", GOLDEN, ids=[repr(g[0])[:40] for g in GOLDEN])
def test_golden_ids(tok, text, trusted, plain):
    if plain is None:
        plain = trusted
    assert tok.encode(text, plain=False) == trusted
    assert tok.encode(text) == plain
    assert tok.encode(text, plain=True) == plain
    # bytes input is encoded as the same UTF-8
    assert tok.encode(text.encode("utf-8")) == plain


def test_plain_vs_trusted_user_token(tok):
    added = _added_ids(tok)
    plain = tok.encode("<｜User｜>")
    assert plain == [30, 28217, 6756, 28217, 32]
    assert not added.intersection(plain)
    assert tok.encode("<｜User｜>", plain=False) == [USER]
    assert tok.decode(plain) == "<｜User｜>"


def test_plain_never_yields_added_ids(tok):
    added = _added_ids(tok)
    every_literal = "".join(t.content for t in tok.added_tokens)
    for text in (every_literal, " ".join(t.content for t in tok.added_tokens), "x" + every_literal + "\n"):
        ids = tok.encode(text)
        assert not added.intersection(ids)
        assert tok.decode(ids) == text
        # trusted turns every literal back into its own id
    trusted = tok.encode(every_literal, plain=False)
    assert trusted == [t.id for t in tok.added_tokens]


def test_keyword_only_plain(tok):
    with pytest.raises(TypeError):
        tok.encode("hi", False)  # plain is keyword-only


def test_large_input_parallel_matches_serial(tok):
    text = _big_text(1 << 20)  # well above the 256 KiB parallel threshold
    assert tok.encode(text) == tok._encode_plain_serial(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, plain=False)) == text


# ---------------------------------------------------------------------------------------------
# Batches


def test_encode_batch_equals_per_item(tok):
    texts = [g[0] for g in GOLDEN] + [MIXED * 3, _big_text(300 * 1024)]
    for plain in (True, False):
        batch = tok.encode_batch(texts, plain=plain)
        assert batch == [tok.encode(t, plain=plain) for t in texts]
    assert tok.encode_batch([]) == []
    assert tok.encode_batch(iter(["a", "b"])) == [tok.encode("a"), tok.encode("b")]
    assert tok.encode_batch(("<｜User｜>",), plain=False) == [[USER]]
    with pytest.raises(TypeError):
        tok.encode_batch(["ok", 3])


def test_encode_batch_many_small(tok):
    texts = ["item %d: %s" % (i, MIXED[: i % len(MIXED)]) for i in range(500)]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


# ---------------------------------------------------------------------------------------------
# Decoding


@pytest.mark.parametrize("text", [g[0] for g in GOLDEN] + [MIXED])
def test_round_trip(tok, text):
    for plain in (True, False):
        ids = tok.encode(text, plain=plain)
        assert tok.decode(ids) == text
        assert tok.decode_bytes(ids) == text.encode("utf-8")


def test_decode_accepts_iterables(tok):
    ids = tok.encode("Hello, world!")
    assert tok.decode(tuple(ids)) == "Hello, world!"
    assert tok.decode(iter(ids)) == "Hello, world!"
    assert tok.decode([]) == ""
    assert tok.decode([USER, ASSISTANT]) == "<｜User｜><｜Assistant｜>"


def test_decode_partial_code_point(tok):
    text = "🎉"
    ids = tok.encode(text)
    assert len(ids) > 1  # this emoji is split across byte-level tokens
    pieces = [tok.decode_bytes([i]) for i in ids]
    assert b"".join(pieces) == text.encode("utf-8")
    # A lone piece of a code point decodes with U+FFFD replacement, never raises.
    assert "\ufffd" in tok.decode(ids[:1])
    assert tok.decode_bytes(ids[:1]) == pieces[0]


def test_non_utf8_bytes_round_trip(tok):
    raw = b"ok \xff\xfe \xe4\xbd tail \xc3"
    ids = tok.encode(raw)
    assert tok.decode_bytes(ids) == raw
    assert tok.decode(ids) == raw.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------------
# Incremental decoding


@pytest.mark.parametrize("text", ["こんにちは、カタカナ・ひらがな", "emoji 🎉🚀👩‍👩‍👧 test", MIXED])
def test_incremental_decoder(tok, text):
    ids = tok.encode(text, plain=False)
    dec = ladle.IncrementalDecoder(tok)
    out = []
    for i in ids:
        piece = dec.push(i)
        assert "\ufffd" not in piece  # only complete code points come out
        out.append(piece)
    out.append(dec.flush())
    assert "".join(out) == tok.decode(ids) == text
    assert dec.pending_bytes == 0


def test_incremental_decoder_holds_partial(tok):
    ids = tok.encode("🎉")
    dec = ladle.IncrementalDecoder(tok)
    assert dec.push(ids[0]) == ""
    assert dec.pending_bytes > 0
    rest = b"".join(dec.push_bytes(i) for i in ids[1:])
    assert rest == "🎉".encode("utf-8")
    assert dec.flush_bytes() == b""
    # An incomplete tail comes out at flush.
    dec.push(ids[0])
    assert dec.flush_bytes() == tok.decode_bytes(ids[:1])
    assert dec.pending_bytes == 0


# ---------------------------------------------------------------------------------------------
# Segments


def test_encode_segments(tok):
    a, b = "You are helpful.", " What is 2+2?"
    ids, pos = tok.encode_segments([BOS, a, USER, b, ASSISTANT])
    ea, eb = tok.encode(a), tok.encode(b)
    assert ids == [0] + ea + [USER] + eb + [ASSISTANT]
    assert pos == [0, 1 + len(ea), 2 + len(ea) + len(eb)]
    assert [ids[p] for p in pos] == [0, USER, ASSISTANT]


def test_encode_segments_text_is_plain(tok):
    added = _added_ids(tok)
    ids, pos = tok.encode_segments(["<｜User｜>", USER, "<｜Assistant｜>"])
    assert pos == [5]
    assert [i for i in ids if i in added] == [USER]
    assert tok.decode(ids) == "<｜User｜><｜User｜><｜Assistant｜>"


def test_encode_segments_edge_cases(tok):
    assert tok.encode_segments([]) == ([], [])
    assert tok.encode_segments(["", USER, ""]) == ([USER], [0])
    big = _big_text(300 * 1024)
    ids, pos = tok.encode_segments([big, EOS])
    assert ids == tok.encode(big) + [EOS]
    assert pos == [len(ids) - 1]


def test_encode_segments_errors(tok):
    with pytest.raises(ValueError):
        tok.encode_segments(["hi", 270])  # a vocabulary id, not an added token
    with pytest.raises(ValueError):
        tok.encode_segments([tok.vocab_size + 1])
    with pytest.raises(ValueError):
        tok.encode_segments([-1])
    with pytest.raises(TypeError):
        tok.encode_segments(["hi", 1.5])
    with pytest.raises(TypeError):
        tok.encode_segments([True])


# ---------------------------------------------------------------------------------------------
# Errors: Status → exception


def test_from_file_missing(tmp_path):
    missing = tmp_path / "nope" / "tokenizer.json"
    with pytest.raises(OSError) as ei:
        ladle.Tokenizer.from_file(str(missing))
    assert type(ei.value) in (FileNotFoundError, OSError)
    assert ei.value.status_code in ("NotFound", "IoError")
    assert str(ei.value).startswith(ei.value.status_code + ":")


def test_from_json_invalid():
    with pytest.raises(ValueError) as ei:
        ladle.Tokenizer.from_json("{ this is not json")
    assert ei.value.status_code in ("ParseError", "InvalidArgument", "Unsupported")


def test_from_json_unsupported_model():
    with pytest.raises(ValueError):
        ladle.Tokenizer.from_json('{"model": {"type": "Unigram", "vocab": []}}')


def test_decode_out_of_range(tok):
    for bad in ([tok.vocab_size + 5], [19923, 10**6], [-1], [2**32], [2**70]):
        with pytest.raises(IndexError) as ei:
            tok.decode(bad)
        assert ei.value.status_code == "OutOfRange"
        with pytest.raises(IndexError):
            tok.decode_bytes(bad)
    with pytest.raises(TypeError):
        tok.decode(["a"])
    with pytest.raises(TypeError):
        tok.decode("abc")
    with pytest.raises(TypeError):
        tok.decode([1.0])


def test_incremental_decoder_out_of_range(tok):
    dec = ladle.IncrementalDecoder(tok)
    assert dec.push(19923) == "Hello"
    with pytest.raises(IndexError):
        dec.push(tok.vocab_size)
    with pytest.raises(IndexError):
        dec.push(-3)
    # still usable after an error
    assert dec.push(14) == ","


def test_encode_rejects_non_text(tok):
    with pytest.raises(TypeError):
        tok.encode(123)
    with pytest.raises(UnicodeEncodeError):
        tok.encode("lone surrogate \ud800")


# ---------------------------------------------------------------------------------------------
# The GIL


def test_threads_encode_concurrently(tok):
    text = _big_text(2 << 20)
    expected = tok._encode_plain_serial(text)
    results = [None] * 4
    errors = []

    def work(k):
        try:
            results[k] = tok.encode(text) if k % 2 == 0 else tok.encode_batch([text, MIXED])[0]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert not errors
    assert all(r == expected for r in results)


def test_encode_releases_gil(tok):
    """While one thread is inside encode(), another Python thread gets to run.

    With a huge switch interval the interpreter never preempts a thread that holds the GIL, so
    the main thread can only run while the worker is inside encode() if encode() released it.
    (No timing is asserted: the encode takes far longer than waking a thread.)
    """
    text = _big_text(4 << 20)
    started = threading.Event()
    finished = threading.Event()
    out = []

    def work():
        started.set()
        out.append(tok._encode_plain_serial(text))
        finished.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        t = threading.Thread(target=work)
        t.start()
        started.wait()
        ran_during_encode = not finished.is_set()
    finally:
        sys.setswitchinterval(old)
    t.join()
    assert ran_during_encode, "the main thread could not run while encode() was in progress"
    assert out[0] == tok.encode(text)
