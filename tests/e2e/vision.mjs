// Image input end to end (issue 18) with the official SDKs (tests/e2e/package.json pins them).
//   node vision.mjs <A url> <B url> <C url>
// A: `ladle serve --model-version v4 --allow-private-image-urls` with small image limits (see
//    vision_run.sh); B: the same model without --allow-private-image-urls (the SSRF guard);
// C: `--model-version v3.2` (no image token). The script runs its own image server on
// 127.0.0.1 (node:http, any free port) that counts connections and requests per path. Every
// check prints one line; any failure exits 1.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import http from 'node:http';
import zlib from 'node:zlib';

const [urlA, urlB, urlC] = process.argv.slice(2);
const MODEL = 'ladle';
const client = (base) => ({
  oa: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 }),
  an: new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0, timeout: 60000 }),
});
const A = client(urlA), B = client(urlB), C = client(urlC);

let failures = 0;
// A promise the SDK rejected while a check was failing elsewhere is a failure, not a crash.
process.on('unhandledRejection', (err) => {
  failures++;
  console.log(`FAIL unhandled rejection: ${err?.stack ?? err}`);
});
async function check(name, fn) {
  const t0 = performance.now();
  try {
    await fn();
    console.log(`ok   ${name} (${(performance.now() - t0).toFixed(0)} ms)`);
  } catch (err) {
    failures++;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
  }
}

async function expectError(promise, status, check) {
  let result;
  try {
    result = await promise;
  } catch (err) {
    assert.equal(err.status, status, `status ${err.status}: ${err.message}`);
    if (check) check(err);
    return err;
  }
  assert.fail(`expected HTTP ${status}, got a result: ${JSON.stringify(result)?.slice(0, 300)}`);
}
// The error's own message, whichever API shape carried it.
const errMessage = (e) => e.error?.error?.message ?? e.error?.message ?? e.message ?? '';

// ---- Images ----
// PNG (RGB, 8 bits) written here with node:zlib; `flat` images compress to almost nothing.
const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function pngChunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}
const PNG_SIGNATURE = Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]);
function pngIhdr(w, h) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;  // bit depth
  ihdr[9] = 2;  // RGB
  return pngChunk('IHDR', ihdr);
}
function png(w, h, seed, { flat = false, poke = null } = {}) {
  const stride = w * 3 + 1;
  const raw = Buffer.alloc(stride * h);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const o = y * stride + 1 + x * 3;
      if (flat) {
        raw[o] = (seed * 40 + (x >> 6) * 16) & 255; raw[o + 1] = (seed * 90 + (y >> 6) * 16) & 255; raw[o + 2] = 128;
      } else {
        raw[o] = (x * 7 + seed * 31) & 255;
        raw[o + 1] = (y * 5 + seed * 17) & 255;
        raw[o + 2] = ((x ^ y) * 3 + seed * 53) & 255;
      }
    }
  }
  if (poke) raw[poke.y * stride + 1 + poke.x * 3] ^= 0xff;  // one pixel's red channel
  return Buffer.concat([PNG_SIGNATURE, pngIhdr(w, h), pngChunk('IDAT', zlib.deflateSync(raw)), pngChunk('IEND', Buffer.alloc(0))]);
}
// A decompression bomb: 60000×60000 declared (3.6 G pixels) in a valid IHDR (correct CRC), a
// tiny IDAT and IEND; a few dozen bytes.
const BOMB = Buffer.concat([PNG_SIGNATURE, pngIhdr(60000, 60000),
  pngChunk('IDAT', zlib.deflateSync(Buffer.alloc(64))), pngChunk('IEND', Buffer.alloc(0))]);
// 64×48 JPEG (libjpeg-turbo, quality 80), lossy WebP (libwebp) and GIF87a (giflib, 8 colours),
// made once with Debian's libraries (no converter CLI here) and kept as constants.
const JPEG = Buffer.from('/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODwwQFxQYGBcUFhYaHSUfGhsjHBYWICwgIyYnKSopGR8tMC0oMCUoKSj/2wBDAQcHBwoIChMKChMoGhYaKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCj/wAARCAAwAEADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwD5shtOnFXYrT2rSitParsNp04qJ4kzwuLM2G06cVcitPatOK09quw2nTiuOpiT6XC4stRWntV2K09q0orT2q7DadOK/YJ4k9PC4szYbTpxVyK09q04rT2q7DadOK454k+lwuLPKIrT2q7Fae1dfDadOKuxWntXx9Thb/p//wCS/wD2x/OeFzPyOPitOnFXYrT2rsIbTpxVyK09q458Lf8AT/8A8l/+2PpcLmfkZsVp7VcitPaqsVp7VditPauOpx1/05/8m/8AtT6TCz8y1FadOKuxWntVWK09quRWntXFU46/6c/+Tf8A2p9LhZ+ZhRWntV2K06cVpw2nTirkVp7V97PEn8xYXFmbFae1XYrT2rShtOnFXYrT2rjqYk+lwuLOPhtOnFXYrT2rTitParsNp04r8GniT7bC4szIrT2q7Fae1aUVp7VditPauOeJPpcLiz//2Q==', 'base64');
const WEBP = Buffer.from('UklGRvQAAABXRUJQVlA4IOgAAABQCACdASpAADAAPmkqkkWxML+ZXJTN+AaEtADCAPcFjhuve/xj/IDqpgQ4nwvI/l9NnyWWGu1010rjbKaI38ZAJ8LL5HKN/vU/9yAA/v/UM+tQbUIBchJ/zoxdfPaa/UZFxlPA7gypoHjyA723UYuKC2zsODZeXmT/QEMbsnUbOS/uY/SrM0kUsO2XOQwAOZHESy2+Ee1lbdsoRQf4L0t3kPXjLJmUb7IjoBobZZ0LPLEP/JyKyteQ2lSS3Mr1AKU1cqYt605uvvPouu46gvXb4oke+jkV7DXyPae01BwPtYm93+Al9AAA', 'base64');
const GIF = Buffer.from('R0lGODdhQAAwAPIAAAAAAP8AAAD/AP//AAAA//8A/wD//////ywAAAAAQAAwAAAD/wi6Gv5OyCmHvZborYv/niGO4mGeJsNAEEVhGMeBIEmiqLqwjzvBF9mG9rGNcCddgxfwVYADYYdYMJaQByWA2XRCo1Jq1YrNKrlOwVdKEFsNZS3aC2W7yVg5M70OU99lcz59QndGcWd7dEB2f3hIejx8dX5EgHmJkoswjZaPOJEsk4yVNJeQmaKbMaU1nzmpLatBrUWvSbE9sxm1IbcpSqOcvWOHmDqCLoQyhjaIyIqDlIWOxqjQmtKk1J7WoLkRu2Dcpr9m2Kraw+Su3rDosuqs7LbuuPC68rT0vvbA+A6Wzajm7JiKZC+mMSN4w+CKaMoUDuxW8NpBiAm3LaTY0Lbiw2wRNU4s5+/cRZAZ120kWfEbwC76ePEr1vLdyXQhVY5sV/PezXguOrHs6PJnvpzzVvIkavMjzpRJd9br+c9ouJjjlE5l6tMpUKj7tPajatLrUbAyxdLkWtXsVaRhpY5lW3YHxh8ShzA84tAuSrxAmtEN9RWwTr0c+Xr0+9RwVMRDFRd1CxNuWrlrJTdlXPiJSMhLNXflfNZxXNBbRbcl/RZtVsynJrOu7Fpo6CuLl/z1fFhDAgA7', 'base64');

