#!/usr/bin/env node
// Ladle tokenizer parity corpus generator.
//
// Usage: node make_corpus.js OUT_DIR
//
// Writes a deterministic set of UTF-8 text files into OUT_DIR. The output
// depends only on this file and on the exactly pinned npm packages listed in
// package.json (checked at start-up). It does not use Date, Math.random,
// Intl, RegExp Unicode property escapes or anything else whose behaviour
// depends on the Node/ICU version, so two machines produce byte-identical
// files. (String.prototype.normalize is used only on characters that were
// encoded in Unicode 3.0 or earlier, whose decompositions are frozen.)
//
// The corpus targets a byte-level BPE tokenizer with the DeepSeek V3
// pre-tokenizer (three Oniguruma Split regexes + ByteLevel). Real text comes
// from npm packages; edge-case categories are synthetic.
'use strict';

const fs = require('fs');
const path = require('path');

// ---------------------------------------------------------------------------
// Pinned sources
// ---------------------------------------------------------------------------

const PINNED = {
  'typescript': '5.9.3',
  'nlp-corpus': '4.4.0',
  'cldr-annotations-full': '48.2.0',
  'unicode-emoji-json': '0.9.0',
};

const NODE_MODULES = path.join(__dirname, 'node_modules');

function pkgFile(name, rel) {
  return path.join(NODE_MODULES, name, rel);
}

function checkPinned() {
  for (const [name, version] of Object.entries(PINNED)) {
    const pj = pkgFile(name, 'package.json');
    if (!fs.existsSync(pj)) {
      throw new Error(`${name} is not installed; run scripts/corpus (npm ci in tools/corpus)`);
    }
    const got = JSON.parse(fs.readFileSync(pj, 'utf8')).version;
    if (got !== version) {
      throw new Error(`${name}@${got} installed but ${version} is pinned; run npm ci in tools/corpus`);
    }
  }
}

function readText(name, rel) {
  return fs.readFileSync(pkgFile(name, rel), 'utf8');
}

function readJson(name, rel) {
  return JSON.parse(readText(name, rel));
}

// ---------------------------------------------------------------------------
// Deterministic PRNG: xoshiro128** seeded through splitmix32 from an FNV-1a
// hash of a string (the output file name), so every file has its own stream.
// ---------------------------------------------------------------------------

