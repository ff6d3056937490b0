// End-to-end checks of a running `ladle serve` with the official SDKs.
//   node e2e.mjs <main base url> <small-queue base url> <api key> [load seconds] [load clients]
// The main server has a roomy queue; the second runs with --max-queue 1 for the overload
// checks. Every check prints one line; any failure exits 1. The load phase prints TTFT/ITL
// percentiles and throughput as measured by the client.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const [mainUrl, smallUrl, apiKey, loadSecondsArg, loadClientsArg] = process.argv.slice(2);
const loadSeconds = Number(loadSecondsArg ?? 10);
const loadClients = Number(loadClientsArg ?? 256);
const MODEL = 'ladle';

const openai = (base, key = apiKey) => new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
const anthropic = (base, key = apiKey) => new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const oa = openai(mainUrl);
const an = anthropic(mainUrl);
const user = [{ role: 'user', content: 'Write a short poem about ladles.' }];

let failures = 0;
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

async function metrics(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const get = (name) => {
    const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
    return m ? Number(m[1]) : NaN;
  };
  return { text, get };
}

async function waitFor(cond, ms = 10000) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await cond()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return cond();
}

// A gauge once it holds still: behind an entrypoint the engines' counts arrive with their load
// reports (every 100 ms), so a value read just after other requests ended can be stale. Two
// reads 300 ms apart that agree, within `ms`.
async function settled(url, name, ms = 10000) {
  const until = Date.now() + ms;
  let a = (await metrics(url)).get(name);
  while (Date.now() < until) {
    await new Promise((r) => setTimeout(r, 300));
    const b = (await metrics(url)).get(name);
    if (b === a) return b;
    a = b;
  }
  return a;
}

async function expectError(promise, status, check) {
  try {
    await promise;
  } catch (err) {
    assert.equal(err.status, status, `status ${err.status}: ${err.message}`);
    if (check) check(err);
    return err;
  }
  assert.fail(`expected HTTP ${status}`);
}

// ---- Chat Completions ----
await check('chat non-streaming hits max_tokens (length) with usage', async () => {
  const r = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.ok(r.usage.prompt_tokens > 5, `prompt_tokens ${r.usage.prompt_tokens}`);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
});

await check('chat streaming with include_usage', async () => {
  const stream = await oa.chat.completions.create({
    model: MODEL, messages: user, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(finish, 'length');
  assert.ok(chunks >= 2);
  assert.equal(usage?.completion_tokens, 8);
});

await check('chat greedy output is identical streaming and not', async () => {
  const a = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 12, temperature: 0 });
  const stream = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 12, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, a.choices[0].message.content ?? '');
});

// A stop string taken from the greedy output itself, so the model is sure to produce it.
async function greedyText(maxTokens) {
  const r = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: maxTokens, temperature: 0 });
  return r.choices[0].message.content ?? '';
}
await check('chat stop string: output cut before it, finish_reason stop', async () => {
  const full = await greedyText(24);
  const chars = [...full];
  assert.ok(chars.length >= 6, `greedy output too short for a stop test: ${JSON.stringify(full)}`);
  const start = Math.floor(chars.length / 2);
  const stop = chars.slice(start, start + 2).join('');
  const expected = full.slice(0, full.indexOf(stop));
  const r = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 24, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.content ?? '', expected);
  const stream = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 24, temperature: 0, stop: [stop], stream: true });
  let text = '', finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, expected);
  assert.equal(finish, 'stop');
});

// ---- Responses ----
await check('responses non-streaming: incomplete at max_output_tokens, usage', async () => {
  const r = await oa.responses.create({ model: MODEL, input: 'Write a short poem about ladles.', max_output_tokens: 8, temperature: 0 });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details?.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 8);
  assert.ok(r.usage.input_tokens > 5);
});

await check('responses streaming', async () => {
  const stream = await oa.responses.create({ model: MODEL, input: 'Write a short poem about ladles.', max_output_tokens: 8, temperature: 0, stream: true });
  const types = [];
  let final = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.response) final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.incomplete');
  assert.equal(final.usage.output_tokens, 8);
});

// ---- Messages ----
await check('messages non-streaming: max_tokens stop_reason, usage', async () => {
  const r = await an.messages.create({ model: MODEL, max_tokens: 8, messages: user, temperature: 0 });
  assert.equal(r.type, 'message');
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.usage.output_tokens, 8);
  assert.ok(r.usage.input_tokens > 5);
});

