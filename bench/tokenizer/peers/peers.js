#!/usr/bin/env node
// Peer tokenizers measured on the same corpus files as ladle_bench_tokenizer:
//   - Hugging Face `tokenizers` (Rust core, Node binding): one encode() call on the whole
//     concatenated corpus; a single call runs on one thread.
//   - `tiktoken` (Rust core compiled to WebAssembly), built with DeepSeek's ranks and ONE
//     regex approximating DeepSeek's three Split stages. It is a SPEED peer only: its ids are
//     not DeepSeek's exactly (the combined regex differs at the edges), so only its token count
//     is checked for being in the right ballpark.
// Also the parity check: Ladle's EncodeTrusted ids (written by the C++ bench with --dump-ids)
// against Hugging Face's ids on the same text; they must be identical.
//
// usage: node peers.js --tokenizer=PATH [--out=PATH] [--ladle-ids=PATH] [--runs=N] [--quick]
//                      [--no-categories] FILE...
// Prints a JSON object (and writes it to --out). "MB" is 10^6 bytes of UTF-8 input.
'use strict';

const fs = require('fs');
const path = require('path');

function parseArgs(argv) {
  const a = { files: [], runs: 0, quick: false, categories: true };
  for (const arg of argv) {
    const m = /^--([^=]+)(?:=(.*))?$/.exec(arg);
    if (!m) { a.files.push(arg); continue; }
    const [, k, v] = m;
    if (k === 'tokenizer') a.tokenizer = v;
    else if (k === 'out') a.out = v;
    else if (k === 'ladle-ids') a.ladleIds = v;
    else if (k === 'runs') a.runs = Number(v);
    else if (k === 'quick') a.quick = true;
    else if (k === 'no-categories') a.categories = false;
    else throw new Error(`unknown flag --${k}`);
  }
  if (!a.tokenizer) throw new Error('--tokenizer=PATH is required');
  if (a.files.length === 0) throw new Error('no corpus files given');
  if (!a.runs) a.runs = a.quick ? 1 : 2;
  return a;
}

const MB = 1e6;
const now = () => Number(process.hrtime.bigint()) / 1e9;
const median = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const rssMB = () => process.memoryUsage().rss / MB;
// HF's Encoding holds its native memory until the JS wrapper is collected, and the wrapper is
// too small for V8 to hurry: run with --expose-gc (scripts/bench does) so each call's Encoding
// is freed before the next call instead of piling up gigabytes on a large corpus.
const collect = () => global.gc && global.gc();
const log = (...xs) => console.error('[peers]', ...xs);
// A package's version from its package.json (tiktoken's "exports" hides ./package.json).
const versionOf = (name) =>
  JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve(name)), 'package.json'), 'utf8')).version;

// GPT-2's byte-level alphabet: the printable bytes stand for themselves, the other 68 are
// mapped to U+0100.. in order. Returns char -> byte.
function byteLevelDecoder() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const m = new Map();
  bs.forEach((b, i) => m.set(String.fromCodePoint(cs[i]), b));
  return m;
}

// tiktoken's rank text: lines of "<label> <first rank> <base64 token> <base64 token> ...",
// one line per run of consecutive ranks. Rank = DeepSeek id: ids 3..258 are the 256 single
// bytes and the merged token of merge i has id i + 259, so ordering by id is merge priority.
function tiktokenRanks(tj) {
  const dec = byteLevelDecoder();
  const entries = Object.entries(tj.model.vocab).map(([tok, id]) => [id, tok]);
  const added = new Set(tj.added_tokens.map((t) => t.id));
  const rows = [];
  for (const [id, tok] of entries) {
    if (added.has(id)) continue;  // ids 0-2: special, given to tiktoken as special tokens
    const bytes = [];
    for (const ch of tok) {
      const b = dec.get(ch);
      if (b === undefined) throw new Error(`vocab entry ${id} has a char outside the byte alphabet`);
      bytes.push(b);
    }
    rows.push([id, Buffer.from(bytes).toString('base64')]);
  }
  rows.sort((x, y) => x[0] - y[0]);
  const lines = [];
  let cur = null;
  for (const [id, b64] of rows) {
    if (!cur || id !== cur.next) {
      cur = { start: id, next: id, toks: [] };
      lines.push(cur);
    }
    cur.toks.push(b64);
    cur.next = id + 1;
  }
  // The label field must itself be valid base64-ish text for the wasm parser; "!" is what
  // tiktoken's own encoders use.
  return {
    text: lines.map((l) => `! ${l.start} ${l.toks.join(' ')}`).join('\n'),
    count: rows.length,
  };
}