class Rng {
  constructor(seedText) {
    let h = 0x811c9dc5;
    for (const b of Buffer.from(String(seedText), 'utf8')) {
      h ^= b;
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    let a = h;
    const sm = () => {
      a = (a + 0x9e3779b9) | 0;
      let t = a ^ (a >>> 16);
      t = Math.imul(t, 0x21f0aaad);
      t ^= t >>> 15;
      t = Math.imul(t, 0x735a2d97);
      t ^= t >>> 15;
      return t >>> 0;
    };
    this.s = [sm(), sm(), sm(), sm()];
  }
  u32() {
    const s = this.s;
    const r = Math.imul(rotl(Math.imul(s[1], 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1] << 9) >>> 0;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    for (let i = 0; i < 4; i++) s[i] >>>= 0;
    return r;
  }
  // integer in [0, n)
  below(n) {
    return Math.floor((this.u32() / 4294967296) * n);
  }
  // integer in [lo, hi]
  int(lo, hi) {
    return lo + this.below(hi - lo + 1);
  }
  chance(p) {
    return this.u32() / 4294967296 < p;
  }
  pick(arr) {
    return arr[this.below(arr.length)];
  }
  // weighted pick: items = [[weight, value], ...]
  wpick(items) {
    let total = 0;
    for (const [w] of items) total += w;
    let x = (this.u32() / 4294967296) * total;
    for (const [w, v] of items) {
      if (x < w) return v;
      x -= w;
    }
    return items[items.length - 1][1];
  }
  shuffle(arr) {
    const a = arr.slice();
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }
}

function rotl(x, k) {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const C = (cp) => String.fromCodePoint(cp);
const range = (lo, hi) => {
  const out = [];
  for (let c = lo; c <= hi; c++) out.push(c);
  return out;
};
const chars = (lo, hi) => range(lo, hi).map(C);

// Collects the text of one output file, tracking its UTF-8 size.
class Sink {
  constructor(name, budget) {
    this.name = name;
    this.budget = budget;
    this.parts = [];
    this.bytes = 0;
  }
  add(s) {
    this.parts.push(s);
    this.bytes += Buffer.byteLength(s, 'utf8');
  }
  line(s) {
    this.add(s + '\n');
  }
  full() {
    return this.bytes >= this.budget;
  }
  text() {
    return this.parts.join('');
  }
}

// UTF-8 lead byte of a code point.
function leadByte(cp) {
  if (cp < 0x80) return cp;
  if (cp < 0x800) return 0xc0 | (cp >> 6);
  if (cp < 0x10000) return 0xe0 | (cp >> 12);
  return 0xf0 | (cp >> 18);
}

// Cut a text at line boundaries: lines [from, from+count).
function lineSlice(text, fromFrac, maxBytes) {
  const lines = text.split('\n');
  let i = Math.floor(lines.length * fromFrac);
  const out = [];
  let bytes = 0;
  while (i < lines.length && bytes < maxBytes) {
    out.push(lines[i]);
    bytes += Buffer.byteLength(lines[i], 'utf8') + 1;
    i++;
  }
  return out.join('\n') + '\n';
}

// ---------------------------------------------------------------------------
// Added tokens of the DeepSeek V3 tokenizer (ids 0-2, 128000-128814). Kept
// here as data so the corpus does not depend on reading tokenizer.json;
// reference_ids.js checks this list against the tokenizer file.
// ---------------------------------------------------------------------------

const ADDED_TOKENS = (() => {
  const t = [
    [0, '<｜begin▁of▁sentence｜>'],
    [1, '<｜end▁of▁sentence｜>'],
    [2, '<｜▁pad▁｜>'],
  ];
  for (let i = 0; i < 800; i++) t.push([128000 + i, `<｜place▁holder▁no▁${i}｜>`]);
  const named = [
    '<｜fim▁hole｜>', '<｜fim▁begin｜>', '<｜fim▁end｜>', '<｜User｜>', '<｜Assistant｜>',
    '<|EOT|>', '<｜tool▁calls▁begin｜>', '<｜tool▁calls▁end｜>', '<｜tool▁call▁begin｜>',
    '<｜tool▁call▁end｜>', '<｜tool▁outputs▁begin｜>', '<｜tool▁outputs▁end｜>',
    '<｜tool▁output▁begin｜>', '<｜tool▁output▁end｜>', '<｜tool▁sep｜>',
  ];
  named.forEach((s, i) => t.push([128800 + i, s]));
  return t;
})();

// ---------------------------------------------------------------------------
// Shared real-text loaders
// ---------------------------------------------------------------------------

function tsMessages(locale) {
  const obj = readJson('typescript', `lib/${locale}/diagnosticMessages.generated.json`);
  return Object.keys(obj).map((k) => obj[k]);
}

function tsMessageMaps(locales) {
  const out = {};
  for (const l of locales) out[l] = readJson('typescript', `lib/${l}/diagnosticMessages.generated.json`);
  return out;
}

const cldrCache = new Map();
// [{key, tts, def: [...]}, ...] in file order.
function cldr(locale) {
  if (cldrCache.has(locale)) return cldrCache.get(locale);
  const obj = readJson('cldr-annotations-full', `annotations/${locale}/annotations.json`).annotations.annotations || {};
  const out = [];
  for (const key of Object.keys(obj)) {
    const v = obj[key];
    out.push({ key, tts: (v.tts && v.tts[0]) || '', def: v.default || [] });
  }
  cldrCache.set(locale, out);
  return out;
}

function cldrMap(locale) {
  const m = new Map();
  for (const e of cldr(locale)) m.set(e.key, e);
  return m;
}

// CJK-style rendering of one CLDR annotation entry.
function cldrLineCjk(e, sep, end) {
  const parts = [];
  if (e.tts) parts.push(e.tts);
  const rest = e.def.filter((d) => d !== e.tts);
  return parts.concat(rest.length ? [rest.join(sep)] : []).join('：') + end;
}

// ---------------------------------------------------------------------------
// english_prose.txt: nlp-corpus sentences grouped into paragraphs.
// ---------------------------------------------------------------------------

function genEnglishProse(rng, sink) {
  for (let d = 0; d < 100 && !sink.full(); d++) {
    const sentences = readJson('nlp-corpus', `builds/doc-${d}.json`);
    let i = 0;
    while (i < sentences.length && !sink.full()) {
      const n = rng.int(1, 6);
      const para = sentences.slice(i, i + n).join(' ');
      i += n;
      sink.add(para + rng.wpick([[75, '\n\n'], [22, '\n'], [3, '\n\n\n']]));
    }
  }
}

// ---------------------------------------------------------------------------
// source_code.txt: TypeScript's own .d.ts and compiled JavaScript.
// ---------------------------------------------------------------------------

function genSourceCode(rng, sink) {
  const head = (f, note) => `// ==== typescript@${PINNED.typescript} lib/${f}${note ? ' ' + note : ''} ====\n`;
  const whole = ['lib.es5.d.ts', 'lib.es2015.collection.d.ts', 'lib.es2015.iterable.d.ts',
    'lib.es2015.promise.d.ts', 'lib.es2015.symbol.wellknown.d.ts', 'lib.es2022.intl.d.ts',
    'lib.decorators.d.ts'];
  for (const f of whole) {
    sink.add(head(f));
    sink.add(readText('typescript', `lib/${f}`));
  }
  const tsd = readText('typescript', 'lib/typescript.d.ts');
  sink.add(head('typescript.d.ts', '(excerpt)'));
  sink.add(lineSlice(tsd, 0.05, 260000));
  const dom = readText('typescript', 'lib/lib.dom.d.ts');
  sink.add(head('lib.dom.d.ts', '(excerpt)'));
  sink.add(lineSlice(dom, 0.40, 180000));
  const js = readText('typescript', 'lib/typescript.js');
  sink.add(head('typescript.js', '(excerpt)'));
  sink.add(lineSlice(js, 0.12, 330000));
  // Same code, re-indented with tabs (each leading 4 spaces -> one tab).
  sink.add(head('typescript.js', '(excerpt, tab-indented)'));
  sink.add(lineSlice(js, 0.47, 260000).split('\n').map((l) => {
    const m = /^( {4})+/.exec(l);
    return m ? '\t'.repeat(m[0].length / 4) + l.slice(m[0].length) : l;
  }).join('\n'));
  // Same code with Windows line endings and a few trailing spaces.
  sink.add(head('typescript.js', '(excerpt, CRLF)').replace('\n', '\r\n'));
  sink.add(lineSlice(js, 0.81, 260000).split('\n').map((l) =>
    (rng.chance(0.03) ? l + ' '.repeat(rng.int(1, 3)) : l)).join('\r\n'));
  // Fill the rest of the budget with another plain excerpt.
  if (!sink.full()) {
    sink.add(head('typescript.js', '(excerpt)'));
    sink.add(lineSlice(js, 0.66, sink.budget - sink.bytes));
  }
}

// ---------------------------------------------------------------------------
// chinese.txt / japanese.txt / korean.txt: TypeScript diagnostic message
// translations and CLDR annotation words.
// ---------------------------------------------------------------------------

function genCjk(rng, sink, tsLocales, cldrLocales, sep, end) {
  for (const l of tsLocales) {
    for (const m of tsMessages(l)) sink.line(m);
    sink.add('\n');
  }
  for (const l of cldrLocales) {
    const entries = cldr(l);
    let line = '';
    for (const e of entries) {
      line += cldrLineCjk(e, sep, end);
      if (rng.chance(0.25)) {
        sink.line(line);
        line = '';
      }
    }
    if (line) sink.line(line);
    sink.add('\n');
  }
  // Bilingual lines: emoji/symbol, English name, localized name(s).
  const en = cldrMap('en');
  for (const l of cldrLocales) {
    for (const e of cldr(l)) {
      const x = en.get(e.key);
      if (!x || !e.tts) continue;
      sink.line(`${e.key} ${x.tts} = ${e.tts}${rng.chance(0.3) ? ' (' + e.def.join(', ') + ')' : ''}`);
    }
  }
}

// ---------------------------------------------------------------------------
// european.txt: TypeScript messages in cs/de/es/fr/it/pl/pt-br/ru/tr.
// ---------------------------------------------------------------------------

function genEuropean(rng, sink) {
  const locales = ['cs', 'de', 'es', 'fr', 'it', 'pl', 'pt-br', 'ru', 'tr'];
  const maps = tsMessageMaps(locales);
  const keys = Object.keys(maps.de);
  for (let i = 0; i < keys.length && !sink.full(); i++) {
    for (let j = 0; j < locales.length; j++) {
      const l = locales[(i + j) % locales.length];
      const msg = maps[l][keys[i]];
      if (msg !== undefined) sink.line(msg);
    }
  }
}

// ---------------------------------------------------------------------------
// mixed_scripts.txt: the same CLDR annotations in many scripts on one line,
// RTL/LTR marks, glued words of different scripts, CJK range boundaries.
// ---------------------------------------------------------------------------

const SCRIPT_LOCALES = [
  'ar', 'he', 'el', 'ru', 'uk', 'bg', 'sr', 'mk', 'kk', 'mn', 'hi', 'mr', 'ne', 'bn', 'as',
  'pa', 'gu', 'or', 'ta', 'te', 'kn', 'ml', 'si', 'th', 'lo', 'km', 'my', 'ka', 'hy', 'am', 'ti',
  'fa', 'ur', 'ps', 'sd', 'ug', 'syr', 'chr', 'sat', 'mni', 'ccp', 'ff-Adlm', 'ja', 'ko',
  'zh', 'zh-Hant', 'yue', 'vi', 'tr', 'pl', 'cs', 'de', 'is', 'ro', 'hu', 'lt', 'lv', 'az', 'yo',
  'ha', 'sq', 'en',
];
const RTL_LOCALES = new Set(['ar', 'he', 'fa', 'ur', 'ps', 'sd', 'ug', 'syr', 'ff-Adlm']);
const BIDI_MARKS = ['\u200e', '\u200f', '\u061c', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e',
  '\u2066', '\u2067', '\u2068', '\u2069'];

function genMixedScripts(rng, sink) {
  const maps = SCRIPT_LOCALES.map((l) => [l, cldrMap(l)]);
  const keys = cldr('en').map((e) => e.key);
  const seps = [' · ', ' | ', ', ', ' — ', ' / ', '; ', '', ' ', '、', ' ، ', '\t'];

  // CJK ranges of the second Split and their neighbours (U+4E00-U+9FA5,
  // U+3040-U+309F, U+30A0-U+30FF): edges, katakana middle dot and prolonged
  // sound mark, halfwidth katakana, ext. A, compatibility ideographs,
  // combining kana voicing marks, iteration marks.
  const cjkEdge = [
    '\u4dff', '\u4e00', '\u4e01', '\u9fa4', '\u9fa5', '\u9fa6', '\u9fff', '\u303f', '\u3040',
    '\u3041', '\u3099', '\u309a', '\u309b', '\u309d', '\u309e', '\u309f', '\u30a0', '\u30a1',
    '\u30fb', '\u30fc', '\u30fd', '\u30fe', '\u30ff', '\u3100', '\u31f0', '\u3005', '\u3006',
    '\u3007', '\u3021', '\u303b', '\u3400', '\u4db5', '\uf900', '\ufa6d', '\uff66', '\uff70',
    '\uff9e', '\uff9f', '\u{20000}', '\u{2a6d6}', '\u{2f800}', '\u3000', '\u3001', '\u3002',
    '\uff0c', '\u300c', '\u300d', 'ｱ', 'ｶﾞ', 'ー', '・', '〜', 'ゝ', 'ゞ', 'ヽ', 'ヾ', 'ㇰ',
  ];
  const cjkWords = ['カタカナ', 'ひらがな', '漢字', 'コンピューター', 'ジョン・スミス', 'スーパー',
    'データ・ベース', 'ｶﾀｶﾅ', 'ﾃﾞｰﾀ', '中文', '日本語', '한국어', 'ABC', 'abc', '123', '１２３',
    'テ\u3099スト', 'か\u3099', 'ゔ', 'ヴァ', '〇〇', '々', '𠀋', '𪚲', '丂', '龥', '龦', '鿿'];
  for (let i = 0; i < 4000; i++) {
    let s = '';
    const n = rng.int(2, 8);
    for (let j = 0; j < n; j++) {
      s += rng.chance(0.5) ? rng.pick(cjkEdge) : rng.pick(cjkWords);
      if (rng.chance(0.2)) s += rng.pick([' ', '', '\u3000', '・', '-', '.']);
    }
    sink.line(s);
  }
  sink.add('\n');

  // Glued words from different scripts (no separators).
  const pools = maps.map(([l, m]) => {
    const words = [];
    for (const k of keys.slice(0, 400)) {
      const e = m.get(k);
      if (e && e.tts) for (const w of e.tts.split(' ')) if (w) words.push(w);
    }
    return words;
  }).filter((p) => p.length > 0);
  for (let i = 0; i < 6000; i++) {
    const n = rng.int(2, 6);
    let s = '';
    for (let j = 0; j < n; j++) {
      s += rng.pick(rng.pick(pools));
      if (rng.chance(0.3)) s += rng.pick([' ', '', '-', '_', '.', ',', '1', '٣', '\u200d', '\u200c']);
    }
    sink.line(s);
  }
  sink.add('\n');

  // One line per CLDR key: names in 4-9 random scripts, with bidi controls.
  let pass = 0;
  while (!sink.full()) {
    for (const key of keys) {
      if (sink.full()) break;
      const n = rng.int(4, 9);
      const parts = [];
      if (rng.chance(0.5)) parts.push(key);
      for (let j = 0; j < n; j++) {
        const [l, m] = rng.pick(maps);
        const e = m.get(key);
        if (!e) continue;
        let t = pass === 0 ? e.tts : rng.pick(e.def.length ? e.def : [e.tts]);
        if (!t) continue;
        if (RTL_LOCALES.has(l) && rng.chance(0.4)) {
          const open = rng.pick(BIDI_MARKS);
          t = open + t + (rng.chance(0.7) ? rng.pick(BIDI_MARKS) : '');
        }
        parts.push(t);
      }
      let line = '';
      parts.forEach((p, j) => {
        line += (j ? rng.pick(seps) : '') + p;
      });
      sink.line(line);
    }
    pass++;
  }
}

// ---------------------------------------------------------------------------
// emoji.txt
// ---------------------------------------------------------------------------

const SKIN = ['\u{1f3fb}', '\u{1f3fc}', '\u{1f3fd}', '\u{1f3fe}', '\u{1f3ff}'];
const PERSON_BASES = new Set([0x1f466, 0x1f467, 0x1f468, 0x1f469, 0x1f9d1, 0x1f9d2, 0x1f474,
  0x1f475, 0x1f476, 0x1f9d3, 0x1f46e, 0x1f9d4]);

function withTone(e, tone) {
  const cps = Array.from(e);
  const out = [cps[0], tone];
  let i = 1;
  if (cps[1] === '\ufe0f') i = 2;
  for (; i < cps.length; i++) out.push(cps[i]);
  return out.join('');
}

// Tone after every person base (multi-person ZWJ sequences), mixed tones.
function withTones(e, rng) {
  const out = [];
  const cps = Array.from(e);
  for (let i = 0; i < cps.length; i++) {
    out.push(cps[i]);
    if (PERSON_BASES.has(cps[i].codePointAt(0))) {
      out.push(rng.pick(SKIN));
      if (cps[i + 1] === '\ufe0f') i++;
    }
  }
  return out.join('');
}

function genEmoji(rng, sink) {
  const data = readJson('unicode-emoji-json', 'data-by-emoji.json');
  const all = Object.keys(data);
  const variants = [];
  // 1. Every emoji with its name; skin-tone variants; unqualified and
  //    text-presentation forms.
  for (const e of all) {
    const d = data[e];
    sink.line(`${e} ${d.name}`);
    variants.push(e);
    if (d.skin_tone_support) {
      const toned = SKIN.map((t) => withTone(e, t));
      sink.line(toned.join(' '));
      sink.line(toned.join(''));
      variants.push(...toned);
      if (e.includes('\u200d')) {
        const multi = withTones(e, rng);
        sink.line(multi + ' ' + withTones(e, rng));
        variants.push(multi);
      }
    }
    if (e.includes('\ufe0f')) {
      const unq = e.split('\ufe0f').join('');
      sink.line(`${unq} ${unq}\ufe0e ${unq}\ufe0f\ufe0f`);
      variants.push(unq);
    } else if (Array.from(e).length === 1) {
      sink.line(`${e}\ufe0e ${e}\ufe0f`);
    }
  }
  sink.add('\n');
  const ctxL = ['', ' ', 'a', 'word', 'Ab', '1', '123', '.', ',', '!', '(', '"', ':', '中', '日本', 'ア',
    '한', 'é', 'я', 'ا', '\n', '\t', '  ', '#', '@', '\u200d', '\ufe0f', '\u0301', '*'];
  const ctxR = ['', ' ', 'a', 's', 'ing', '1', '2024', '.', '!', ')', '"', '?', '文', 'は', 'ン', '요',
    'é', 'ы', '\n', '\r\n', '  ', '\t', '\u200d', '\ufe0f', '\ufe0e', '\u20e3', '\u0301', '…', '—'];
  // 2. Keycaps next to digits, regional indicators, tag sequences.
  for (const d of '0123456789#*') {
    for (const q of ['\ufe0f\u20e3', '\u20e3', '\ufe0f', '\ufe0e\u20e3']) {
      const k = d + q;
      sink.line(`${k} 1${k}2 ${k}${k}${k} 12${k}345 a${k}b ${k}\n${k}`);
    }
  }
  const ri = chars(0x1f1e6, 0x1f1ff);
  for (let i = 0; i < 3000; i++) {
    let s = '';
    const n = rng.int(1, 9);
    for (let j = 0; j < n; j++) s += rng.pick(ri);
    sink.line(s + rng.pick(ctxR) + rng.pick(ri));
  }
  const tagText = ['gbeng', 'gbsct', 'gbwls', 'usca', 'ustx', 'abc', 'xyz', ''];
  for (const t of tagText) {
    const tags = Array.from(t).map((c) => C(0xe0000 + c.codePointAt(0))).join('');
    for (const base of ['\u{1f3f4}', '\u{1f3f3}\ufe0f', 'a', '', ' ']) {
      sink.line(`${base}${tags}\u{e007f} x${base}${tags}\u{e007f}y ${base}${tags}`);
    }
  }
  sink.add('\n');
  // 3. Emoji in context and in runs, until the budget is used.
  while (!sink.full()) {
    const kind = rng.below(4);
    let s = '';
    if (kind === 0) {
      for (let j = rng.int(2, 14); j > 0; j--) s += rng.pick(variants);
    } else if (kind === 1) {
      for (let j = rng.int(1, 6); j > 0; j--) s += rng.pick(ctxL) + rng.pick(variants) + rng.pick(ctxR);
    } else if (kind === 2) {
      const words = ['I', 'love', 'this', 'so', 'much', 'lol', 'ok', 'great job', 'see you', 'haha',
        'thanks', 'happy birthday', 'we won', 'ありがとう', '好的', '좋아요', 'спасибо', 'gracias'];
      for (let j = rng.int(2, 8); j > 0; j--) {
        s += rng.pick(words) + rng.pick([' ', '', '!', '!! ', '. ', ' ']);
        if (rng.chance(0.5)) s += rng.pick(variants).repeat(rng.int(1, 3)) + rng.pick(['', ' ', '\n']);
      }
    } else {
      const e = rng.pick(variants);
      s = `${e}${e} ${e} ${e}.${e}\u200d${e} ${e}\u200d ${e}${rng.pick(SKIN)}${rng.pick(SKIN)}`;
    }
    sink.line(s);
  }
}

// ---------------------------------------------------------------------------
// digits.txt
// ---------------------------------------------------------------------------

// Zero of each decimal-digit (Nd) block; each block is zero..zero+9. Recent
// ones may be unassigned in the regex engine's Unicode version, which is the
// point: the C++ tables must match the reference, not the newest Unicode.
const ND_ZEROS = [0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6,
  0xd66, 0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80,
  0x1a90, 0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50,
  0xabf0, 0xff10, 0x104a0, 0x10d30, 0x10d40, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0,
  0x11450, 0x114d0, 0x11650, 0x116c0, 0x116d0, 0x116da, 0x11730, 0x118e0, 0x11950, 0x11bf0,
  0x11c50, 0x11d50, 0x11da0, 0x11de0, 0x11f50, 0x16130, 0x16a60, 0x16ac0, 0x16b50, 0x16d70, 0x1ccf0,
  0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e4f0, 0x1e5f1, 0x1e950,
  0x1fbf0];
// Other numbers (No) and letter numbers (Nl), plus look-alikes that are not
// \p{N} (CJK numerals, mathematical letters, digit-like symbols).
const NO_NL = [
  ...range(0xb2, 0xb3), 0xb9, ...range(0xbc, 0xbe), ...range(0x9f4, 0x9f9), ...range(0xbf0, 0xbf2),
  ...range(0xf2a, 0xf33), ...range(0x1369, 0x137c), ...range(0x16ee, 0x16f0), ...range(0x17f0, 0x17f9),
  0x19da, 0x2070, ...range(0x2074, 0x2079), ...range(0x2080, 0x2089), ...range(0x2150, 0x2189),
  ...range(0x2460, 0x249b), ...range(0x24ea, 0x24ff), ...range(0x2776, 0x2793), 0x2cfd, 0x3007,
  ...range(0x3021, 0x3029), ...range(0x3038, 0x303a), ...range(0x3192, 0x3195),
  ...range(0x3220, 0x3229), ...range(0x3248, 0x324f), ...range(0x3251, 0x325f),
  ...range(0x3280, 0x3289), ...range(0x32b1, 0x32bf), ...range(0xa6e6, 0xa6ef), ...range(0xa830, 0xa835),
  ...range(0x10107, 0x10133), ...range(0x10140, 0x10178), ...range(0x10e60, 0x10e7e),
  ...range(0x12400, 0x12410), ...range(0x1d360, 0x1d378), ...range(0x1f100, 0x1f10c),
  ...range(0x1ec71, 0x1ec80),
];
const NOT_N = ['一', '二', '三', '十', '百', '千', '万', '億', '零', '壱', '𝐀', 'Ⓐ', '#', '٫',
  '٬', '·', '⁄', '∕', '′', '″', '°', 'º', 'ª', '№', '℃', '㎏', '㍻', '⒜'];

function genDigits(rng, sink) {
  const ndSets = ND_ZEROS.map((z) => chars(z, z + 9));
  const ascii = chars(0x30, 0x39);
  const digitRun = (set, n) => {
    let s = '';
    for (let i = 0; i < n; i++) s += rng.pick(set);
    return s;
  };
  const seps = [' ', '', '\n', 'a', 'x', 'abc', '.', ',', '-', '_', ':', '/', ' .', '。', '年', 'は',
    '\u00a0', '\u202f', '\u2009', '\t', '%', 'e', 'E', '+', 'é', 'я', '中', '😀', '\u0301', "'"];
  // Every run length 1..300 of ASCII digits, with several neighbours.
  for (let n = 1; n <= 300; n++) {
    sink.line(`${rng.pick(seps)}${digitRun(ascii, n)}${rng.pick(seps)}${digitRun(ascii, n)} x${digitRun(ascii, n)}y`);
  }
  // Two very long runs (chunking by three across thousands of digits).
  sink.line(digitRun(ascii, 5000));
  sink.line('a' + digitRun(ascii, 4001) + 'b');
  // Each Nd block: all ten digits, runs of 1..12, mixed with ASCII.
  for (const set of ndSets) {
    sink.line(set.join('') + ' ' + set.join(' ') + ' a' + set.join('a') + ' ' + set.join('.'));
    for (let n = 1; n <= 12; n++) {
      sink.line(`${digitRun(set, n)} ${digitRun(set, n)}${digitRun(ascii, n)} x${digitRun(set, n)}`);
    }
  }
  // No/Nl/look-alikes one by one in contexts.
  const others = NO_NL.map(C).concat(NOT_N.filter(Boolean));
  for (const c of others) {
    sink.line(`${c} 1${c} ${c}1 12${c}34 ${c}${c}${c}${c} a${c}b ${c}123 x${c}`);
  }
  // Formatted numbers.
  const fmt = [
    () => `${rng.int(0, 999)},${String(rng.int(0, 999)).padStart(3, '0')},${String(rng.int(0, 999)).padStart(3, '0')}`,
    () => `${rng.int(0, 99999)}.${rng.int(0, 99999)}`,
    () => `${rng.int(1, 999)} ${String(rng.int(0, 999)).padStart(3, '0')} ${String(rng.int(0, 999)).padStart(3, '0')}`,
    () => `${rng.int(1, 999)}\u00a0${String(rng.int(0, 999)).padStart(3, '0')},${rng.int(10, 99)}`,
    () => `${rng.int(1, 999)}\u202f${String(rng.int(0, 999)).padStart(3, '0')}`,
    () => `${rng.int(1, 999)}'${String(rng.int(0, 999)).padStart(3, '0')}'${String(rng.int(0, 999)).padStart(3, '0')}`,
    () => `${rng.int(1, 9)}_${String(rng.int(0, 999)).padStart(3, '0')}_${String(rng.int(0, 999)).padStart(3, '0')}`,
    () => `${rng.int(1, 999)}.${String(rng.int(0, 999)).padStart(3, '0')},${rng.int(10, 99)} €`,
    () => `$${rng.int(1, 99999)}.${String(rng.int(0, 99)).padStart(2, '0')}`,
    () => `€${rng.int(1, 999)},${rng.int(10, 99)} £${rng.int(1, 999)} ¥${rng.int(100, 99999)} ₹${rng.int(1, 9999)}`,
    () => `${rng.int(0, 100)}% ${rng.int(0, 100)}.${rng.int(0, 9)}%`,
    () => `${rng.int(1900, 2099)}-${String(rng.int(1, 12)).padStart(2, '0')}-${String(rng.int(1, 28)).padStart(2, '0')}T${String(rng.int(0, 23)).padStart(2, '0')}:${String(rng.int(0, 59)).padStart(2, '0')}:${String(rng.int(0, 59)).padStart(2, '0')}Z`,
    () => `${rng.int(0, 255)}.${rng.int(0, 255)}.${rng.int(0, 255)}.${rng.int(0, 255)}:${rng.int(1, 65535)}`,
    () => `+${rng.int(1, 99)} (${rng.int(100, 999)}) ${rng.int(100, 999)}-${rng.int(1000, 9999)}`,
    () => `0x${rng.u32().toString(16)} 0X${rng.u32().toString(16).toUpperCase()} 0b${rng.u32().toString(2)}`,
    () => `${rng.int(1, 9)}.${rng.int(0, 999)}e-${rng.int(1, 300)} ${rng.int(1, 9)}E+${rng.int(1, 30)}`,
    () => `v${rng.int(0, 20)}.${rng.int(0, 99)}.${rng.int(0, 999)}-rc.${rng.int(1, 9)}`,
    () => `${rng.int(1, 31)}st ${rng.int(1, 31)}nd ${rng.int(1, 31)}rd ${rng.int(1, 31)}th`,
    () => `${rng.int(1900, 2099)}年${rng.int(1, 12)}月${rng.int(1, 31)}日 第${rng.int(1, 999)}章`,
    () => `${rng.int(1, 999)}²  ${rng.int(1, 99)}³ 10⁻${rng.int(1, 9)} H₂O x${rng.int(1, 9)}½`,
    () => `${rng.int(1, 12)}:${String(rng.int(0, 59)).padStart(2, '0')} ${rng.pick(['AM', 'PM', 'am', 'p.m.'])}`,
    () => `${digitRun(ascii, rng.int(1, 40))}${rng.pick(seps)}${digitRun(rng.pick(ndSets), rng.int(1, 8))}${rng.pick(others)}${digitRun(ascii, rng.int(1, 7))}`,
    () => `x86_64 i386 utf8 sha256 ipv6 h264 mp3 3d 4k 2x 1080p a1b2c3 R2D2 C3PO ${rng.int(1, 9)}a${rng.int(1, 99)}b`,
    () => `${rng.int(1, 9)}\u0301${rng.int(1, 9)}\u20e3 ${rng.int(10, 99)}\u0308 ٣\u0651 ${rng.int(0, 9)}\ufe0f`,
  ];
  while (!sink.full()) {
    let s = '';
    for (let j = rng.int(1, 6); j > 0; j--) s += rng.pick(fmt)() + rng.pick([' ', ', ', '; ', '\n', ' | ', '']);
    sink.line(s);
  }
}

// ---------------------------------------------------------------------------
// whitespace.txt
// ---------------------------------------------------------------------------

const WS = [' ', '\t', '\n', '\r', '\r\n', '\u000b', '\u000c', '\u001c', '\u001d', '\u001e', '\u001f',
  '\u0085', '\u00a0', '\u1680', '\u180e', ...chars(0x2000, 0x200a), '\u200b', '\u2028', '\u2029',
  '\u202f', '\u205f', '\u3000', '\ufeff', '\u0000'];

function genWhitespace(rng, sink) {
  const T = ['a', 'word', 'Word', 'é', 'ß', 'мир', '中文', 'カナ', '한국', '1', '123', '.', ',', '!', '?',
    '...', '(', ')', '"', "'s", '-', '—', '…', '😀', '\u0301', '#', '$', '€', 'x.y', '_', '//', '{',
    '٣', 'ا'];
  // The whole file starts and ends with whitespace.
  sink.add('  \t\n \u00a0\u3000 ');
  // Each whitespace character repeated 1..n times before each neighbour.
  for (const w of WS) {
    for (const n of [1, 2, 3, 4, 7, 16]) {
      let s = '';
      for (const t of T) s += 'x' + w.repeat(n) + t;
      sink.line(s);
      s = '';
      for (const t of T) s += t + w.repeat(n) + (rng.chance(0.5) ? '\n' : 'x');
      sink.line(s);
    }
  }
  // Every ordered pair of whitespace characters, in three contexts.
  for (const a of WS) {
    let s = '';
    for (const b of WS) s += `x${a}${b}y.${a}${b}\n${a}${b}1 ${a}${b}`;
    sink.line(s);
  }
  // Runs of spaces of every length 1..80 before various neighbours.
  for (let n = 1; n <= 80; n++) {
    const sp = ' '.repeat(n);
    sink.line(`a${sp}b${sp}.${sp}1${sp}中${sp}\n${sp}(${sp}é${sp}😀${sp}\t${sp}`);
    sink.line(`\t${'\t'.repeat(n % 9)}x${sp}\r\n${sp}\r\n`);
  }
  // Trailing spaces before newlines, space before punctuation.
  const punct = ['.', ',', '!', '?', ':', ';', ')', '(', '"', "'", '...', '!!', '?!', '—', '…', '。', '，',
    '、', '»', '«', '}', ']', '->', '=>', '::', '%', '$', '#', '+', '*'];
  for (const p of punct) {
    sink.line(`word ${p} word  ${p}word\t${p} ${p}\n${p}  \n ${p}\r\n  ${p}\n\n${p} \u00a0${p}\u3000${p}`);
  }
  // Code-like indentation, markdown line breaks, CRLF/CR mixtures, then a
  // random soup of words and whitespace until the budget is used.
  const words = ['the', 'quick', 'brown', 'fox', 'if', 'return', 'x', 'foo()', '{', '}', '=', 'int',
    'élan', 'naïve', 'Straße', 'мир', 'γειά', 'שלום', 'سلام', 'नमस्ते', 'ไทย', '中文', '日本語', 'カタカナ',
    '한국어', '42', '3.14', '1,000', 'v2', '😀', '👍🏽', '...', ',', '.', '!', '"quoted"', "it's",
    '(paren)', '[x]', '#tag', '@user', 'https://example.com/a?b=c', 'a_b', 'CamelCase'];
  const wsw = [
    [40, ' '], [6, '  '], [3, '   '], [3, '    '], [8, '\n'], [4, '\n\n'], [3, '\r\n'], [2, '\r'],
    [3, '\t'], [1, '\t\t'], [2, ' \n'], [2, '  \n'], [1, ' \t\n'], [1, '\n '], [1, '\n    '],
    [1, '\n\t'], [1, '\r\n\r\n'], [1, '\n\r'], [1, '\r\r\n'], [1, ' \r\n'],
    ...WS.map((w) => [0.4, w]), ...WS.map((w) => [0.15, ' ' + w]), ...WS.map((w) => [0.15, w + ' ']),
    ...WS.map((w) => [0.1, w + '\n']),
  ];
  while (!sink.full()) {
    let s = '';
    for (let j = rng.int(5, 40); j > 0; j--) s += rng.pick(words) + rng.wpick(wsw);
    if (rng.chance(0.2)) s += ' '.repeat(rng.int(1, 12));
    sink.add(s + rng.wpick([[5, '\n'], [2, '\n\n'], [1, '\r\n'], [1, ' \n'], [1, '']]));
  }
  sink.add('   \n\n  ');
}

// ---------------------------------------------------------------------------
// combining.txt
// ---------------------------------------------------------------------------

// Characters whose canonical decompositions are frozen since Unicode 1.1-3.0
// (Latin-1, Latin Extended-A/B, Greek, Cyrillic, Latin Extended Additional,
// Greek Extended); only these go through String.prototype.normalize.
function oldDecomposable(cp) {
  return (cp >= 0xc0 && cp <= 0x24f) || (cp >= 0x370 && cp <= 0x3ff) || (cp >= 0x400 && cp <= 0x4ff) ||
    (cp >= 0x1e00 && cp <= 0x1fff);
}

// Hangul syllable -> conjoining jamo (algorithmic, Unicode 2.0+).
function hangulNfd(cp) {
  const s = cp - 0xac00;
  if (s < 0 || s >= 11172) return null;
  const l = 0x1100 + Math.floor(s / 588);
  const v = 0x1161 + Math.floor((s % 588) / 28);
  const t = s % 28;
  return C(l) + C(v) + (t ? C(0x11a7 + t) : '');
}

function nfd(text) {
  let out = '';
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (oldDecomposable(cp)) out += ch.normalize('NFD');
    else out += hangulNfd(cp) || ch;
  }
  return out;
}

const MARKS = [
  ...range(0x300, 0x36f), ...range(0x483, 0x489), ...range(0x591, 0x5bd), 0x5bf, 0x5c1, 0x5c2, 0x5c4,
  ...range(0x610, 0x61a), ...range(0x64b, 0x65f), 0x670, ...range(0x6d6, 0x6dc), ...range(0x900, 0x903),
  0x93a, 0x93b, 0x93c, ...range(0x93e, 0x94f), 0x951, 0x952, 0x981, 0x9bc, 0x9cd, 0xa3c, 0xa4d,
  0xb3c, 0xbcd, 0xc4d, 0xd4d, 0xdca, 0xe31, ...range(0xe34, 0xe3a), ...range(0xe47, 0xe4e),
  ...range(0xeb1, 0xebc), 0xf71, 0xf72, 0x102b, 0x1039, 0x17b4, 0x17c6, 0x17d2, ...range(0x1ab0, 0x1ace),
  ...range(0x1dc0, 0x1dff), ...range(0x20d0, 0x20f0), ...range(0x302a, 0x302f), 0x3099, 0x309a,
  ...range(0xfe20, 0xfe2f), 0x101fd, 0x10a0d, 0x11000, 0x11001, 0x11002, ...range(0x1d165, 0x1d169),
  ...range(0x1d16d, 0x1d172), ...range(0x1e8d0, 0x1e8d6), ...range(0xe0100, 0xe010f),
];
const FORMAT = [0xad, 0x600, 0x601, 0x61c, 0x6dd, 0x70f, 0x890, 0x8e2, 0x180e, 0x200b, 0x200c, 0x200d,
  0x200e, 0x200f, ...range(0x202a, 0x202e), ...range(0x2060, 0x2064), ...range(0x2066, 0x206f), 0xfeff,
  ...range(0xfff9, 0xfffb), 0x110bd, 0x110cd, ...range(0x13430, 0x1343f), ...range(0x1bca0, 0x1bca3),
  ...range(0x1d173, 0x1d17a), 0xe0001, 0xe0020, 0xe0041, 0xe007f];
const PRIVATE_AND_UNASSIGNED = [0xe000, 0xe001, 0xf8ff, 0xf0000, 0xffffd, 0x100000, 0x10fffd, 0x378,
  0x379, 0x380, 0x590, 0x5ff, 0x85f, 0xfdd0, 0xfdef, 0xfffe, 0xffff, 0x1fffe, 0x1ffff,
  0x2fffe, 0x10ffff, 0xe0080, 0x3fffd, 0x50000, 0x10fffe];

function genCombining(rng, sink) {
  const marks = MARKS.map(C);
  const vs = chars(0xfe00, 0xfe0f);
  const ctx = ['', ' ', '  ', '\n', '\t', 'a', 'Z', '1', '123', '.', '-', '"', '中', 'ア', '한', 'я', 'α',
    'ا', 'क', 'ก', '😀', '\u200d', '\u00a0', '\u3000', '\r\n', '\ufeff'];
  // 1. Isolated combining marks after every context (including file and
  //    line start), doubled, and followed by letters/punct/digits.
  sink.add(marks[0] + marks[5] + 'start of file with combining marks\n');
  for (const m of marks) {
    let s = '';
    for (const c of ctx) s += c + m + (rng.chance(0.5) ? 'b' : '') + rng.pick([' ', '.', '1', '', m]);
    sink.line(m + s);
  }
  // 2. Variation selectors after many bases; ideographic variation
  //    sequences; VS after digits and punctuation.
  const bases = ['a', 'A', '0', '9', '#', '*', '♥', '☺', '✌', '❤', '⚠', '↔', '中', '葛', '辻', '漢', 'あ',
    'ア', '😀', '👍', '\u2640', '\u2642', '©', '®', '™', '.', ' ', '\n'];
  for (const b of bases) {
    let s = '';
    for (const v of vs) s += b + v + ' ';
    for (let i = 0; i < 16; i++) s += b + C(0xe0100 + rng.below(240)) + ' ';
    sink.line(s + b + vs[15] + vs[14] + vs[0] + 'x');
  }
  // 3. Format (Cf), private-use (Co), unassigned/noncharacter (Cn) inside and
  //    around words.
  const oddities = FORMAT.concat(PRIVATE_AND_UNASSIGNED.filter(Boolean)).map(C);
  for (const f of oddities) {
    sink.line(`${f}word wo${f}rd word${f} ${f} ${f}${f} 1${f}2 .${f}, ${f}\u0301 中${f}文 a ${f}b ${f}\n${f}x`);
  }
  // 4. Zero-width joiners/non-joiners in real-looking words.
  const zwSamples = ['می‌خواهم', 'نمی‌دانم', 'क्‍ष', 'क्‌ष', 'ര്‍', 'ন্‍য', 'zwj\u200djoin', 'zwnj\u200cbreak',
    'a\u200d\u200db', '\u200dstart', 'end\u200d', '\u200c\u200c', 'ok\u2060no', 'soft\u00adhyphen'];
  for (let i = 0; i < 400; i++) sink.line(rng.shuffle(zwSamples).slice(0, 6).join(rng.pick([' ', '', ', '])));
  // 5. Real text in NFD (Latin/Greek/Cyrillic accents split off, Hangul as
  //    conjoining jamo) and real combining-heavy scripts as they are.
  for (const l of ['vi', 'fr', 'de', 'pl', 'cs', 'ro', 'hu', 'tr', 'is', 'pt', 'es', 'el', 'sk', 'lt', 'ko']) {
    let line = '';
    for (const e of cldr(l)) {
      line += nfd(e.tts) + rng.pick([', ', ' ', '; ']);
      if (rng.chance(0.1)) {
        sink.line(line);
        line = '';
      }
    }
    sink.line(line);
  }
  for (const l of ['hi', 'bn', 'ta', 'te', 'ml', 'kn', 'gu', 'pa', 'or', 'si', 'my', 'km', 'th', 'lo', 'ne',
    'mr', 'he', 'ar']) {
    let line = '';
    for (const e of cldr(l)) {
      line += e.tts + rng.pick([', ', ' ', ' । ', '; ']);
      if (rng.chance(0.1)) {
        sink.line(line);
        line = '';
      }
    }
    sink.line(line);
    if (sink.full()) break;
  }
  // 6. Zalgo-style stacks until the budget is used.
  const base = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!?中あア한яαاक😀';
  const baseChars = Array.from(base);
  while (!sink.full()) {
    let s = '';
    for (let j = rng.int(3, 30); j > 0; j--) {
      s += rng.pick(baseChars);
      for (let k = rng.wpick([[4, 0], [3, 1], [2, 3], [1, 12], [0.5, 40]]); k > 0; k--) s += rng.pick(marks);
    }
    sink.line(s);
  }
}

// ---------------------------------------------------------------------------
// added_tokens_adjacent.txt
// ---------------------------------------------------------------------------

function nearMisses(tok) {
  const out = new Set();
  const cps = Array.from(tok);
  out.add(cps.slice(0, -1).join(''));
  out.add(cps.slice(1).join(''));
  out.add(cps.slice(0, -2).join(''));
  out.add(tok.replace(/｜/g, '|'));
  out.add(tok.replace(/\|/g, '｜'));
  out.add(tok.replace(/▁/g, '_'));
  out.add(tok.replace(/▁/g, ' '));
  out.add(tok.replace(/▁/g, ''));
  out.add(tok.toLowerCase());
  out.add(tok.toUpperCase());
  out.add(tok.replace('<', '< '));
  out.add(tok.replace('>', ' >'));
  out.add('<' + tok + '>');
  out.add(tok.replace('<', '<<'));
  out.add(tok.slice(0, Math.floor(tok.length / 2)) + '\u200b' + tok.slice(Math.floor(tok.length / 2)));
  out.add(tok.replace(/｜/g, '｜｜'));
  out.add(tok.replace('<', '＜').replace('>', '＞'));
  out.delete(tok);
  return Array.from(out);
}

function genAddedTokens(rng, sink) {
  const toks = ADDED_TOKENS.map(([, t]) => t);
  const glue = ['', ' ', '  ', '\n', '\n\n', '\t', 'a', 'Hello', 'x.', '1', '123', '.', '!', '"', ':',
    '中文', 'ユーザー', '한', '😀', '\u0301', '\u200d', '\u00a0', '\r\n', '<', '>', '|', '｜', '▁'];
  // 1. Every token alone, and glued on both sides to things in `glue`
  //    (all of them for the named tokens, eight for each place holder).
  for (const t of toks) sink.line(t);
  for (const t of toks) {
    const gs = t.includes('place▁holder') ? rng.shuffle(glue).slice(0, 8) : glue;
    let s = '';
    for (const g of gs) s += g + t + rng.pick(glue);
    sink.line(s);
  }
  // 2. Tokens glued to each other (each with its successor, itself, and a
  //    random other), repeated, and embedded in words.
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i];
    const u = toks[(i + 1) % toks.length];
    const r = rng.pick(toks);
    sink.line(`${t}${u}${t}${t} ${r}${t}word${u}word ${t}${r}\n${t}`);
  }
  // 3. Near misses: truncations, ASCII/fullwidth bar swaps, case changes,
  //    "▁" spelled otherwise, extra characters inside (all of them for the
  //    named tokens, four for each place holder), alone and glued to the
  //    real token.
  for (const t of toks) {
    let misses = nearMisses(t);
    if (t.includes('place▁holder')) misses = rng.shuffle(misses).slice(0, 4);
    sink.line(misses.join(' ') + ' ' + misses.join('') + ' ' + misses.map((m) => m + t).join(''));
  }
  sink.line('<｜User <｜user｜> <｜USER｜> <|User|> <｜User|> <|User｜> <｜Assistant <｜assistant｜> ' +
    '<|eot|> <|EOT| |EOT|> <｜EOT｜> <|EOT|>> <<|EOT|> <｜place▁holder▁no▁800｜> <｜place▁holder▁no▁01｜> ' +
    '<｜place▁holder▁no▁-1｜> <｜place▁holder▁no▁１｜> <｜place▁holder▁no▁｜> <｜｜> <｜ <｜> ｜> ▁▁ <｜▁｜>');
  // 4. Chat-template-like text.
  const sys = ['You are a helpful assistant.', '你是一个乐于助人的助手。', 'Réponds en français.', ''];
  const users = ['Hi', 'What is 2+2?', '写一首诗', 'Explain BPE in one line.', 'こんにちは！', '  spaces  ',
    'line1\nline2', 'emoji 😀👍🏽', '<｜User｜> inside user text', ''];
  const answers = ['Hello!', '4', '床前明月光，疑是地上霜。', 'Merge frequent byte pairs.', 'こんにちは。',
    '```python\nprint("hi")\n```', '<think>\nok\n</think>\n\nSure.', ''];
  const calls = ['{"location": "Paris"}', '{"q": "中文", "n": 3}', '[]', '{"a": "<｜tool▁sep｜>"}'];
  for (let i = 0; i < 1000; i++) {
    let s = '<｜begin▁of▁sentence｜>' + rng.pick(sys);
    for (let turn = rng.int(1, 3); turn > 0; turn--) {
      s += '<｜User｜>' + rng.pick(users) + '<｜Assistant｜>';
      if (rng.chance(0.3)) {
        s += '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n' +
          rng.pick(calls) + '\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>' +
          '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + rng.pick(calls) + '<｜tool▁output▁end｜>' +
          '<｜tool▁outputs▁end｜>';
      }
      s += rng.pick(answers) + '<｜end▁of▁sentence｜>';
    }
    if (rng.chance(0.2)) {
      s += '<｜fim▁begin｜>def f(x):\n    ' + '<｜fim▁hole｜>' + '\n    return y<｜fim▁end｜>';
    }
    sink.line(s);
  }
  // 5. Random mixtures until the budget is used.
  while (!sink.full()) {
    let s = '';
    for (let j = rng.int(2, 12); j > 0; j--) {
      s += rng.chance(0.6) ? rng.pick(toks) : rng.pick(glue);
      if (rng.chance(0.15)) s += rng.pick(nearMisses(rng.pick(toks)));
    }
    sink.line(s);
  }
}