await check('messages streaming (finalMessage)', async () => {
  const stream = an.messages.stream({ model: MODEL, max_tokens: 8, messages: user, temperature: 0 });
  const msg = await stream.finalMessage();
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.usage.output_tokens, 8);
});

await check('messages stop_sequences: stop_sequence reported', async () => {
  const full = await greedyText(24);
  const chars = [...full];
  assert.ok(chars.length >= 6, `greedy output too short: ${JSON.stringify(full)}`);
  const start = Math.floor(chars.length / 2);
  const stop = chars.slice(start, start + 2).join('');
  const r = await an.messages.create({ model: MODEL, max_tokens: 24, messages: user, temperature: 0, stop_sequences: [stop] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, stop);
  const text = r.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.equal(text, full.slice(0, full.indexOf(stop)));
});

await check('usage: the same conversation has the same prompt size in every API', async () => {
  const text = 'Write a short poem about ladles.';
  const c = await oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 3, temperature: 0 });
  const r = await oa.responses.create({ model: MODEL, input: [{ role: 'user', content: text }], max_output_tokens: 3, temperature: 0 });
  const m = await an.messages.create({ model: MODEL, max_tokens: 3, messages: user, temperature: 0 });
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(m.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(c.usage.completion_tokens, 3);
});

await check('responses streaming: usage and text deltas agree with the final response', async () => {
  const stream = await oa.responses.create({ model: MODEL, input: 'Write a short poem about ladles.', max_output_tokens: 8, temperature: 0, stream: true });
  let text = '', final = null;
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.incomplete' || ev.type === 'response.completed') final = ev.response;
  }
  assert.ok(final, 'no final response event');
  assert.ok(final.usage.input_tokens > 5);
  assert.equal(final.usage.total_tokens, final.usage.input_tokens + final.usage.output_tokens);
  const out = final.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((p) => p.text ?? '').join('');
  assert.equal(text, out);
});

await check('messages streaming: max_tokens in message_delta, text equals the non-streaming answer', async () => {
  const full = await an.messages.create({ model: MODEL, max_tokens: 10, messages: user, temperature: 0 });
  const stream = an.messages.stream({ model: MODEL, max_tokens: 10, messages: user, temperature: 0 });
  let text = '', stop = null, inTokens = NaN;
  for await (const ev of stream) {
    if (ev.type === 'message_start') inTokens = ev.message.usage.input_tokens;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
  }
  assert.equal(stop, 'max_tokens');
  assert.equal(inTokens, full.usage.input_tokens);
  assert.equal(text, full.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
});

// ---- Errors ----
await check('401 in each protocol\'s shape', async () => {
  await expectError(openai(mainUrl, 'wrong-key').chat.completions.create({ model: MODEL, messages: user, max_tokens: 4 }), 401,
    (e) => assert.equal(e.code, 'invalid_api_key'));
  await expectError(openai(mainUrl, 'wrong-key').responses.create({ model: MODEL, input: 'hi', max_output_tokens: 4 }), 401);
  await expectError(anthropic(mainUrl, 'wrong-key').messages.create({ model: MODEL, max_tokens: 4, messages: user }), 401,
    (e) => assert.equal(e.error?.error?.type, 'authentication_error'));
});

await check('400 in each protocol\'s shape', async () => {
  await expectError(oa.chat.completions.create({ model: MODEL, messages: 'not a list', max_tokens: 4 }), 400,
    (e) => assert.equal(e.type, 'invalid_request_error'));
  await expectError(oa.responses.create({ model: MODEL, input: 'hi', max_output_tokens: -3 }), 400);
  await expectError(an.messages.create({ model: MODEL, messages: user }), 400,  // max_tokens is required
    (e) => assert.equal(e.error?.error?.type, 'invalid_request_error'));
});

await check('404 model_not_found', async () => {
  await expectError(oa.chat.completions.create({ model: 'gpt-4o', messages: user, max_tokens: 4 }), 404,
    (e) => assert.equal(e.code, 'model_not_found'));
  await expectError(an.messages.create({ model: 'claude-x', max_tokens: 4, messages: user }), 404,
    (e) => assert.equal(e.error?.error?.type, 'not_found_error'));
});

// ---- Issue 12: what real agents send (Claude Code, Codex, the AI SDK) ----
await check('models: OpenAI and Anthropic shapes, retrieve by id, 404 for others', async () => {
  const list = await oa.models.list();
  assert.ok(list.data.some((m) => m.id === MODEL && m.object === 'model'));
  assert.equal((await oa.models.retrieve(MODEL)).id, MODEL);
  await expectError(oa.models.retrieve('gpt-5'), 404);
  const alist = await an.models.list();
  assert.ok(alist.data.some((m) => m.id === MODEL && m.type === 'model' && typeof m.created_at === 'string'), JSON.stringify(alist.data));
  const one = await an.models.retrieve(MODEL);
  assert.equal(one.type, 'model');
  assert.equal(one.id, MODEL);
  await expectError(an.models.retrieve('claude-x'), 404, (e) => assert.equal(e.error?.error?.type, 'not_found_error'));
});

await check('messages count_tokens equals usage.input_tokens of the same request', async () => {
  const messages = [{ role: 'user', content: 'Count me, please.' }];
  const counted = await an.messages.countTokens({ model: MODEL, messages, system: 'be brief' });
  const r = await an.messages.create({ model: MODEL, max_tokens: 2, messages, system: 'be brief' });
  assert.equal(counted.input_tokens, r.usage.input_tokens);
});

await check('messages: system inside messages, adaptive thinking, cache_control, metadata and betas accepted', async () => {
  const r = await an.messages.create({
    model: MODEL, max_tokens: 4, thinking: { type: 'adaptive' }, metadata: { user_id: 'u1' },
    system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] },
      { role: 'assistant', content: 'hello' },
      { role: 'system', content: 'The conversation was compacted.' },
      { role: 'user', content: 'go on' },
    ],
  }, { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14,context-management-2025-06-27' } });
  assert.equal(r.type, 'message');
  assert.equal(r.usage.output_tokens, 4);
});