const P64 = png(64, 64, 1);
const P64b = png(64, 64, 2);
const P256 = png(256, 256, 1);
const P64x48 = png(64, 48, 3);
const dataUrl = (buf, mime = 'image/png') => `data:${mime};base64,${buf.toString('base64')}`;
const MIB = 1 << 20;

// ---- The image server (127.0.0.1, any free port) ----
const served = new Map([
  ['/img/a.png', ['image/png', P64]],
  ['/img/b.png', ['image/png', P256]],
  ['/img/c.jpg', ['image/jpeg', JPEG]],
  ['/img/d.webp', ['image/webp', WEBP]],
  ['/img/e.gif', ['image/gif', GIF]],
  ['/img/bomb.png', ['image/png', BOMB]],
  ['/img/cache.png', ['image/png', png(256, 256, 22)]],
  ['/ssrf/a.png', ['image/png', P64]],
  ['/ssrf/b.png', ['image/png', P64]],
]);
const hits = new Map();
let connections = 0;
const sockets = new Set();
const held = new Set();  // /slow responses, never answered
const imageServer = http.createServer((req, res) => {
  const path = req.url.split('?')[0];
  hits.set(path, (hits.get(path) ?? 0) + 1);
  res.on('error', () => {});
  if (served.has(path)) {
    const [type, body] = served.get(path);
    res.writeHead(200, { 'content-type': type, 'content-length': body.length });
    res.end(body);
  } else if (path.startsWith('/redirect/')) {
    res.writeHead(302, { location: `/img/${path.slice('/redirect/'.length)}` });
    res.end();
  } else if (path === '/loop') {
    res.writeHead(302, { location: '/loop' });
    res.end();
  } else if (path === '/page.html') {
    const body = Buffer.from('<!doctype html><title>not an image</title>');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': body.length });
    res.end(body);
  } else if (path === '/huge.png') {  // 3 MiB, declared up front
    const body = Buffer.alloc(3 * MIB, 7);
    PNG_SIGNATURE.copy(body);
    res.writeHead(200, { 'content-type': 'image/png', 'content-length': body.length });
    res.end(body);
  } else if (path === '/huge-chunked.png') {  // 3 MiB, no length: the limit must hold while reading
    res.writeHead(200, { 'content-type': 'image/png' });
    let left = 48;
    const piece = Buffer.alloc(64 * 1024, 7);
    const pump = () => {
      while (left > 0 && !res.destroyed) {
        left--;
        if (!res.write(piece)) return res.once('drain', pump);
      }
      if (!res.destroyed) res.end();
    };
    pump();
  } else if (path === '/slow.png') {
    held.add(res);
    res.on('close', () => held.delete(res));
  } else {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found');
  }
});
imageServer.on('connection', (s) => {
  connections++;
  sockets.add(s);
  s.on('close', () => sockets.delete(s));
});
await new Promise((resolve) => imageServer.listen(0, '127.0.0.1', resolve));
const imgPort = imageServer.address().port;
const imgBase = `http://127.0.0.1:${imgPort}`;
console.log(`vision e2e: image server on ${imgBase}`);

// ---- Helpers ----
const imgPart = (url) => ({ type: 'image_url', image_url: { url } });
const textPart = (text) => ({ type: 'text', text });
const Q = 'Describe this picture.';
const userWith = (...images) => [{ role: 'user', content: [textPart(Q), ...images.map(imgPart)] }];