// ---------------------------------------------------------------------------
// unicode_sweep_*.txt: every Unicode scalar value in fixed contexts.
//
// Rich unit (planes 0-3 and 14):  "a  X.c X123 LX\n"   (+ " 中X" in the BMP)
// Light unit (planes 4-13, 15-16): "  X123X.c"  (newline every 16 units)
//
// "a  X" makes whitespace visible (ĠĠ vs Ġ Ġ) and lets letters/punctuation
// take the preceding space; "X.c" makes \p{P}/\p{S} visible (".c" is a token);
// "X123" makes \p{N} visible ("X12","3" vs "X","123"); "LX" puts X after a
// letter L that has BPE merges with X's UTF-8 lead byte (table below, taken
// from the DeepSeek V3 merge list) so letter/non-letter runs differ in ids.
// Planes 4-13 and 15-16 hold only unassigned and private-use code points and
// no merge crosses into their lead bytes (F1-F4), so the light unit keeps the
// probes that are visible there.
// ---------------------------------------------------------------------------

const LEAD_LETTER = {
  0xc2: 'n', 0xc3: 'r', 0xc4: 'i', 0xc5: 'o', 0xc6: 'h', 0xc9: 'd', 0xca: 'o', 0xcb: 'ə', 0xce: 'τ',
  0xcf: 'α', 0xd0: 'а', 0xd1: 'а', 0xd2: 'ы', 0xd3: 'г', 0xd5: 'ն', 0xd6: 'ո', 0xd7: 'ר', 0xd8: 'ل',
  0xd9: 'ل', 0xda: 'ی', 0xdb: 'ر', 0xe0: 'ร', 0xe1: 'h', 0xe2: '\ufe0f', 0xea: '하', 0xeb: '이',
  0xec: '들', 0xed: '이', 0xef: 'i', 0xf0: 't',
};

