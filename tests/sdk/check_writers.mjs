// Feeds the response writers' samples (gen_writer_samples) to the official SDKs exactly as a
// user's code meets them: a local HTTP server serves the bytes, SDK clients point their
// baseURL at it and call the real methods (chat.completions.stream/create,
// responses.stream/create, messages.stream/create). The SDKs' own stream readers and
// accumulators rebuild each message; this script checks the result against expectations
// written here, independently of the C++ writers.
//
//   node check_writers.mjs <samples dir>
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node check_writers.mjs <samples dir>');
  process.exit(2);
}
const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'));

// What each scenario must rebuild to. `tools[].id` null means "writer-generated, any
// non-empty id"; `argsText` is the exact arguments text, `input` what Anthropic parses it to.
const EXPECT = {
  reasoning_text: {
    reasoning: 'The user greets me. I should answer politely.',
    text: 'Hello, wörld! "quoted"\n\\ 😀 done.',
    tools: [],
    chat_finish: 'stop', responses_status: 'completed', stop_reason: 'end_turn',
    usage: { prompt: 42, completion: 17, cached: 32, reasoning: 6 },
  },
  text_tools: {
    reasoning: '',
    text: 'Let me check both.',
    tools: [
      { id: 'call_weather_1', name: 'get_weather', argsText: '{"city": "Paris", "unit": "celsius"}',
        input: { city: 'Paris', unit: 'celsius' } },
      { id: null, name: 'get_time', argsText: '{"tz": "Europe/Paris"}', input: { tz: 'Europe/Paris' } },
    ],
    chat_finish: 'tool_calls', responses_status: 'completed', stop_reason: 'tool_use',
    usage: { prompt: 100, completion: 40, cached: 0, reasoning: 0 },
  },
  reasoning_tool: {
    reasoning: 'Need the weather.',
    text: '',
    tools: [{ id: 'call_oslo', name: 'get_weather', argsText: '{"city":"Oslo"}', input: { city: 'Oslo' } }],
    chat_finish: 'tool_calls', responses_status: 'completed', stop_reason: 'tool_use',
    usage: { prompt: 30, completion: 12, cached: 0, reasoning: 4 },
  },
  max_tokens: {
    reasoning: 'Thinking hard',
    text: 'The answer is',
    tools: [],
    chat_finish: 'length', responses_status: 'incomplete', stop_reason: 'max_tokens',
    usage: { prompt: 10, completion: 8, cached: 0, reasoning: 3 },
  },
  tool_truncated: {
    reasoning: '',
    text: '',
    // Cut by max tokens. Anthropic's stream reader partial-parses the fragments and drops the
    // cut string; the body cannot carry invalid JSON in `input` and sends {}.
    tools: [{ id: 'call_cut', name: 'get_weather', argsText: '{"city": "Ber', input: {} }],
    chat_finish: 'length', responses_status: 'incomplete', stop_reason: 'max_tokens',
    usage: { prompt: 10, completion: 8, cached: 0, reasoning: 0 },
  },
  malformed: {
    reasoning: '',
    text: 'Calling <｜DSML｜invoke name="x"> broken',
    tools: [],
    chat_finish: 'stop', responses_status: 'completed', stop_reason: 'end_turn',
    usage: { prompt: 5, completion: 9, cached: 0, reasoning: 0 },
  },
  broken_call: {
    // The parser closed a call whose arguments broke and finished with stop: the call is
    // reported as it streamed, but nothing asks the client to run it.
    reasoning: '',
    text: '',
    tools: [{ id: 'call_broken', name: 'get_weather', argsText: '{"city":', input: {} }],
    chat_finish: 'stop', responses_status: 'completed', stop_reason: 'end_turn',
    usage: { prompt: 6, completion: 4, cached: 0, reasoning: 0 },
  },
  stop_sequence: {
    reasoning: '',
    text: 'one two',
    tools: [],
    chat_finish: 'stop', responses_status: 'completed', stop_reason: 'stop_sequence', stop_sequence: 'three',
    usage: { prompt: 5, completion: 3, cached: 0, reasoning: 0 },
  },
  error: { failure: 'engine crashed', partial_text: 'partial' },
};