const badChat = (...images) => A.oa.chat.completions.create({ model: MODEL, max_tokens: 8, messages: userWith(...images) });
const namesPart = (re = /messages\[0\]\.content\[1\]/) => (e) => {
  assert.equal(e.error?.type ?? e.type, 'invalid_request_error');
  assert.match(errMessage(e), re);
};
async function chat(c, messages, extra = {}) {
  const r = await c.oa.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, ...extra });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.usage.completion_tokens, 8, JSON.stringify(r.usage));
  const text = r.choices[0].message.content ?? '';
  const logprobs = (r.choices[0].logprobs?.content ?? []).map((t) => t.logprob);
  assert.equal(logprobs.length, 8, 'one logprob per output token');
  return { text, logprobs, usage: r.usage };
}
async function chatStream(c, messages) {
  const stream = await c.oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null, chunks = 0;
  const logprobs = [];
  for await (const chunk of stream) {
    chunks++;
    for (const ch of chunk.choices) {
      text += ch.delta?.content ?? '';
      for (const t of ch.logprobs?.content ?? []) logprobs.push(t.logprob);
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(chunks >= 2, `${chunks} chunks`);
  assert.equal(finish, 'length');
  assert.equal(usage?.completion_tokens, 8);
  return { text, logprobs, usage };
}
const sameOutput = (a, b, what) => {
  assert.equal(a.text, b.text, `${what}: text`);
  assert.deepEqual(a.logprobs, b.logprobs, `${what}: logprobs`);
};
const closeOutput = (a, b, what) => {
  assert.equal(a.text, b.text, `${what}: text`);
  a.logprobs.forEach((x, i) => assert.ok(Math.abs(x - b.logprobs[i]) < 0.01, `${what}: logprobs ${a.logprobs} vs ${b.logprobs}`));
};
const differentOutput = (a, b, what) =>
  assert.notDeepEqual(a.logprobs, b.logprobs, `${what}: the same logprobs (${a.logprobs.join(',')}), so the image was not seen`);

// ---- Chat Completions ----
let base64Out = null;  // P64 as a data URL, for comparisons below
await check('chat: one PNG as a data URL (non-streaming), 64x64 -> 4 placeholders', async () => {
  const text = await chat(A, [{ role: 'user', content: Q }]);
  base64Out = await chat(A, userWith(dataUrl(P64)));
  assert.ok(base64Out.text.length > 0, 'empty output');
  // 4 placeholders and the '\n' joining the parts.
  assert.ok(base64Out.usage.prompt_tokens >= text.usage.prompt_tokens + 4,
    `prompt_tokens ${base64Out.usage.prompt_tokens} vs ${text.usage.prompt_tokens} without the image`);
  assert.ok(base64Out.usage.prompt_tokens <= text.usage.prompt_tokens + 6);
});

await check('chat: the same image, streaming: same text, logprobs and usage as non-streaming', async () => {
  const s = await chatStream(A, userWith(dataUrl(P64)));
  sameOutput(s, base64Out, 'streaming');
  assert.equal(s.usage.prompt_tokens, base64Out.usage.prompt_tokens);
});

await check('chat: placeholders per 2x2 patch group: 256x256 is exactly 60 prompt tokens more than 64x64', async () => {
  const big = await chat(A, userWith(dataUrl(P256)));
  assert.equal(big.usage.prompt_tokens - base64Out.usage.prompt_tokens, 60, `${big.usage.prompt_tokens} vs ${base64Out.usage.prompt_tokens}`);
  // 64x48 rounds to 2x2 groups of 32 px as well; 96x64 is 3x2 (2 more); 2000x1000 fits 1024x512 (32x16 = 512).
  const r4 = await chat(A, userWith(dataUrl(P64x48)));
  assert.equal(r4.usage.prompt_tokens, base64Out.usage.prompt_tokens, '64x48');
  const r6 = await chat(A, userWith(dataUrl(png(96, 64, 4))));
  assert.equal(r6.usage.prompt_tokens - base64Out.usage.prompt_tokens, 2, '96x64');
  const wide = await chat(A, userWith(dataUrl(png(2000, 1000, 5, { flat: true }))));
  assert.equal(wide.usage.prompt_tokens - base64Out.usage.prompt_tokens, 512 - 4, '2000x1000 resized to 1024x512');
});

await check('chat: the model sees the image: another image, or one pixel changed, changes the logprobs; the same image twice does not', async () => {
  const again = await chat(A, userWith(dataUrl(P64)));
  sameOutput(again, base64Out, 'same image');
  const other = await chat(A, userWith(dataUrl(P64b)));
  differentOutput(other, base64Out, 'another image');
  assert.equal(other.usage.prompt_tokens, base64Out.usage.prompt_tokens);
  const poked = await chat(A, userWith(dataUrl(png(64, 64, 1, { poke: { x: 20, y: 30 } }))));
  differentOutput(poked, base64Out, 'one pixel changed');
});

await check('chat: two images in one message (streaming and not)', async () => {
  const two = await chat(A, userWith(dataUrl(P64), dataUrl(P64b)));
  const twoStream = await chatStream(A, userWith(dataUrl(P64), dataUrl(P64b)));
  sameOutput(twoStream, two, 'streaming');
  assert.ok(two.usage.prompt_tokens >= base64Out.usage.prompt_tokens + 4, 'the second image adds placeholders');
  // The second image's size and content both count.
  const bigSecond = await chat(A, userWith(dataUrl(P64), dataUrl(P256)));
  assert.equal(bigSecond.usage.prompt_tokens - two.usage.prompt_tokens, 60);
  const otherSecond = await chat(A, userWith(dataUrl(P64), dataUrl(png(64, 64, 7))));
  differentOutput(otherSecond, two, 'second image changed');
  const swapped = await chat(A, userWith(dataUrl(P64b), dataUrl(P64)));
  differentOutput(swapped, two, 'images swapped');
});

const turns = (first, second) => [
  { role: 'user', content: [textPart('Here is the first picture.'), imgPart(first)] },
  { role: 'assistant', content: 'I see a pattern of stripes.' },
  { role: 'user', content: [imgPart(second), textPart('And how does this one differ?')] },
];
await check('chat: images in several turns (user image, assistant reply, user image), streaming and not', async () => {
  const r = await chat(A, turns(dataUrl(P64), dataUrl(P64b)));
  const s = await chatStream(A, turns(dataUrl(P64), dataUrl(P64b)));
  sameOutput(s, r, 'streaming');
  // The first turn's image is in the prompt: its size counts and its content changes the answer.
  const bigFirst = await chat(A, turns(dataUrl(P256), dataUrl(P64b)));
  assert.equal(bigFirst.usage.prompt_tokens - r.usage.prompt_tokens, 60);
  const otherFirst = await chat(A, turns(dataUrl(png(64, 64, 9)), dataUrl(P64b)));
  differentOutput(otherFirst, r, 'first-turn image changed');
  const otherSecond = await chat(A, turns(dataUrl(P64), dataUrl(png(64, 64, 9))));
  differentOutput(otherSecond, r, 'last-turn image changed');
});

await check('chat: an http URL image (--allow-private-image-urls) gives the same answer as its data URL; a 302 is followed', async () => {
  const before = hits.get('/img/a.png') ?? 0;
  const viaUrl = await chat(A, userWith(`${imgBase}/img/a.png`));
  sameOutput(viaUrl, base64Out, 'http URL vs data URL');
  assert.equal(viaUrl.usage.prompt_tokens, base64Out.usage.prompt_tokens);
  assert.ok((hits.get('/img/a.png') ?? 0) > before, 'the image server was asked');
  const viaStream = await chatStream(A, userWith(`${imgBase}/img/a.png`));
  sameOutput(viaStream, base64Out, 'http URL streaming');
  const redirected = await chat(A, userWith(`${imgBase}/redirect/a.png`));
  sameOutput(redirected, base64Out, 'after a 302');
  assert.ok((hits.get('/redirect/a.png') ?? 0) >= 1);
  const big = await chat(A, userWith(`${imgBase}/img/b.png`));
  assert.equal(big.usage.prompt_tokens - base64Out.usage.prompt_tokens, 60, '256x256 by URL');
});

await check('chat: JPEG, WebP and GIF (64x48) by http URL and as data URLs', async () => {
  const png48 = await chat(A, userWith(dataUrl(P64x48)));
  const outs = [];
  for (const [path, mime, bytes] of [['/img/c.jpg', 'image/jpeg', JPEG], ['/img/d.webp', 'image/webp', WEBP], ['/img/e.gif', 'image/gif', GIF]]) {
    const byUrl = await chat(A, userWith(`${imgBase}${path}`));
    const byData = await chat(A, userWith(dataUrl(bytes, mime)));
    sameOutput(byUrl, byData, `${mime} URL vs data URL`);
    assert.ok(byUrl.text.length > 0);
    assert.equal(byUrl.usage.prompt_tokens, png48.usage.prompt_tokens, `${mime}: 64x48 -> 4 placeholders`);
    differentOutput(byUrl, png48, `${mime} vs the PNG`);
    outs.push(byUrl);
  }
  differentOutput(outs[0], outs[1], 'JPEG vs WebP');
  differentOutput(outs[1], outs[2], 'WebP vs GIF');
});

await check('chat: 8 concurrent requests with different images each get their own image (same answers as one at a time)', async () => {
  const msgs = Array.from({ length: 8 }, (_, i) => userWith(dataUrl(png(64 + 32 * (i % 3), 64, 40 + i))));
  const alone = [];
  for (const m of msgs) alone.push(await chat(A, m));
  const together = await Promise.all(msgs.map((m, i) => (i % 2 ? chatStream(A, m) : chat(A, m))));
  together.forEach((r, i) => {
    assert.equal(r.usage.prompt_tokens, alone[i].usage.prompt_tokens, `request ${i}`);
    closeOutput(r, alone[i], `request ${i}`);
  });
  for (let i = 1; i < 8; i++) differentOutput(alone[i], alone[0], `image ${i} vs image 0`);
});

// Prefix caching by image content (KV blocks of 128 tokens). The prompt is
// [long text A][image][long text B]; the image's first placeholder sits at s, with
// s_min = P([A, image]) - P([image]) <= s <= P([A, image]) - k = s_max.
const WORDS = 'alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu'.split(' ');
const words = (n, s) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + s) % WORDS.length]).join(' ');
const TEXT_A = words(300, 1), TEXT_B = words(300, 2);
await check('chat: image-aware prefix cache: the same image again hits past it, a different image never shares its blocks', async () => {
  const img1 = dataUrl(png(256, 256, 21)), img2 = dataUrl(png(256, 256, 22)), k = 64;
  const onlyImage = await chat(A, [{ role: 'user', content: [imgPart(img1)] }]);
  const aImage = await chat(A, [{ role: 'user', content: [textPart(TEXT_A), imgPart(img1)] }]);
  const sMin = aImage.usage.prompt_tokens - onlyImage.usage.prompt_tokens, sMax = aImage.usage.prompt_tokens - k;
  assert.equal(Math.floor(sMin / 128), Math.floor(sMax / 128), `test design: the image's block is unknown (s in [${sMin}, ${sMax}])`);
  const imageBlockStart = Math.floor(sMax / 128) * 128;
  const full = (img) => [{ role: 'user', content: [textPart(TEXT_A), imgPart(img), textPart(TEXT_B)] }];
  const first = await chat(A, full(img1));
  assert.ok(first.usage.prompt_tokens > sMax + k + 256, `prompt ${first.usage.prompt_tokens} tokens`);
  const same = await chat(A, full(img1));
  const cachedSame = same.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cachedSame >= sMax + k, `same text and image: cached_tokens ${cachedSame}, the image ends by ${sMax + k}`);
  // A prefix hit computes the rest of the prompt in other chunks, so logprobs move in the 3rd
  // decimal (text-only prompts too); the text stays.
  closeOutput(same, first, 'a prefix hit gives the same answer');
  const other = await chat(A, full(img2));
  const cachedOther = other.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cachedOther <= imageBlockStart,
    `same text, different image: cached_tokens ${cachedOther}, but the image starts in the block at ${imageBlockStart}`);
  differentOutput(other, same, 'different image behind a shared text prefix');
  const otherAgain = await chat(A, full(img2));
  const cachedOtherAgain = otherAgain.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cachedOtherAgain >= sMax + k, `the second image repeated: cached_tokens ${cachedOtherAgain}`);
  closeOutput(otherAgain, other, 'second image, cached');
  // Keyed by content: the same bytes by http URL hit the blocks the data URL made.
  const byUrl = await chat(A, full(`${imgBase}/img/cache.png`));
  const cachedByUrl = byUrl.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cachedByUrl >= sMax + k, `the second image by URL: cached_tokens ${cachedByUrl}`);
  closeOutput(byUrl, other, 'second image by URL');
  const gap = Math.max(...other.logprobs.map((x, i) => Math.abs(x - same.logprobs[i])));
  assert.ok(gap > 0.01, `the two images' logprobs differ by at most ${gap}, within prefix-hit noise`);
  console.log(`     cached_tokens: same image ${cachedSame}, different image ${cachedOther} (image at ${sMin}..${sMax + k}), ` +
    `different image repeated ${cachedOtherAgain}, prompt ${same.usage.prompt_tokens}`);
});