function genSweep(sink, lo, hi, rich, bmp) {
  const parts = [];
  let n = 0;
  for (let cp = lo; cp <= hi; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const x = C(cp);
    if (rich) {
      const l = LEAD_LETTER[leadByte(cp)] || 'a';
      parts.push(`a  ${x}.c ${x}123 ${l}${x}${bmp ? ' 中' + x : ''}\n`);
    } else {
      parts.push(`  ${x}123${x}.c`);
      if (++n % 16 === 0) parts.push('\n');
    }
    if (parts.length >= 4096) {
      sink.add(parts.join(''));
      parts.length = 0;
    }
  }
  if (!rich) parts.push('\n');
  sink.add(parts.join(''));
}

// ---------------------------------------------------------------------------
// File table
// ---------------------------------------------------------------------------

const MB = 1000 * 1000;

function sweepFiles() {
  const files = [];
  const plane = (p) => String(p).padStart(2, '0');
  for (const p of [0, 1, 2, 3]) {
    files.push({ name: `unicode_sweep_p${plane(p)}.txt`, budget: 0,
      gen: (rng, s) => genSweep(s, p * 0x10000, p * 0x10000 + 0xffff, true, p === 0) });
  }
  for (const p of [4, 6, 8, 10, 12]) {
    files.push({ name: `unicode_sweep_p${plane(p)}-${plane(p + 1)}.txt`, budget: 0,
      gen: (rng, s) => genSweep(s, p * 0x10000, (p + 2) * 0x10000 - 1, false, false) });
  }
  files.push({ name: 'unicode_sweep_p14.txt', budget: 0,
    gen: (rng, s) => genSweep(s, 0xe0000, 0xeffff, true, false) });
  files.push({ name: 'unicode_sweep_p15-16.txt', budget: 0,
    gen: (rng, s) => genSweep(s, 0xf0000, 0x10ffff, false, false) });
  return files;
}