// ---------------------------------------------------------------------------------------------
// The server: /<scenario>/... → the sample for that scenario, API (from the path) and stream
// flag (from the request body), sent in small uneven pieces so the SDKs' SSE decoders see
// frames, lines and UTF-8 sequences split across reads.

function entryFor(scenario, api, stream) {
  return manifest.find((m) => m.scenario === scenario && m.api === api && m.stream === stream);
}

const server = http.createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (d) => (body += d));
  req.on('end', async () => {
    const [, scenario, ...rest] = req.url.split('?')[0].split('/');
    const tail = '/' + rest.join('/');
    const api = tail.endsWith('/chat/completions') ? 'chat'
      : tail.endsWith('/responses') ? 'responses'
      : tail.endsWith('/messages') ? 'messages' : null;
    let stream = false;
    try { stream = JSON.parse(body || '{}').stream === true; } catch { /* not JSON */ }
    const entry = api && entryFor(scenario, api, stream);
    if (!entry) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `no sample for ${req.url} stream=${stream}` } }));
      return;
    }
    const bytes = fs.readFileSync(path.join(dir, entry.file));
    res.writeHead(entry.status, { 'content-type': entry.content_type });
    if (!stream) {
      res.end(bytes);
      return;
    }
    let seed = bytes.length;
    for (let i = 0; i < bytes.length;) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      const n = 1 + (seed % 97);
      res.write(bytes.subarray(i, i + n));
      i += n;
      await new Promise((r) => setImmediate(r));
    }
    res.end();
  });
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const port = server.address().port;

const openaiFor = (scenario) =>
  new OpenAI({ apiKey: 'test-key', baseURL: `http://127.0.0.1:${port}/${scenario}/v1`, maxRetries: 0 });
const anthropicFor = (scenario) =>
  new Anthropic({ apiKey: 'test-key', baseURL: `http://127.0.0.1:${port}/${scenario}`, maxRetries: 0 });

// ---------------------------------------------------------------------------------------------
// Checks.

const failures = [];
let passed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failures.push(name);
    console.log(`FAIL ${name}\n     ${String(e?.stack ?? e).split('\n').slice(0, 6).join('\n     ')}`);
  }
}

function checkToolId(actual, expected) {
  if (expected === null) {
    assert.equal(typeof actual, 'string');
    assert.ok(actual.length > 0, 'generated tool call id is empty');
  } else {
    assert.equal(actual, expected);
  }
}

const CHAT_PARAMS = { model: 'deepseek-v3.2', messages: [{ role: 'user', content: 'hi' }] };

async function checkChatStream(scenario, ex) {
  const client = openaiFor(scenario);
  const stream = client.chat.completions.stream({ ...CHAT_PARAMS, stream_options: { include_usage: true } });
  const chunks = [];
  let reasoning = '';
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const c of chunk.choices) reasoning += c.delta?.reasoning_content ?? '';
  }
  const done = await stream.finalChatCompletion();
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant', 'the role comes first');
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.id.startsWith('chatcmpl-')));
  assert.equal(typeof chunks[0].created, 'number');
  assert.equal(chunks[0].system_fingerprint, 'fp_ladle');
  const usageChunk = chunks.at(-1);
  assert.deepEqual(usageChunk.choices, [], 'usage comes in a chunk with no choices');
  const msg = done.choices[0].message;
  assert.equal(reasoning, ex.reasoning);
  assert.equal(msg.content, ex.text === '' && ex.tools.length ? null : ex.text);
  assert.equal(done.choices[0].finish_reason, ex.chat_finish);
  assert.equal((msg.tool_calls ?? []).length, ex.tools.length);
  ex.tools.forEach((t, i) => {
    const call = msg.tool_calls[i];
    checkToolId(call.id, t.id);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, t.name);
    assert.equal(call.function.arguments, t.argsText);
  });
  checkChatUsage(done.usage, ex.usage);
  return { msg, reasoning, finish: done.choices[0].finish_reason, usage: done.usage };
}