// One regex standing in for DeepSeek's three Split stages (which Hugging Face applies one
// after the other, each on the pieces of the previous): digits in runs of 1-3, runs of CJK
// (the second stage's ranges), then the third stage with digits and CJK taken out of its
// letter class, runs of what no stage matches, and a catch-all so tiktoken never drops a
// character.
function deepseekCombinedRegex() {
  const cjk = '\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff';
  return [
    '\\p{N}{1,3}',
    `[${cjk}]+`,
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+",
    `[^\\r\\n\\p{L}\\p{P}\\p{S}\\p{N}]?[[\\p{L}\\p{M}]--[${cjk}]]+`,
    ' ?[\\p{P}\\p{S}]+[\\r\\n]*',
    '\\s*[\\r\\n]+',
    // The third stage's \s+(?!\S) never sees a digit or CJK char after it (those are pieces
    // of their own by then), so they count as an end here.
    `\\s+(?![^\\s\\p{N}${cjk}])`,
    '\\s+',
    // Text no stage matches (format characters such as U+200D, ...) stays one piece per run.
    '[^\\s\\p{L}\\p{M}\\p{N}\\p{P}\\p{S}]+',
    '[\\s\\S]',
  ].join('|');
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const result = {
    quick: args.quick,
    runs: args.runs,
    corpus_files: args.files,
    node: process.version,
    versions: {},
  };

  // The corpus, byte-identical to the C++ side's (files concatenated in the given order).
  const bufs = args.files.map((f) => fs.readFileSync(f));
  const raw = Buffer.concat(bufs);
  const text = raw.toString('utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes !== raw.length) log(`WARNING: corpus is not valid UTF-8 (${raw.length} -> ${bytes} bytes)`);
  result.corpus_bytes = raw.length;
  const cats = args.files.map((f, i) => ({
    name: path.basename(f).replace(/\.[^.]*$/, '').replace(/[^A-Za-z0-9_-]/g, '_'),
    text: bufs[i].toString('utf8'),
    bytes: bufs[i].length,
  }));

  // ---- Hugging Face tokenizers
  const hfPkg = { version: versionOf('tokenizers') };
  result.versions.tokenizers = hfPkg.version;
  const { Tokenizer } = require('tokenizers');
  collect();
  const rss0 = rssMB();
  let t0 = now();
  const hf = await Tokenizer.fromFile(args.tokenizer);
  const hfLoadS = now() - t0;
  const hfRss = rssMB() - rss0;
  const hfOpts = { addSpecialTokens: false };
  // Warm-up run, which also gives the ids for the parity check.
  t0 = now();
  let hfEnc = await hf.encode(text, null, hfOpts);
  const hfFirst = now() - t0;
  const hfIds = hfEnc.getIds();
  hfEnc = null;
  collect();
  const times = [];
  for (let r = 0; r < args.runs; r++) {
    t0 = now();
    await hf.encode(text, null, hfOpts);
    times.push(now() - t0);
    collect();
  }
  const hfS = median(times);
  result.hf = {
    name: 'HF tokenizers',
    version: hfPkg.version,
    mb_per_s: bytes / hfS / MB,
    tokens_per_s: hfIds.length / hfS,
    seconds: hfS,
    seconds_first: hfFirst,
    tokens: hfIds.length,
    load_ms: hfLoadS * 1e3,
    rss_mb: hfRss,
    categories: {},
  };
  log(`HF tokenizers ${hfPkg.version}: ${result.hf.mb_per_s.toFixed(2)} MB/s, ` +
      `${hfIds.length} tokens (median of ${args.runs}; load ${(hfLoadS * 1e3).toFixed(0)} ms)`);

  // ---- tiktoken (wasm) with DeepSeek's ranks and the combined regex
  const ttPkg = { version: versionOf('tiktoken') };
  result.versions.tiktoken = ttPkg.version;
  const { Tiktoken } = require('tiktoken/lite');
  const tj = JSON.parse(fs.readFileSync(args.tokenizer, 'utf8'));
  t0 = now();
  const ranks = tiktokenRanks(tj);
  const special = {};
  for (const t of tj.added_tokens) special[t.content] = t.id;
  const pat = deepseekCombinedRegex();
  const tt = new Tiktoken(ranks.text, special, pat);
  const ttLoadS = now() - t0;
  // Added tokens are matched, as HF's encode() does (DeepSeek's have no strip/normalize flags,
  // so tiktoken's literal matching is the same thing).
  const ttEncode = (s) => tt.encode(s, 'all', []);
  const ttIds = ttEncode(text);  // warm-up + count
  const ttTimes = [];
  for (let r = 0; r < args.runs; r++) {
    t0 = now();
    ttEncode(text);
    ttTimes.push(now() - t0);
  }
  const ttS = median(ttTimes);
  // How close is the approximation? Same count and the share of equal ids at equal positions
  // (a cheap proxy; any early difference shifts the rest).
  let samePrefix = 0;
  while (samePrefix < ttIds.length && samePrefix < hfIds.length && ttIds[samePrefix] === hfIds[samePrefix]) samePrefix++;
  const roundTrip = Buffer.from(tt.decode(ttIds)).equals(raw);
  result.tiktoken = {
    name: 'tiktoken (wasm)',
    version: ttPkg.version,
    mb_per_s: bytes / ttS / MB,
    tokens_per_s: ttIds.length / ttS,
    seconds: ttS,
    tokens: ttIds.length,
    tokens_vs_hf: ttIds.length / hfIds.length,
    same_prefix_tokens: samePrefix,
    round_trip: roundTrip,
    load_ms: ttLoadS * 1e3,
    ranks: ranks.count,
    regex: pat,
    note: 'speed peer only: one combined regex approximates DeepSeek\'s three Split stages, so ids may differ from DeepSeek\'s',
    categories: {},
  };
  const ballpark = Math.abs(ttIds.length / hfIds.length - 1) < 0.05 && roundTrip;
  result.tiktoken.ballpark_ok = ballpark;
  result.tiktoken.ids_equal_hf = samePrefix === ttIds.length && ttIds.length === hfIds.length;
  log(`tiktoken ${ttPkg.version} (wasm, approximate regex): ${result.tiktoken.mb_per_s.toFixed(2)} MB/s, ` +
      `${ttIds.length} tokens (${(100 * (ttIds.length / hfIds.length - 1)).toFixed(2)}% vs HF, ` +
      `ids ${result.tiktoken.ids_equal_hf ? 'identical to HF here' : `equal to HF for the first ${samePrefix}`}, ` +
      `round trip ${roundTrip ? 'ok' : 'FAILED'})`);
  if (!ballpark) log('WARNING: tiktoken token count is not within 5% of HF, or it does not round-trip');

  // ---- per category (one timed run each, after the warm-ups above)
  if (args.categories && cats.length > 1) {
    for (const c of cats) {
      t0 = now();
      const e = await hf.encode(c.text, null, hfOpts);
      const s = now() - t0;
      collect();
      result.hf.categories[c.name] = { bytes: c.bytes, mb_per_s: c.bytes / s / MB, tokens: e.getIds().length };
      t0 = now();
      const ids = ttEncode(c.text);
      const s2 = now() - t0;
      result.tiktoken.categories[c.name] = { bytes: c.bytes, mb_per_s: c.bytes / s2 / MB, tokens: ids.length };
    }
  }
  tt.free();

  // ---- parity: Ladle's EncodeTrusted ids vs HF's
  if (args.ladleIds) {
    const b = fs.readFileSync(args.ladleIds);
    const ladle = new Uint32Array(b.buffer, b.byteOffset, b.length / 4);
    let first = -1;
    const n = Math.min(ladle.length, hfIds.length);
    for (let i = 0; i < n; i++) if (ladle[i] !== hfIds[i]) { first = i; break; }
    if (first < 0 && ladle.length !== hfIds.length) first = n;
    const parity = { ladle_tokens: ladle.length, hf_tokens: hfIds.length, equal: first < 0, first_mismatch: first };
    if (first >= 0) {
      const lo = Math.max(0, first - 5);
      const show = (ids) => Array.from(ids.slice(lo, first + 6), (id) => `${id}:${JSON.stringify(hf.idToToken(id))}`);
      parity.context_from = lo;
      parity.ladle_context = show(ladle);
      parity.hf_context = show(hfIds);
      // Byte offset of the mismatch in the corpus, from HF's decoding of the common prefix.
      parity.byte_offset = Buffer.byteLength(await hf.decode(hfIds.slice(0, first), false), 'utf8');
      log(`PARITY FAILURE: first differing id at index ${first} (byte ~${parity.byte_offset}); ` +
          `ladle ${ladle.length} ids, HF ${hfIds.length} ids`);
      log('  ladle:', parity.ladle_context.join(' '));
      log('  HF:   ', parity.hf_context.join(' '));
    } else {
      log(`parity: Ladle and HF ids identical (${ladle.length} ids)`);
    }
    result.parity = parity;
  }

  result.peak_rss_mb = (process.resourceUsage().maxRSS * 1024) / MB;
  const json = JSON.stringify(result, null, 2);
  if (args.out) fs.writeFileSync(args.out, json + '\n');
  process.stdout.write(json + '\n');
}

main().catch((e) => {
  console.error('[peers] error:', e && e.stack ? e.stack : e);
  process.exit(1);
});