await check('declared hosted tools are dropped with a header, forcing one is a 400', async () => {
  const { data, response } = await an.messages.create({
    model: MODEL, max_tokens: 4, messages: user,
    tools: [{ type: 'web_search_20250305', name: 'web_search' }, { name: 'ls', description: 'list', input_schema: { type: 'object' } }],
  }).withResponse();
  assert.equal(data.type, 'message');
  assert.equal(response.headers.get('x-ladle-dropped-tools'), 'web_search');
  await expectError(an.messages.create({
    model: MODEL, max_tokens: 4, messages: user, tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    tool_choice: { type: 'tool', name: 'web_search' },
  }), 400);
});

await check('messages output_config.format (native structured output) is enforced', async () => {
  const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
  const r = await an.messages.create({ model: MODEL, max_tokens: 48, messages: user, output_config: { format: { type: 'json_schema', schema } } });
  const text = r.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const doc = JSON.parse(text);
  assert.ok(Number.isInteger(doc.n), text);
  assert.deepEqual(Object.keys(doc), ['n']);
});

await check('context overflow in each API\'s words (Claude Code and Codex compact on them)', async () => {
  const long = [{ role: 'user', content: 'ladle '.repeat(70000) }];
  await expectError(an.messages.create({ model: MODEL, max_tokens: 4, messages: long }), 400, (e) => {
    assert.match(e.error?.error?.message ?? '', /^prompt is too long: \d+ tokens > \d+ maximum$/);
    assert.equal(e.error?.error?.type, 'invalid_request_error');
  });
  // (The Anthropic SDK itself refuses non-streaming max_tokens above ~21,000, so the overflow
  // comes from a 50K-token prompt plus 20,000.)
  const half = [{ role: 'user', content: 'ladle '.repeat(25000) }];
  await expectError(an.messages.create({ model: MODEL, max_tokens: 20000, messages: half }), 400,
    (e) => assert.match(e.error?.error?.message ?? '', /^input length and `max_tokens` exceed context limit: \d+ \+ 20000 > \d+/));
  await expectError(oa.chat.completions.create({ model: MODEL, messages: user, max_tokens: 200000 }), 400,
    (e) => assert.equal(e.code, 'context_length_exceeded'));
  await expectError(oa.responses.create({ model: MODEL, input: 'ladle '.repeat(70000) }), 400,
    (e) => assert.equal(e.code, 'context_length_exceeded'));
});