function checkChatUsage(u, ex) {
  assert.equal(u.prompt_tokens, ex.prompt);
  assert.equal(u.completion_tokens, ex.completion);
  assert.equal(u.total_tokens, ex.prompt + ex.completion);
  assert.equal(u.prompt_tokens_details.cached_tokens, ex.cached);
  assert.equal(u.completion_tokens_details.reasoning_tokens, ex.reasoning);
}

async function checkChatBody(scenario, ex, streamed) {
  const done = await openaiFor(scenario).chat.completions.create(CHAT_PARAMS);
  assert.equal(done.object, 'chat.completion');
  const msg = done.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.reasoning_content ?? '', ex.reasoning);
  assert.equal(msg.content, ex.text === '' && ex.tools.length ? null : ex.text);
  assert.equal(done.choices[0].finish_reason, ex.chat_finish);
  assert.equal((msg.tool_calls ?? []).length, ex.tools.length);
  ex.tools.forEach((t, i) => {
    checkToolId(msg.tool_calls[i].id, t.id);
    assert.equal(msg.tool_calls[i].type, 'function');
    assert.equal(msg.tool_calls[i].function.name, t.name);
    assert.equal(msg.tool_calls[i].function.arguments, t.argsText);
    if (t.argsText.endsWith('}')) assert.deepEqual(JSON.parse(msg.tool_calls[i].function.arguments), t.input);
  });
  checkChatUsage(done.usage, ex.usage);
  // The same events give the same message either way (generated ids included); skipped when
  // the stream check already failed.
  if (streamed) assert.deepEqual((msg.tool_calls ?? []).map((c) => c.id), (streamed.msg.tool_calls ?? []).map((c) => c.id));
}

const RESPONSES_PARAMS = { model: 'deepseek-v3.2', input: 'hi' };

function outputOf(resp) {
  let reasoning = '';
  let text = '';
  const calls = [];
  for (const item of resp.output) {
    if (item.type === 'reasoning') for (const c of item.content ?? []) reasoning += c.text;
    if (item.type === 'message') for (const c of item.content) if (c.type === 'output_text') text += c.text;
    if (item.type === 'function_call') calls.push(item);
  }
  return { reasoning, text, calls };
}

function checkResponsesUsage(u, ex) {
  assert.equal(u.input_tokens, ex.prompt);
  assert.equal(u.output_tokens, ex.completion);
  assert.equal(u.total_tokens, ex.prompt + ex.completion);
  assert.equal(u.input_tokens_details.cached_tokens, ex.cached);
  assert.equal(u.output_tokens_details.reasoning_tokens, ex.reasoning);
}

function checkResponse(resp, ex) {
  assert.equal(resp.object, 'response');
  assert.ok(resp.id.startsWith('resp_'));
  assert.equal(resp.status, ex.responses_status);
  if (ex.responses_status === 'incomplete') {
    assert.deepEqual(resp.incomplete_details, { reason: 'max_output_tokens' });
  } else {
    assert.equal(resp.incomplete_details, null);
  }
  const out = outputOf(resp);
  assert.equal(out.reasoning, ex.reasoning);
  assert.equal(out.text, ex.text);
  assert.equal(resp.output_text, ex.text, 'the SDK joins output_text from message items');
  assert.equal(out.calls.length, ex.tools.length);
  ex.tools.forEach((t, i) => {
    checkToolId(out.calls[i].call_id, t.id);
    assert.equal(out.calls[i].name, t.name);
    assert.equal(out.calls[i].arguments, t.argsText);
  });
  const ids = resp.output.map((o) => o.id);
  assert.equal(new Set(ids).size, ids.length, 'output item ids are unique');
  checkResponsesUsage(resp.usage, ex.usage);
}