// ---- Responses ----
const respInput = (url, text = Q) => [{ role: 'user', content: [{ type: 'input_text', text }, { type: 'input_image', image_url: url, detail: 'auto' }] }];
let respOut = null;
await check('responses: input_image as a data URL and as an http URL (non-streaming)', async () => {
  respOut = await A.oa.responses.create({ model: MODEL, input: respInput(dataUrl(P64)), max_output_tokens: 8, temperature: 0 });
  assert.ok(respOut.output_text.length > 0, 'empty output');
  assert.equal(respOut.usage.output_tokens, 8);
  const big = await A.oa.responses.create({ model: MODEL, input: respInput(dataUrl(P256)), max_output_tokens: 8, temperature: 0 });
  assert.equal(big.usage.input_tokens - respOut.usage.input_tokens, 60);
  const byUrl = await A.oa.responses.create({ model: MODEL, input: respInput(`${imgBase}/img/a.png`), max_output_tokens: 8, temperature: 0 });
  assert.equal(byUrl.output_text, respOut.output_text);
  assert.equal(byUrl.usage.input_tokens, respOut.usage.input_tokens);
  const other = await A.oa.responses.create({ model: MODEL, input: respInput(dataUrl(P256)), max_output_tokens: 8, temperature: 0 });
  assert.equal(other.output_text, big.output_text, 'the same image twice');
});

