#!/usr/bin/env node
// Reference token ids for the Ladle tokenizer parity corpus.
//
// Usage: node reference_ids.js TOKENIZER_JSON CORPUS_DIR OUT_JSON
//
// Encodes every corpus file (as one string, addSpecialTokens=false) with
// Hugging Face `tokenizers` (the pinned npm package) in two modes:
//   trusted: the tokenizer as loaded (added tokens are matched);
//   plain:   the same tokenizer.json with `added_tokens` emptied, i.e. only
//            the pre-tokenizer + BPE model.
// and writes a manifest with, per file, its size and sha256 and, per mode,
// the number of ids and the sha256 of the ids as consecutive uint32
// little-endian values.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { FILES, ADDED_TOKENS } = require('./make_corpus.js');

const TOKENIZERS_VERSION = '0.23.2';

function sha256(buf) {
  return crypto.createHash('sha256').update(buf).digest('hex');
}

function idsBytes(ids) {
  const buf = Buffer.alloc(ids.length * 4);
  for (let i = 0; i < ids.length; i++) buf.writeUInt32LE(ids[i], i * 4);
  return buf;
}

async function main() {
  const [tokPath, corpusDir, outPath] = process.argv.slice(2);
  if (!tokPath || !corpusDir || !outPath) {
    process.stderr.write('usage: node reference_ids.js TOKENIZER_JSON CORPUS_DIR OUT_JSON\n');
    process.exit(2);
  }
  const pj = JSON.parse(fs.readFileSync(path.join(__dirname, 'node_modules/tokenizers/package.json'), 'utf8'));
  if (pj.version !== TOKENIZERS_VERSION) {
    throw new Error(`tokenizers@${pj.version} installed, ${TOKENIZERS_VERSION} expected; run npm ci`);
  }
  const { Tokenizer } = require('tokenizers');

  const tokBytes = fs.readFileSync(tokPath);
  const tokJson = JSON.parse(tokBytes.toString('utf8'));

  // The generator's copy of the added tokens must match the tokenizer file.
  const fileAdded = tokJson.added_tokens.map((t) => [t.id, t.content]);
  const same = fileAdded.length === ADDED_TOKENS.length &&
    fileAdded.every(([id, c], i) => id === ADDED_TOKENS[i][0] && c === ADDED_TOKENS[i][1]);
  if (!same) throw new Error('added_tokens in the tokenizer differ from ADDED_TOKENS in make_corpus.js');
  const addedIds = new Set(fileAdded.map(([id]) => id));

  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ladle-ref-'));
  const plainPath = path.join(tmpDir, 'tokenizer.plain.json');
  const plainJson = Object.assign({}, tokJson, { added_tokens: [] });
  fs.writeFileSync(plainPath, JSON.stringify(plainJson));

  const trusted = await Tokenizer.fromFile(tokPath);
  const plain = await Tokenizer.fromFile(plainPath);
  fs.rmSync(tmpDir, { recursive: true, force: true });

  const manifest = {
    generator: 'tools/corpus/make_corpus.js',
    reference: `tokenizers@${TOKENIZERS_VERSION}`,
    tokenizer_sha256: sha256(tokBytes),
    files: [],
  };

  let plainAdded = 0;
  for (const f of FILES) {
    const p = path.join(corpusDir, f.name);
    const bytes = fs.readFileSync(p);
    const text = bytes.toString('utf8');
    if (!Buffer.from(text, 'utf8').equals(bytes)) throw new Error(`${f.name}: not valid UTF-8`);
    const entry = { name: f.name, bytes: bytes.length, sha256: sha256(bytes) };
    const times = [];
    for (const [mode, tok] of [['trusted', trusted], ['plain', plain]]) {
      const t0 = process.hrtime.bigint();
      const enc = await tok.encode(text, null, { addSpecialTokens: false });
      const ids = enc.getIds();
      times.push(Number(process.hrtime.bigint() - t0) / 1e9);
      let nAdded = 0;
      for (const id of ids) if (addedIds.has(id)) nAdded++;
      if (mode === 'plain') plainAdded += nAdded;
      entry[mode] = { count: ids.length, ids_sha256: sha256(idsBytes(ids)) };
      entry[mode + '_added_ids'] = nAdded;
    }
    process.stdout.write(`  ${f.name.padEnd(28)} ${String(bytes.length).padStart(9)} B  ` +
      `trusted ${String(entry.trusted.count).padStart(8)} ids (${entry.trusted_added_ids} added) ${times[0].toFixed(1)}s  ` +
      `plain ${String(entry.plain.count).padStart(8)} ids (${entry.plain_added_ids} added) ${times[1].toFixed(1)}s\n`);
    delete entry.trusted_added_ids;
    delete entry.plain_added_ids;
    manifest.files.push(entry);
  }
  if (plainAdded) process.stdout.write(`  WARNING: plain mode produced ${plainAdded} added-token ids\n`);
  else process.stdout.write('  plain mode produced no added-token ids\n');

  fs.mkdirSync(path.dirname(path.resolve(outPath)), { recursive: true });
  fs.writeFileSync(outPath, JSON.stringify(manifest, null, 2) + '\n');
  process.stdout.write(`  wrote ${outPath}\n`);
}

main().catch((e) => {
  process.stderr.write(`reference_ids: ${e.stack || e}\n`);
  process.exit(1);
});