async function checkResponsesStream(scenario, ex) {
  const stream = openaiFor(scenario).responses.stream(RESPONSES_PARAMS);
  const events = [];
  const deltas = { text: '', reasoning: '', args: {} };
  let lastTextSnapshot = '';
  stream.on('response.output_text.delta', (e) => (lastTextSnapshot = e.snapshot));
  for await (const e of stream) {
    events.push(e);
    if (e.type === 'response.output_text.delta') deltas.text += e.delta;
    if (e.type === 'response.reasoning_text.delta') deltas.reasoning += e.delta;
    if (e.type === 'response.function_call_arguments.delta') {
      deltas.args[e.item_id] = (deltas.args[e.item_id] ?? '') + e.delta;
    }
  }
  const resp = await stream.finalResponse();
  events.forEach((e, i) => assert.equal(e.sequence_number, i, `sequence_number of ${e.type}`));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[1].type, 'response.in_progress');
  const last = events.at(-1).type;
  assert.equal(last, ex.responses_status === 'incomplete' ? 'response.incomplete' : 'response.completed');
  // Items open and close in order, never overlapping.
  let open = null;
  for (const e of events) {
    if (e.type === 'response.output_item.added') {
      assert.equal(open, null, 'an item opened while another was open');
      open = e.output_index;
    } else if (e.type === 'response.output_item.done') {
      assert.equal(e.output_index, open);
      open = null;
    } else if ('output_index' in e) {
      assert.equal(e.output_index, open, `${e.type} outside its item`);
    }
  }
  // Deltas add up to the final values (the completed event alone would hide a bad stream).
  assert.equal(deltas.text, ex.text);
  assert.equal(lastTextSnapshot, ex.text);
  assert.equal(deltas.reasoning, ex.reasoning);
  for (const item of resp.output.filter((o) => o.type === 'function_call')) {
    assert.equal(deltas.args[item.id] ?? '', item.arguments);
  }
  checkResponse(resp, ex);
  return resp;
}

async function checkResponsesBody(scenario, ex, streamed) {
  const resp = await openaiFor(scenario).responses.create(RESPONSES_PARAMS);
  checkResponse(resp, ex);
  if (streamed) assert.deepEqual(resp.output, streamed.output.map(({ parsed_arguments, ...o }) =>
    o.type === 'message' ? { ...o, content: o.content.map(({ parsed, ...c }) => c) } : o));
}

const MESSAGES_PARAMS = { model: 'deepseek-v3.2', max_tokens: 256, messages: [{ role: 'user', content: 'hi' }] };

function checkMessage(msg, ex) {
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.ok(msg.id.startsWith('msg_'));
  const thinking = msg.content.filter((b) => b.type === 'thinking');
  const text = msg.content.filter((b) => b.type === 'text');
  const tools = msg.content.filter((b) => b.type === 'tool_use');
  assert.equal(thinking.map((b) => b.thinking).join(''), ex.reasoning);
  for (const b of thinking) assert.ok(b.signature.length > 0, 'thinking block without signature');
  assert.equal(text.map((b) => b.text).join(''), ex.text);
  assert.equal(tools.length, ex.tools.length);
  ex.tools.forEach((t, i) => {
    checkToolId(tools[i].id, t.id);
    assert.equal(tools[i].name, t.name);
    assert.deepEqual(tools[i].input, t.input);
  });
  assert.equal(msg.stop_reason, ex.stop_reason);
  assert.equal(msg.stop_sequence, ex.stop_sequence ?? null);
  assert.equal(msg.usage.input_tokens, ex.usage.prompt - ex.usage.cached);
  assert.equal(msg.usage.cache_read_input_tokens, ex.usage.cached);
  assert.equal(msg.usage.output_tokens, ex.usage.completion);
}

async function checkMessagesStream(scenario, ex) {
  const raw = fs.readFileSync(path.join(dir, entryFor(scenario, 'messages', true).file), 'utf8');
  assert.match(raw, /^event: message_start\n[^]*?\n\nevent: ping\n/, 'ping follows message_start');
  const msg = await anthropicFor(scenario).messages.stream(MESSAGES_PARAMS).finalMessage();
  // The SDK's streamEvent objects share the message snapshot it mutates, so the event order
  // is checked on the bytes (each frame's event name must match its data's type).
  const events = raw.split('\n\n').filter((f) => f.length).map((frame) => {
    const m = /^event: (\S+)\ndata: (.*)$/s.exec(frame);
    assert.ok(m, `not an SSE frame: ${frame}`);
    const data = JSON.parse(m[2]);
    assert.equal(data.type, m[1]);
    return data;
  }).filter((e) => e.type !== 'ping');
  assert.equal(events[0].type, 'message_start');
  assert.deepEqual(events[0].message.content, []);
  assert.equal(events.at(-2).type, 'message_delta');
  assert.equal(events.at(-1).type, 'message_stop');
  // Blocks are numbered 0, 1, … and never interleave; thinking ends with a signature_delta.
  let open = -1;
  let next = 0;
  let lastDelta = null;
  for (const e of events) {
    if (e.type === 'content_block_start') {
      assert.equal(open, -1, 'a block started while another was open');
      assert.equal(e.index, next++);
      open = e.index;
      if (e.content_block.type === 'tool_use') assert.deepEqual(e.content_block.input, {});
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, open);
      lastDelta = e.delta.type;
    } else if (e.type === 'content_block_stop') {
      assert.equal(e.index, open);
      if (msg.content[open].type === 'thinking') assert.equal(lastDelta, 'signature_delta');
      open = -1;
      lastDelta = null;
    }
  }
  assert.equal(open, -1, 'a block was left open');
  checkMessage(msg, ex);
  return msg;
}