const FILES = [
  { name: 'english_prose.txt', budget: 1.9 * MB, gen: genEnglishProse },
  { name: 'source_code.txt', budget: 1.9 * MB, gen: genSourceCode },
  { name: 'chinese.txt', budget: 0, gen: (r, s) => genCjk(r, s, ['zh-cn', 'zh-tw'], ['zh', 'zh-Hant', 'zh-Hant-HK', 'yue', 'yue-Hans'], '、', '。') },
  { name: 'japanese.txt', budget: 0, gen: (r, s) => genCjk(r, s, ['ja'], ['ja'], '、', '。') },
  { name: 'korean.txt', budget: 0, gen: (r, s) => genCjk(r, s, ['ko'], ['ko'], ', ', '. ') },
  { name: 'european.txt', budget: 1.6 * MB, gen: genEuropean },
  { name: 'mixed_scripts.txt', budget: 1.9 * MB, gen: genMixedScripts },
  { name: 'emoji.txt', budget: 1.2 * MB, gen: genEmoji },
  { name: 'digits.txt', budget: 1.0 * MB, gen: genDigits },
  { name: 'whitespace.txt', budget: 1.0 * MB, gen: genWhitespace },
  { name: 'combining.txt', budget: 1.5 * MB, gen: genCombining },
  { name: 'added_tokens_adjacent.txt', budget: 1.6 * MB, gen: genAddedTokens },
  ...sweepFiles(),
];