await check('responses: input_image streaming (data URL and http URL): same text and usage', async () => {
  for (const url of [dataUrl(P64), `${imgBase}/img/a.png`]) {
    const stream = await A.oa.responses.create({ model: MODEL, input: respInput(url), max_output_tokens: 8, temperature: 0, stream: true });
    let text = '', completed = null;
    for await (const ev of stream) {
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') completed = ev.response;
    }
    assert.ok(completed, 'no response.completed/incomplete event');
    assert.equal(text, respOut.output_text);
    assert.equal(completed.usage.input_tokens, respOut.usage.input_tokens);
  }
});

await check('responses: a corrupt input_image is a 400 naming input[0].content[1]', async () => {
  await expectError(A.oa.responses.create({ model: MODEL, input: respInput(dataUrl(P64.subarray(0, 60))), max_output_tokens: 8 }), 400,
    (e) => assert.match(errMessage(e), /input\[0\]\.content\[1\]/));
});

// ---- Anthropic Messages ----
const b64Block = (buf, media_type = 'image/png') => ({ type: 'image', source: { type: 'base64', media_type, data: buf.toString('base64') } });
const urlBlock = (url) => ({ type: 'image', source: { type: 'url', url } });
const anUser = (...blocks) => [{ role: 'user', content: [{ type: 'text', text: Q }, ...blocks] }];
const anText = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
let anOut = null;
await check('messages: image blocks with base64 and url sources (non-streaming)', async () => {
  anOut = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: anUser(b64Block(P64)) });
  assert.equal(anOut.stop_reason, 'max_tokens');
  assert.ok(anText(anOut).length > 0, 'empty output');
  const big = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: anUser(b64Block(P256)) });
  assert.equal(big.usage.input_tokens - anOut.usage.input_tokens, 60);
  const byUrl = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: anUser(urlBlock(`${imgBase}/img/a.png`)) });
  assert.equal(anText(byUrl), anText(anOut));
  assert.equal(byUrl.usage.input_tokens, anOut.usage.input_tokens);
  const jpeg = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: anUser(b64Block(JPEG, 'image/jpeg')) });
  assert.ok(anText(jpeg).length > 0);
});