async function checkMessagesBody(scenario, ex, streamed) {
  const msg = await anthropicFor(scenario).messages.create(MESSAGES_PARAMS);
  checkMessage(msg, ex);
  if (streamed) assert.deepEqual(msg.content.map((b) => b.signature ?? null), streamed.content.map((b) => b.signature ?? null));
}

async function expectApiError(promise, status, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.APIError || e instanceof Anthropic.APIError, `not an APIError: ${e}`);
    if (status !== undefined) assert.equal(e.status, status);
    assert.match(String(e.message), new RegExp(message));
    return true;
  });
}

for (const [scenario, ex] of Object.entries(EXPECT)) {
  if (ex.failure) {
    await check(`${scenario}/chat stream raises`, async () => {
      const stream = openaiFor(scenario).chat.completions.stream(CHAT_PARAMS);
      let text = '';
      await expectApiError((async () => {
        for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
      })(), undefined, ex.failure);
      assert.equal(text, ex.partial_text);
    });
    await check(`${scenario}/chat body is a 500 error`, () =>
      expectApiError(openaiFor(scenario).chat.completions.create(CHAT_PARAMS), 500, ex.failure));
    await check(`${scenario}/responses stream ends failed`, async () => {
      const resp = await openaiFor(scenario).responses.stream(RESPONSES_PARAMS).finalResponse();
      assert.equal(resp.status, 'failed');
      assert.equal(resp.error.code, 'server_error');
      assert.equal(resp.error.message, ex.failure);
      assert.equal(outputOf(resp).text, ex.partial_text);
    });
    await check(`${scenario}/responses body is a 500 error`, () =>
      expectApiError(openaiFor(scenario).responses.create(RESPONSES_PARAMS), 500, ex.failure));
    await check(`${scenario}/messages stream raises`, () =>
      expectApiError(anthropicFor(scenario).messages.stream(MESSAGES_PARAMS).finalMessage(), undefined, ex.failure));
    await check(`${scenario}/messages body is a 500 error`, () =>
      expectApiError(anthropicFor(scenario).messages.create(MESSAGES_PARAMS), 500, ex.failure));
    continue;
  }
  let chat, resp, msg;
  await check(`${scenario}/chat stream`, async () => (chat = await checkChatStream(scenario, ex)));
  await check(`${scenario}/chat body`, () => checkChatBody(scenario, ex, chat));
  await check(`${scenario}/responses stream`, async () => (resp = await checkResponsesStream(scenario, ex)));
  await check(`${scenario}/responses body`, () => checkResponsesBody(scenario, ex, resp));
  await check(`${scenario}/messages stream`, async () => (msg = await checkMessagesStream(scenario, ex)));
  await check(`${scenario}/messages body`, () => checkMessagesBody(scenario, ex, msg));
}

