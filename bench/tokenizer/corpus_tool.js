#!/usr/bin/env node
// Corpus helpers for scripts/bench (no dependencies).
//
//   node corpus_tool.js fallback OUTDIR BYTES_PER_FILE
//       Makes a stand-in corpus from text already on a Debian machine, for when the project's
//       corpus (.cache/corpus, made by scripts/corpus) is not there: english.txt (Debian
//       copyright files), code.txt (C/C++ headers from /usr/include) and cjk.txt (Chinese,
//       Japanese and Korean texts shipped by vim, gnupg, systemd and man-db, lines shuffled with
//       a fixed seed and repeated to size). Deterministic for a given machine; always valid
//       UTF-8 (invalid bytes become U+FFFD).
//
//   node corpus_tool.js cut OUTDIR MAX_BYTES FILE...
//       Copies each FILE into OUTDIR, cut to at most MAX_BYTES at a UTF-8 boundary (--quick).
//       Prints the new paths, one a line.
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

function utf8Floor(buf, n) {
  if (n >= buf.length) return buf.length;
  while (n > 0 && (buf[n] & 0xc0) === 0x80) n--;
  return n;
}

function* walk(dir, accept) {
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) yield* walk(p, accept);
    else if (e.isFile() && accept(p)) yield p;
  }
}

function readText(p) {
  let b = fs.readFileSync(p);
  if (p.endsWith('.gz')) b = zlib.gunzipSync(b);
  return b.toString('utf8');
}

// Concatenates files until `limit` bytes; returns a Buffer cut at a UTF-8 boundary.
function fill(files, limit) {
  const parts = [];
  let n = 0;
  for (const f of files) {
    if (n >= limit) break;
    let t;
    try {
      t = readText(f);
    } catch {
      continue;
    }
    const b = Buffer.from(t, 'utf8');
    parts.push(b);
    n += b.length;
  }
  const all = Buffer.concat(parts);
  return all.subarray(0, utf8Floor(all, limit));
}

function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function cjk(limit) {
  const sources = [
    ...['zh_cn.utf-8', 'zh.utf-8', 'ja.utf-8', 'ko.utf-8'].map((s) => `/usr/share/vim/vim90/tutor/tutor.${s}`),
    ...['zh_CN', 'zh_TW', 'ja'].map((s) => `/usr/share/gnupg/help.${s}.txt`),
    ...['zh_CN', 'zh_TW', 'ko', 'ja'].map((s) => `/usr/lib/systemd/catalog/systemd.${s}.catalog`),
    ...walk('/usr/share/man/zh_CN', (p) => p.endsWith('.gz')),
    ...walk('/usr/share/man/ja', (p) => p.endsWith('.gz')),
    ...walk('/usr/share/man/ko', (p) => p.endsWith('.gz')),
  ];
  const lines = [];
  for (const f of sources) {
    let t;
    try {
      t = readText(f);
    } catch {
      continue;
    }
    for (const l of t.split('\n')) if (/[\u3040-\u30ff\u4e00-\u9fa5\uac00-\ud7a3]/.test(l)) lines.push(l);
  }
  if (lines.length === 0) {
    // No CJK text installed: generated sentences from a small fixed phrase list.
    lines.push('分词器把文本切成词元，然后模型逐个处理它们。', '東京は日本の首都です。',
      '这是一个用于测试的中文句子，包含标点符号和数字123。', 'トークナイザーの速度を測定します。',
      '한국어 문장도 조금 포함합니다.');
  }
  const rnd = mulberry32(20240611);
  const parts = [];
  let n = 0;
  while (n < limit) {
    // A shuffled pass over all lines (Fisher-Yates with a fixed seed), then the next pass.
    const order = lines.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(rnd() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    for (const i of order) {
      const b = Buffer.from(lines[i] + '\n', 'utf8');
      parts.push(b);
      n += b.length;
      if (n >= limit) break;
    }
  }
  const all = Buffer.concat(parts);
  return all.subarray(0, utf8Floor(all, limit));
}

function fallback(outDir, perFile) {
  fs.mkdirSync(outDir, { recursive: true });
  const out = {
    'english.txt': fill(walk('/usr/share/doc', (p) => path.basename(p) === 'copyright'), perFile),
    'code.txt': fill(walk('/usr/include', (p) => /\.(h|hpp|hh|hxx)$/.test(p)), perFile),
    'cjk.txt': cjk(perFile),
  };
  for (const [name, buf] of Object.entries(out)) {
    fs.writeFileSync(path.join(outDir, name), buf);
    console.error(`[corpus] ${name}: ${(buf.length / 1e6).toFixed(2)} MB`);
  }
}

function cut(outDir, maxBytes, files) {
  fs.mkdirSync(outDir, { recursive: true });
  for (const f of files) {
    const b = fs.readFileSync(f);
    const dst = path.join(outDir, path.basename(f));
    const next = b.subarray(0, utf8Floor(b, maxBytes));
    fs.writeFileSync(dst, next);
    console.log(dst);
  }
}

const [cmd, ...rest] = process.argv.slice(2);
if (cmd === 'fallback' && rest.length === 2) {
  fallback(rest[0], Number(rest[1]));
} else if (cmd === 'cut' && rest.length >= 3) {
  cut(rest[0], Number(rest[1]), rest.slice(2));
} else {
  console.error('usage: corpus_tool.js fallback OUTDIR BYTES_PER_FILE | cut OUTDIR MAX_BYTES FILE...');
  process.exit(2);
}