await check('streaming: the response head arrives before the first token', async () => {
  const t0 = performance.now();
  const res = await fetch(`${mainUrl}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 2, messages: [{ role: 'user', content: 'ladle '.repeat(1500) }] }),
  });
  const tHead = performance.now() - t0;
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const first = await reader.read();
  const tFirst = performance.now() - t0;
  assert.ok(!first.done);
  while (!(await reader.read()).done) { /* drain */ }
  assert.ok(tHead <= tFirst, `head ${tHead.toFixed(0)} ms, first chunk ${tFirst.toFixed(0)} ms`);
  console.log(`     head after ${tHead.toFixed(0)} ms, first event after ${tFirst.toFixed(0)} ms (3,000-token prompt)`);
});

await check('full queue: 429 (OpenAI) / 529 (Anthropic) with Retry-After', async () => {
  const small = openai(smallUrl);
  const hold = new AbortController();
  const busy = await small.chat.completions.create(
    { model: MODEL, messages: user, max_tokens: 4000, stream: true }, { signal: hold.signal });
  const it = busy[Symbol.asyncIterator]();
  await it.next();  // the slot is taken while this stream runs
  await expectError(small.chat.completions.create({ model: MODEL, messages: user, max_tokens: 4 }), 429,
    (e) => { assert.equal(e.headers.get('retry-after'), '1'); assert.equal(e.code, 'rate_limit_exceeded'); });
  await expectError(small.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 4 }), 429,
    (e) => assert.equal(e.headers.get('retry-after'), '1'));
  await expectError(anthropic(smallUrl).messages.create({ model: MODEL, max_tokens: 4, messages: user }), 529,
    (e) => { assert.equal(e.headers.get('retry-after'), '1'); assert.equal(e.error?.error?.type, 'overloaded_error'); });
  hold.abort();
  await it.return?.().catch(() => {});
  assert.ok(await waitFor(async () => (await metrics(smallUrl)).get('ladle_requests_in_flight') === 0), 'slot not released');
});

// ---- Cancellation frees the KV ----
await check('client abort mid-stream cancels and frees KV blocks (/metrics)', async () => {
  const before = await settled(mainUrl, 'ladle_kv_blocks_used');
  const ctrl = new AbortController();
  const stream = await oa.chat.completions.create(
    { model: MODEL, messages: user, max_tokens: 4000, stream: true }, { signal: ctrl.signal });
  let n = 0, during = NaN;
  try {
    for await (const _ of stream) {
      if (++n === 3) {
        // Behind an entrypoint the engines' counts arrive with their load reports (every
        // poll interval): wait (bounded) for the stream's blocks to show.
        await waitFor(async () => (during = (await metrics(mainUrl)).get('ladle_kv_blocks_used')) > before, 5000);
        ctrl.abort();
      }
    }
  } catch (err) {
    assert.ok(err.name === 'APIUserAbortError' || err.name === 'AbortError', String(err));
  }
  assert.ok(during > before, `kv blocks during the stream ${during}, before ${before}`);
  assert.ok(await waitFor(async () => (await metrics(mainUrl)).get('ladle_kv_blocks_used') === before),
    'KV blocks were not freed after the abort');
  const m = await metrics(mainUrl);
  assert.match(m.text, /ladle_requests_total\{api="chat",status="499"\} [1-9]/);
});

await check('Anthropic client abort mid-stream also frees KV blocks', async () => {
  const before = await settled(mainUrl, 'ladle_kv_blocks_used');
  const stream = an.messages.stream({ model: MODEL, max_tokens: 4000, messages: user });
  let n = 0, during = NaN;
  try {
    for await (const ev of stream) {
      if (ev.type === 'content_block_delta' && ++n === 3) {
        await waitFor(async () => (during = (await metrics(mainUrl)).get('ladle_kv_blocks_used')) > before, 5000);
        stream.abort();
      }
    }
  } catch (err) {
    assert.ok(/abort/i.test(err.name + err.message), String(err));
  }
  assert.ok(during > before, `kv blocks during the stream ${during}, before ${before}`);
  assert.ok(await waitFor(async () => (await metrics(mainUrl)).get('ladle_kv_blocks_used') === before),
    'KV blocks were not freed after the abort');
  assert.match((await metrics(mainUrl)).text, /ladle_requests_total\{api="messages",status="499"\} [1-9]/);
});

// ---- Load ----
function pct(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}
// Every client streams back to back until the time is up, a third each through Chat,
// Responses and Messages. Short outputs: on 2 CPU cores the engine makes ~100 tokens/s, and
// every one of the clients must finish requests within the window. The server's RSS is
// sampled from /metrics; after the warm-up (every stream admitted once) it must stay flat.
const loadTokens = Number(process.env.LADLE_E2E_LOAD_TOKENS ?? 4);
await check(`load: ${loadClients} concurrent streaming clients for ${loadSeconds} s, zero errors, flat memory`, async () => {
  const until = Date.now() + loadSeconds * 1000;
  const ttft = [], itl = [], rss = [];
  let ok = 0, errors = 0, tokens = 0;
  const t0 = performance.now();
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const v = (await metrics(mainUrl)).get('process_resident_memory_bytes');
      rss.push([(performance.now() - t0) / 1000, v / 1048576]);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const client = async (i) => {
    while (Date.now() < until) {
      try {
        const start = performance.now();
        let last = null;
        const tick = () => {
          const now = performance.now();
          if (last === null) ttft.push(now - start); else itl.push(now - last);
          last = now;
        };
        if (i % 3 === 2) {
          const stream = an.messages.stream({ model: MODEL, max_tokens: loadTokens, messages: user });
          stream.on('text', tick);
          const msg = await stream.finalMessage();
          tokens += msg.usage.output_tokens;
        } else if (i % 3 === 1) {
          const stream = await oa.responses.create({ model: MODEL, input: 'Write a short poem about ladles.', max_output_tokens: loadTokens, stream: true });
          for await (const ev of stream) {
            if (ev.type === 'response.output_text.delta' && ev.delta) tick();
            if (ev.type === 'response.completed' || ev.type === 'response.incomplete') tokens += ev.response.usage.output_tokens;
          }
        } else {
          const stream = await oa.chat.completions.create({
            model: MODEL, messages: user, max_tokens: loadTokens, stream: true, stream_options: { include_usage: true } });
          for await (const chunk of stream) {
            if (chunk.usage) tokens += chunk.usage.completion_tokens;
            if (chunk.choices[0]?.delta?.content) tick();
          }
        }
        ok++;
      } catch (err) {
        errors++;
        console.log(`  load error (client ${i}): ${err}`);
      }
    }
  };
  await Promise.all(Array.from({ length: loadClients }, (_, i) => client(i)));
  const secs = (performance.now() - t0) / 1000;
  sampling = false;
  await sampler;
  rss.push([secs, (await metrics(mainUrl)).get('process_resident_memory_bytes') / 1048576]);
  // Least-squares trend of the samples after the first half (warm-up), times their span.
  const late = rss.filter(([t]) => t >= secs / 2);
  const mt = late.reduce((a, [t]) => a + t, 0) / late.length, mv = late.reduce((a, [, v]) => a + v, 0) / late.length;
  const slope = late.reduce((a, [t, v]) => a + (t - mt) * (v - mv), 0) / Math.max(1e-9, late.reduce((a, [t]) => a + (t - mt) ** 2, 0));
  const growth = slope * (late.at(-1)[0] - late[0][0]);
  const peak = Math.max(...rss.map(([, v]) => v));
  console.log(`  load: requests=${ok} errors=${errors} tokens=${tokens} tokens/s=${(tokens / secs).toFixed(1)} ` +
    `ttft_ms p50=${pct(ttft, 50).toFixed(1)} p99=${pct(ttft, 99).toFixed(1)} ` +
    `itl_ms p50=${pct(itl, 50).toFixed(1)} p99=${pct(itl, 99).toFixed(1)} ` +
    `rss_mb start=${rss[0][1].toFixed(1)} peak=${peak.toFixed(1)} end=${rss.at(-1)[1].toFixed(1)} ` +
    `trend_after_warmup=${growth.toFixed(1)} (${late.length} samples)`);
  assert.equal(errors, 0);
  assert.ok(ok >= loadClients, `only ${ok} requests finished`);
  assert.ok(late.length >= 3 && rss.every(([, v]) => v > 0), 'no RSS samples from /metrics');
  assert.ok(growth <= 64, `server RSS grew ${growth.toFixed(1)} MB after the warm-up`);
});

console.log(failures ? `${failures} check(s) failed` : 'all e2e checks passed');
process.exit(failures ? 1 : 0);