// Two choices whose chunks interleave.
const N2 = [
  { content: 'Aa', finish: 'stop', tools: [] },
  { content: 'B', finish: 'tool_calls', tools: [{ id: 'call_b', name: 'lookup', arguments: '{"q":1}' }] },
];
function checkN2(done) {
  assert.equal(done.choices.length, 2);
  N2.forEach((ex, i) => {
    const c = done.choices.find((x) => x.index === i);
    assert.equal(c.message.content, ex.content);
    assert.equal(c.finish_reason, ex.finish);
    assert.deepEqual((c.message.tool_calls ?? []).map((t) => ({ id: t.id, name: t.function.name, arguments: t.function.arguments })),
      ex.tools);
  });
}
await check('chat_n2/chat stream', async () => {
  const done = await openaiFor('chat_n2').chat.completions.stream({ ...CHAT_PARAMS, n: 2 }).finalChatCompletion();
  checkN2(done);
  assert.equal(done.usage.total_tokens, 13);
});
await check('chat_n2/chat body', async () => checkN2(await openaiFor('chat_n2').chat.completions.create({ ...CHAT_PARAMS, n: 2 })));

// Logprobs: the SDKs' accumulators rebuild the full list from the chunks; Chat reports the
// reasoning token too (as vLLM does), Responses only output_text's.
const LP = [
  { token: 'Hm', logprob: -0.5, bytes: [72, 109], top: [['Hm', -0.5], ['Ok', -1.5]] },
  { token: 'Hi', logprob: -0.25, bytes: [72, 105], top: [['Hi', -0.25], ['Hey', -2]] },
  { token: ' ', logprob: -0.125, bytes: [32], top: [[' ', -0.125], ['!', -3]] },
  { token: 'bytes:\\xf0\\x9f', logprob: -1, bytes: [240, 159], top: [['bytes:\\xf0\\x9f', -1], ['bytes:\\xf0', -4]] },
  { token: 'bytes:\\x98\\x80', logprob: 0, bytes: [152, 128], top: [['bytes:\\x98\\x80', 0], ['bytes:\\x98', -5]] },
];
function checkLogprobList(list, expected) {
  assert.equal(list.length, expected.length);
  list.forEach((t, i) => {
    const ex = expected[i];
    assert.equal(t.token, ex.token);
    assert.equal(t.logprob, ex.logprob);
    assert.deepEqual(t.bytes, ex.bytes);
    assert.deepEqual(t.top_logprobs.map((a) => [a.token, a.logprob]), ex.top);
  });
  // The bytes rebuild the text even where a token holds part of a code point.
  return Buffer.from(list.flatMap((t) => t.bytes)).toString('utf8');
}
await check('logprobs/chat stream', async () => {
  const stream = openaiFor('logprobs').chat.completions.stream({ ...CHAT_PARAMS, logprobs: true, top_logprobs: 2 });
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (!c.delta?.content && !c.delta?.reasoning_content) assert.equal(c.logprobs ?? null, null);
    }
  }
  const done = await stream.finalChatCompletion();
  assert.equal(done.choices[0].message.content, 'Hi 😀');
  assert.equal(checkLogprobList(done.choices[0].logprobs.content, LP), 'HmHi 😀');
});
await check('logprobs/chat body', async () => {
  const done = await openaiFor('logprobs').chat.completions.create({ ...CHAT_PARAMS, logprobs: true, top_logprobs: 2 });
  assert.equal(done.choices[0].logprobs.refusal, null);
  assert.equal(checkLogprobList(done.choices[0].logprobs.content, LP), 'HmHi 😀');
});
for (const stream of [true, false]) {
  await check(`logprobs/responses ${stream ? 'stream' : 'body'}`, async () => {
    const params = { ...RESPONSES_PARAMS, include: ['message.output_text.logprobs'], top_logprobs: 2 };
    const resp = stream ? await openaiFor('logprobs').responses.stream(params).finalResponse()
      : await openaiFor('logprobs').responses.create(params);
    const part = resp.output.find((o) => o.type === 'message').content[0];
    assert.equal(part.text, 'Hi 😀');
    assert.equal(checkLogprobList(part.logprobs, LP.slice(1)), 'Hi 😀');
  });
}

server.close();
const versions = ['openai', '@anthropic-ai/sdk'].map((p) =>
  `${p}@${JSON.parse(fs.readFileSync(new URL(`./node_modules/${p}/package.json`, import.meta.url))).version}`);
console.log(`\n${passed} passed, ${failures.length} failed (${versions.join(', ')}, node ${process.version})`);
process.exit(failures.length ? 1 : 0);