function isWellFormed(s) {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) return false;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      return false;
    }
  }
  return true;
}

function main() {
  const out = process.argv[2];
  if (!out) {
    process.stderr.write('usage: node make_corpus.js OUT_DIR\n');
    process.exit(2);
  }
  checkPinned();
  fs.mkdirSync(out, { recursive: true });
  let total = 0;
  for (const f of FILES) {
    const rng = new Rng(f.name);
    const sink = new Sink(f.name, f.budget || Infinity);
    f.gen(rng, sink);
    const text = sink.text();
    if (!isWellFormed(text)) throw new Error(`${f.name}: lone surrogate in generated text`);
    const buf = Buffer.from(text, 'utf8');
    const tmp = path.join(out, f.name + '.tmp');
    fs.writeFileSync(tmp, buf);
    fs.renameSync(tmp, path.join(out, f.name));
    total += buf.length;
    process.stdout.write(`  ${f.name.padEnd(28)} ${String(buf.length).padStart(9)} bytes\n`);
  }
  // Remove stale .txt files from earlier generator versions.
  const names = new Set(FILES.map((f) => f.name));
  for (const n of fs.readdirSync(out)) {
    if (n.endsWith('.txt') && !names.has(n)) fs.unlinkSync(path.join(out, n));
  }
  process.stdout.write(`  total ${total} bytes (${(total / MB).toFixed(2)} MB) in ${FILES.length} files\n`);
}

module.exports = { ADDED_TOKENS, FILES, PINNED };

if (require.main === module) main();