await check('messages: streaming (messages.stream) with base64 and url sources: same text and usage', async () => {
  for (const block of [b64Block(P64), urlBlock(`${imgBase}/redirect/a.png`)]) {
    const stream = A.an.messages.stream({ model: MODEL, max_tokens: 8, temperature: 0, messages: anUser(block) });
    let deltas = '';
    stream.on('text', (t) => { deltas += t; });
    const msg = await stream.finalMessage();
    assert.equal(anText(msg), anText(anOut));
    assert.equal(deltas, anText(anOut));
    assert.equal(msg.usage.input_tokens, anOut.usage.input_tokens);
    assert.equal(msg.stop_reason, 'max_tokens');
  }
});

await check('messages: two images in one message, streaming (stream: true) and not; count_tokens counts the images', async () => {
  const messages = anUser(b64Block(P64), urlBlock(`${imgBase}/img/b.png`));
  const r = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages });
  assert.ok(anText(r).length > 0);
  assert.ok(r.usage.input_tokens >= anOut.usage.input_tokens + 64, `${r.usage.input_tokens} input tokens`);
  const stream = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages, stream: true });
  let text = '', input = null;
  for await (const ev of stream) {
    if (ev.type === 'message_start') input = ev.message.usage.input_tokens;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
  }
  assert.equal(text, anText(r));
  assert.equal(input, r.usage.input_tokens);
  const counted = await A.an.messages.countTokens({ model: MODEL, messages });
  assert.equal(counted.input_tokens, r.usage.input_tokens, 'count_tokens with images');
});

await check('messages: a repeated long prompt with an image reads the cache (cache_read_input_tokens)', async () => {
  const messages = [{ role: 'user', content: [{ type: 'text', text: words(400, 5) }, b64Block(png(128, 128, 31)), { type: 'text', text: words(200, 6) }] }];
  const first = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages });
  const second = await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages });
  assert.ok((second.usage.cache_read_input_tokens ?? 0) > 0, JSON.stringify(second.usage));
  assert.equal(anText(second), anText(first));
});

await check('messages: a corrupt image block is a 400 invalid_request_error naming messages[0].content[1]', async () => {
  await expectError(A.an.messages.create({ model: MODEL, max_tokens: 8, messages: anUser(b64Block(P64.subarray(0, 60))) }), 400, (e) => {
    assert.equal(e.error?.error?.type, 'invalid_request_error');
    assert.match(errMessage(e), /messages\[0\]\.content\[1\]/);
  });
  await expectError(A.an.messages.create({ model: MODEL, max_tokens: 8, messages: anUser(urlBlock(`${imgBase}/page.html`)) }), 400,
    (e) => assert.equal(e.error?.error?.type, 'invalid_request_error'));
  const stream = A.an.messages.stream({ model: MODEL, max_tokens: 8, messages: anUser(b64Block(BOMB)) });
  stream.on('error', () => {});
  await expectError(stream.finalMessage(), 400, (e) => assert.equal(e.error?.error?.type, 'invalid_request_error'));
});

await check('responses: previous_response_id carries the stored turn\'s image into the next prompt', async () => {
  const follow = async (img) => {
    const first = await A.oa.responses.create({ model: MODEL, input: respInput(img), max_output_tokens: 8, temperature: 0 });
    return A.oa.responses.create({ model: MODEL, previous_response_id: first.id, input: 'And what else?', max_output_tokens: 8, temperature: 0 });
  };
  const small = await follow(dataUrl(P64)), big = await follow(dataUrl(P256));
  assert.equal(big.usage.input_tokens - small.usage.input_tokens, 60, `${big.usage.input_tokens} vs ${small.usage.input_tokens}`);
  assert.ok(small.output_text.length > 0);
});

// Tool results carry images too (agents send screenshots that way): Anthropic tool_result
// content and Responses function_call_output output. They count, and a bad one is named by its
// own path in the request.
const anTool = (img) => [
  { role: 'user', content: 'Take a screenshot.' },
  { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'screenshot', input: {} }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'here it is' }, b64Block(img)] }] },
];
const anTools = [{ name: 'screenshot', description: 'takes a screenshot', input_schema: { type: 'object', properties: {} } }];
const respTool = (img) => [
  { role: 'user', content: 'Take a screenshot.' },
  { type: 'function_call', call_id: 'call_1', name: 'screenshot', arguments: '{}' },
  { type: 'function_call_output', call_id: 'call_1', output: [{ type: 'input_text', text: 'here it is' }, { type: 'input_image', image_url: dataUrl(img) }] },
];
await check('tool results with images: Anthropic tool_result and Responses function_call_output images are in the prompt', async () => {
  const an = async (img) => (await A.an.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, tools: anTools, messages: anTool(img) })).usage.input_tokens;
  assert.equal(await an(P256) - await an(P64), 60, 'tool_result image');
  const rs = async (img) => (await A.oa.responses.create({ model: MODEL, max_output_tokens: 8, temperature: 0, input: respTool(img) })).usage.input_tokens;
  assert.equal(await rs(P256) - await rs(P64), 60, 'function_call_output image');
});

// Each case must be a 400 invalid_request_error whose message matches; every mismatch is listed.
async function partNames(cases) {
  const wrong = [];
  for (const [label, call, re] of cases) {
    try {
      await call();
      wrong.push(`${label}: no error`);
    } catch (e) {
      const msg = errMessage(e), type = e.error?.error?.type ?? e.error?.type ?? e.type;
      if (e.status !== 400 || type !== 'invalid_request_error' || !re.test(msg)) {
        wrong.push(`${label}: expected 400 invalid_request_error matching ${re}, got ${e.status} ${type} '${msg}'`);
      }
    }
  }
  assert.equal(wrong.length, 0, `${wrong.length} of ${cases.length} cases wrong:\n    ${wrong.join('\n    ')}`);
}

const BAD = P64.subarray(0, 60);
await check('tool results with images: a bad one is a 400 naming messages[2].content[0].content[1] / input[2].output[1]', async () => {
  await partNames([
    ['Anthropic tool_result', () => A.an.messages.create({ model: MODEL, max_tokens: 8, tools: anTools, messages: anTool(BAD) }),
      /^messages\[2\]\.content\[0\]\.content\[1\]: /],
    ['Responses function_call_output', () => A.oa.responses.create({ model: MODEL, max_output_tokens: 8, input: respTool(BAD) }),
      /^input\[2\]\.output\[1\]: /],
  ]);
});

await check('errors name the part of the request as sent, also behind a system prompt / instructions and in later turns', async () => {
  const turns3 = (last) => [{ role: 'user', content: 'first' }, { role: 'assistant', content: 'ok' }, { role: 'user', content: [last] }];
  await partNames([
    // Chat: the system message is messages[0], so the user's image is messages[1].content[1].
    ['Chat behind a system message', () => A.oa.chat.completions.create({ model: MODEL, max_tokens: 8,
      messages: [{ role: 'system', content: 'Be brief.' }, ...userWith(dataUrl(BAD))] }), /^messages\[1\]\.content\[1\]: /],
    ['Chat, third message', () => A.oa.chat.completions.create({ model: MODEL, max_tokens: 8, messages: turns3(imgPart(dataUrl(BAD))) }),
      /^messages\[2\]\.content\[0\]: /],
    // Anthropic: `system` is not in `messages`, so the image is still messages[0].content[1].
    ['Anthropic with system', () => A.an.messages.create({ model: MODEL, max_tokens: 8, system: 'Be brief.', messages: anUser(b64Block(BAD)) }),
      /^messages\[0\]\.content\[1\]: /],
    ['Anthropic, third message', () => A.an.messages.create({ model: MODEL, max_tokens: 8, messages: turns3(b64Block(BAD)) }),
      /^messages\[2\]\.content\[0\]: /],
    // Responses: `instructions` is not in `input`, so the image is still input[0].content[1].
    ['Responses with instructions', () => A.oa.responses.create({ model: MODEL, max_output_tokens: 8, instructions: 'Be brief.', input: respInput(dataUrl(BAD)) }),
      /^input\[0\]\.content\[1\]: /],
    ['Responses, third item', () => A.oa.responses.create({ model: MODEL, max_output_tokens: 8,
      input: turns3({ type: 'input_image', image_url: dataUrl(BAD) }) }), /^input\[2\]\.content\[0\]: /],
  ]);
});

// ---- Errors (chat) ----
await check('errors: corrupt, truncated and non-image data are 400s naming the part', async () => {
  await expectError(badChat(dataUrl(P64.subarray(0, 60))), 400, namesPart());
  const flipped = Buffer.from(P64);
  for (let i = 60; i < flipped.length - 12; i += 7) flipped[i] ^= 0x5a;  // IDAT garbage, CRCs now wrong
  await expectError(badChat(dataUrl(flipped)), 400, namesPart());
  await expectError(badChat(dataUrl(Buffer.concat([JPEG.subarray(0, 20), Buffer.alloc(400, 0x33)]), 'image/jpeg')), 400, namesPart());
  await expectError(badChat(dataUrl(WEBP.subarray(0, 40), 'image/webp')), 400, namesPart());
  await expectError(badChat(dataUrl(GIF.subarray(0, 30), 'image/gif')), 400, namesPart());
  await expectError(badChat(dataUrl(Buffer.from('plain text, not an image at all'))), 400, namesPart());
  await expectError(badChat('data:image/png;base64,@@@not base64@@@'), 400, namesPart());
  // The second image of two is the bad one: content[2].
  await expectError(badChat(dataUrl(P64), dataUrl(P64.subarray(0, 60))), 400, namesPart(/messages\[0\]\.content\[2\]/));
  // Streaming: refused before the stream starts, as an error the SDK throws.
  await expectError(A.oa.chat.completions.create({ model: MODEL, max_tokens: 8, stream: true, messages: userWith(dataUrl(P64.subarray(0, 60))) }), 400, namesPart());
});

await check('errors: URL fetches: text/html, 404, too big (declared and chunked), redirect loop, https to a plain-HTTP server, timeout are 400s', async () => {
  await expectError(badChat(`${imgBase}/page.html`), 400, namesPart());
  await expectError(badChat(`${imgBase}/missing.png`), 400, namesPart());
  await expectError(badChat(`${imgBase}/huge.png`), 400, namesPart());
  await expectError(badChat(`${imgBase}/huge-chunked.png`), 400, namesPart());
  await expectError(badChat(`${imgBase}/loop`), 400, namesPart());
  // https to a server that speaks plain HTTP: the TLS handshake fails (no fallback to http).
  await expectError(badChat(`https://127.0.0.1:${imgPort}/img/a.png`), 400, namesPart(/TLS handshake/));
  const t0 = performance.now();
  await expectError(badChat(`${imgBase}/slow.png`), 400, namesPart());
  const ms = performance.now() - t0;
  assert.ok(ms >= 1500 && ms < 10000, `the 2 s fetch timeout answered after ${ms.toFixed(0)} ms`);
});

await check('errors: limits: more than --max-images-per-request 4, --image-max-bytes, --max-image-patches', async () => {
  const five = [P64, P64b, P64, P64b, P64].map((b) => dataUrl(b));
  await expectError(badChat(...five), 400, namesPart(/messages\[0\]\.content\[\d\].*4/));
  await chat(A, userWith(...five.slice(0, 4)));  // four is fine
  await expectError(badChat(dataUrl(Buffer.concat([P64, Buffer.alloc(MIB + 1024)]))), 400, namesPart());
  // Two 1024x1024 images are 2 x 4096 patches; the limit is 4096.
  const mega = dataUrl(png(1024, 1024, 3, { flat: true }));
  await expectError(badChat(mega, mega), 400, namesPart(/messages\[0\]\.content\[\d\]/));
});

await check('errors: a decompression bomb (60000x60000 declared) is a quick 400, as data URL and by URL', async () => {
  for (const url of [dataUrl(BOMB), `${imgBase}/img/bomb.png`]) {
    const t0 = performance.now();
    await expectError(badChat(url), 400, namesPart());
    const ms = performance.now() - t0;
    assert.ok(ms < 5000, `took ${ms.toFixed(0)} ms`);
  }
});

await check('errors lose nothing: a stream running beside a burst of bad requests finishes, and the same image gives the same answer', async () => {
  const good = chatStream(A, userWith(dataUrl(P64)));
  const bad = [];
  for (let i = 0; i < 6; i++) {
    bad.push(expectError(badChat(dataUrl(i % 2 ? BOMB : P64.subarray(0, 50 + i))), 400));
    bad.push(expectError(badChat(`${imgBase}/page.html`), 400));
  }
  const [g] = await Promise.all([good, ...bad]);
  sameOutput(g, base64Out, 'stream beside the errors');
  sameOutput(await chat(A, userWith(`${imgBase}/img/a.png`)), base64Out, 'after the errors');
  const health = await fetch(`${urlA}/health`);
  assert.equal(health.status, 200);
});

// ---- Server B: no --allow-private-image-urls ----
await check('SSRF guard (server B): loopback URLs are 400s naming --allow-private-image-urls, and nothing connects', async () => {
  const conns = connections;
  const ssrfHits = () => (hits.get('/ssrf/a.png') ?? 0) + (hits.get('/ssrf/b.png') ?? 0);
  for (const url of [`http://127.0.0.1:${imgPort}/ssrf/a.png`, `http://localhost:${imgPort}/ssrf/b.png`]) {
    await expectError(B.oa.chat.completions.create({ model: MODEL, max_tokens: 8, messages: userWith(url) }), 400,
      namesPart(/--allow-private-image-urls/));
    await expectError(B.an.messages.create({ model: MODEL, max_tokens: 8, messages: anUser(urlBlock(url)) }), 400, (e) => {
      assert.equal(e.error?.error?.type, 'invalid_request_error');
      assert.match(errMessage(e), /--allow-private-image-urls/);
    });
    await expectError(B.oa.responses.create({ model: MODEL, max_output_tokens: 8, input: respInput(url) }), 400,
      (e) => assert.match(errMessage(e), /--allow-private-image-urls/));
  }
  // Other spellings of loopback: refused too (any 400), and still nothing connects.
  for (const host of ['127.1', '2130706433', '0x7f000001', '[::1]', '[::ffff:127.0.0.1]', '0.0.0.0', 'LOCALHOST']) {
    await expectError(B.oa.chat.completions.create({ model: MODEL, max_tokens: 8, messages: userWith(`http://${host}:${imgPort}/ssrf/a.png`) }), 400,
      (e) => assert.match(errMessage(e), /messages\[0\]\.content\[1\]/, host));
  }
  assert.equal(ssrfHits(), 0, 'the image server got a request from server B');
  assert.equal(connections, conns, `server B connected to the image server ${connections - conns} time(s)`);
  // Data URLs need no fetch: fine on B, and the same model answers as on A.
  sameOutput(await chat(B, userWith(dataUrl(P64))), base64Out, 'server B, data URL');
});

// ---- Server C: a version without an image token ----
await check('model version v3.2 (server C): images are a 400 saying the version takes no image input; text still works', async () => {
  await expectError(C.oa.chat.completions.create({ model: MODEL, max_tokens: 8, messages: userWith(dataUrl(P64)) }), 400,
    namesPart(/^messages\[0\].*v3\.2 takes no image input/));
  await expectError(C.an.messages.create({ model: MODEL, max_tokens: 8, messages: anUser(b64Block(P64)) }), 400, (e) => {
    assert.equal(e.error?.error?.type, 'invalid_request_error');
    assert.match(errMessage(e), /takes no image input/);
  });
  const r = await C.oa.chat.completions.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: [{ role: 'user', content: Q }] });
  assert.equal(r.usage.completion_tokens, 8);
});

await check('model version v3.2 (server C): the refusal names the request\'s own item (input[0] in Responses; messages[0] behind an Anthropic system)', async () => {
  await partNames([
    ['Chat behind a system message', () => C.oa.chat.completions.create({ model: MODEL, max_tokens: 8,
      messages: [{ role: 'system', content: 'Be brief.' }, ...userWith(dataUrl(P64))] }), /^messages\[1\].*takes no image input/],
    ['Responses', () => C.oa.responses.create({ model: MODEL, max_output_tokens: 8, input: respInput(dataUrl(P64)) }),
      /^input\[0\].*takes no image input/],
    ['Responses with instructions', () => C.oa.responses.create({ model: MODEL, max_output_tokens: 8, instructions: 'Be brief.', input: respInput(dataUrl(P64)) }),
      /^input\[0\].*takes no image input/],
    ['Anthropic with system', () => C.an.messages.create({ model: MODEL, max_tokens: 8, system: 'Be brief.', messages: anUser(b64Block(P64)) }),
      /^messages\[0\].*takes no image input/],
  ]);
});

for (const res of held) res.destroy();
for (const s of sockets) s.destroy();
await new Promise((resolve) => imageServer.close(resolve));
console.log(failures === 0 ? 'vision e2e: all checks passed' : `vision e2e: ${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
