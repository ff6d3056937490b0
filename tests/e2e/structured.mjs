// End-to-end structured output with the official SDKs against a running `ladle serve` that
// compiles on a `ladle grammar-worker` (tests/e2e/structured_run.sh starts both).
//   node structured.mjs <server base url> <api key>
// Every output is parsed and checked by an independent validator (ajv 8 + ajv-formats,
// pinned in tests/e2e/ajv). Prints one line per check; any failure exits 1.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(new URL('./ajv/package.json', import.meta.url));
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default ?? require('ajv-formats');

const [baseUrl, apiKey, mode] = process.argv.slice(2);
const MODEL = 'ladle';
const oa = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0 });
const an = new Anthropic({ baseURL: baseUrl, apiKey, maxRetries: 0 });
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

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

function validate(schema, value, what) {
  const ok = ajv.validate(schema, value);
  assert.ok(ok, `${what} does not match its schema: ${ajv.errorsText(ajv.errors)}\n${JSON.stringify(value)}`);
}

function parseJson(text, what) {
  try {
    return JSON.parse(text);
  } catch (err) {
    assert.fail(`${what} is not JSON (${err.message}): ${JSON.stringify(text)}`);
  }
}

async function metric(name) {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

if (mode === '--fallback') {
  // The runner stopped the grammar worker: a new schema still compiles, in-process.
  await check('grammar worker down: compiles fall back to the server itself', async () => {
    const schema = { type: 'object', properties: { fallback: { type: 'boolean' } }, required: ['fallback'], additionalProperties: false };
    const r = await oa.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 32,
      response_format: { type: 'json_schema', json_schema: { name: 'fb', schema, strict: true } },
    });
    validate(schema, parseJson(r.choices[0].message.content, 'content'), 'content');
    assert.ok((await metric('ladle_grammar_worker_failures_total')) >= 1);
    assert.ok((await metric('ladle_grammar_local_compiles_total')) >= 1);
  });
  process.exit(failures ? 1 : 0);
}

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 130 },
    born: { type: 'string', format: 'date' },
    tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
  },
  required: ['name', 'age', 'born', 'tags'],
  additionalProperties: false,
};
const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];

// ---- Chat Completions: response_format ----
await check('chat json_schema: the content parses and validates', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 200,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
  });
  const c = r.choices[0];
  validate(person, parseJson(c.message.content, 'content'), 'content');
  assert.equal(c.finish_reason, 'stop');
});

await check('chat json_schema n=3: every choice validates', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 200, n: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
  });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) validate(person, parseJson(c.message.content, `choice ${c.index}`), `choice ${c.index}`);
});

const prose = {
  type: 'object',
  properties: { title: { type: 'string' }, body: { type: 'string' }, notes: { type: 'array', items: { type: 'string' } } },
  required: ['title', 'body', 'notes'],
  additionalProperties: false,
};
await check('chat json_schema under a tight max_tokens: closed validly, reported as forced', async () => {
  const { data: r, response } = await oa.chat.completions
    .create({
      model: MODEL, messages, max_tokens: 24, temperature: 1,
      response_format: { type: 'json_schema', json_schema: { name: 'prose', schema: prose, strict: true } },
    })
    .withResponse();
  validate(prose, parseJson(r.choices[0].message.content, 'content'), 'content');
  assert.ok(r.usage.completion_tokens <= 24, `completion_tokens ${r.usage.completion_tokens}`);
  // Unbounded strings under a 24-token budget: the random model does not close them alone.
  assert.equal(r.usage.grammar_forced, true, JSON.stringify(r.usage));
  assert.equal(response.headers.get('x-ladle-grammar-forced'), 'true');
});

await check('chat json_schema with the budget off (x-ladle-grammar-budget: off) is not forced', async () => {
  const { data: r, response } = await oa.chat.completions
    .create(
      {
        model: MODEL, messages, max_tokens: 24,
        response_format: { type: 'json_schema', json_schema: { name: 'prose', schema: prose, strict: true } },
      },
      { headers: { 'x-ladle-grammar-budget': 'off' } },
    )
    .withResponse();
  assert.equal(r.usage.grammar_forced, undefined);
  assert.equal(response.headers.get('x-ladle-grammar-forced'), null);
});

await check('chat json_schema streaming: the deltas join into valid JSON', async () => {
  const stream = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 200, stream: true, stream_options: { include_usage: true },
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  validate(person, parseJson(text, 'streamed content'), 'streamed content');
  assert.equal(finish, 'stop');
});

await check('chat json_object: an object', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 64, response_format: { type: 'json_object' },
  });
  const v = parseJson(r.choices[0].message.content, 'content');
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
});

await check('chat thinking + json_schema: reasoning free, the answer validates', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 120, reasoning_effort: 'high',
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
  });
  const c = r.choices[0];
  // The random model may end its reasoning with EOS; when it answers, the answer is valid.
  if (c.message.content) validate(person, parseJson(c.message.content, 'content'), 'content');
  else assert.equal(c.finish_reason, 'stop');
});

await check('chat regex extension', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 32, response_format: { type: 'regex', regex: '[0-9]{3}-[a-z]{2,4}' },
  });
  assert.match(r.choices[0].message.content, /^[0-9]{3}-[a-z]{2,4}$/);
});

await check('chat ebnf extension', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages, max_tokens: 32,
    response_format: { type: 'ebnf', grammar: 'root ::= answer " " num\nanswer ::= "yes" | "no"\nnum ::= [1-9] [0-9]?' },
  });
  assert.match(r.choices[0].message.content, /^(yes|no) [1-9][0-9]?$/);
});

await check('chat uncompilable schema: 400 with the parameter and JSON path', async () => {
  try {
    await oa.chat.completions.create({
      model: MODEL, messages, max_tokens: 8,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'bad', schema: { type: 'object', properties: { x: { type: 'string', pattern: '(?=a)a' } } } },
      },
    });
    assert.fail('expected HTTP 400');
  } catch (err) {
    assert.equal(err.status, 400, err.message);
    assert.equal(err.param, 'response_format.json_schema.schema');
    assert.match(err.message, /properties\/x/);
  }
});

await check('chat bad regex: 400', async () => {
  try {
    await oa.chat.completions.create({ model: MODEL, messages, max_tokens: 8, response_format: { type: 'regex', regex: '(ab' } });
    assert.fail('expected HTTP 400');
  } catch (err) {
    assert.equal(err.status, 400, err.message);
    assert.equal(err.param, 'response_format.regex');
  }
});

// ---- Responses: text.format ----
await check('responses text.format json_schema', async () => {
  const r = await oa.responses.create({
    model: MODEL, input: 'Describe a person as JSON.', max_output_tokens: 200,
    text: { format: { type: 'json_schema', name: 'person', schema: person, strict: true } },
  });
  validate(person, parseJson(r.output_text, 'output_text'), 'output_text');
  assert.equal(r.status, 'completed');
});

await check('responses text.format json_schema streaming', async () => {
  const stream = await oa.responses.create({
    model: MODEL, input: 'Describe a person as JSON.', max_output_tokens: 200, stream: true,
    text: { format: { type: 'json_schema', name: 'person', schema: person, strict: true } },
  });
  let text = '';
  let done = null;
  for await (const e of stream) {
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.completed') done = e.response;
  }
  validate(person, parseJson(text, 'streamed output'), 'streamed output');
  assert.ok(done, 'no response.completed');
});

// ---- Forced tool calls ----
const weather = {
  type: 'object',
  properties: { city: { type: 'string', minLength: 1, maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const lookup = {
  type: 'object',
  properties: { id: { type: 'integer', minimum: 1, maximum: 9999 } },
  required: ['id'],
  additionalProperties: false,
};
const chatTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: weather } },
  { type: 'function', function: { name: 'lookup', description: 'Find a record', parameters: lookup } },
];
const schemaOf = { get_weather: weather, lookup };

function checkChatCalls(r, names) {
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
  assert.ok(c.message.tool_calls?.length >= 1, JSON.stringify(c.message));
  for (const call of c.message.tool_calls) {
    assert.ok(names.includes(call.function.name), call.function.name);
    validate(schemaOf[call.function.name], parseJson(call.function.arguments, 'arguments'), `${call.function.name} arguments`);
  }
}

await check('chat tool_choice named: the call parses back with valid arguments', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 160,
    tools: chatTools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  checkChatCalls(r, ['get_weather']);
});

await check('chat tool_choice required', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Do something.' }], max_tokens: 160,
    tools: chatTools, tool_choice: 'required', parallel_tool_calls: false,
  });
  checkChatCalls(r, ['get_weather', 'lookup']);
  assert.equal(r.choices[0].message.tool_calls.length, 1);
});

await check('chat tool_choice required, streaming', async () => {
  const stream = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], max_tokens: 160, stream: true,
    tools: chatTools, tool_choice: { type: 'function', function: { name: 'lookup' } },
  });
  const args = {};
  const names = {};
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const t of c.delta?.tool_calls ?? []) {
        if (t.function?.name) names[t.index] = t.function.name;
        args[t.index] = (args[t.index] ?? '') + (t.function?.arguments ?? '');
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(names[0], 'lookup');
  validate(lookup, parseJson(args[0], 'streamed arguments'), 'streamed arguments');
});

await check('responses tool_choice required: a function_call item with valid arguments', async () => {
  const r = await oa.responses.create({
    model: MODEL, input: 'Weather in Oslo?', max_output_tokens: 160, tool_choice: 'required',
    tools: [{ type: 'function', name: 'get_weather', description: 'Weather', parameters: weather, strict: true }],
  });
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.ok(calls.length >= 1, JSON.stringify(r.output));
  for (const call of calls) {
    assert.equal(call.name, 'get_weather');
    validate(weather, parseJson(call.arguments, 'arguments'), 'arguments');
  }
});

const anTools = [
  { name: 'get_weather', description: 'Weather for a city', input_schema: weather },
  { name: 'lookup', description: 'Find a record', input_schema: lookup },
];
for (const [label, choice, names] of [
  ['any', { type: 'any' }, ['get_weather', 'lookup']],
  ['tool', { type: 'tool', name: 'lookup' }, ['lookup']],
]) {
  await check(`messages tool_choice ${label}: tool_use with input valid per input_schema`, async () => {
    const r = await an.messages.create({
      model: MODEL, max_tokens: 160, messages: [{ role: 'user', content: 'Use a tool.' }], tools: anTools, tool_choice: choice,
    });
    assert.equal(r.stop_reason, 'tool_use', JSON.stringify(r));
    const uses = r.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1, JSON.stringify(r.content));
    for (const u of uses) {
      assert.ok(names.includes(u.name), u.name);
      validate(schemaOf[u.name], u.input, `${u.name} input`);
    }
  });
}

await check('chat tool_choice auto: free text or a valid call (lazy trigger)', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Rome?' }], max_tokens: 48, tools: chatTools,
  });
  const c = r.choices[0];
  for (const call of c.message.tool_calls ?? []) {
    validate(schemaOf[call.function.name], parseJson(call.function.arguments, 'arguments'), `${call.function.name} arguments`);
  }
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason), c.finish_reason);
});

// ---- The compile service ----
await check('metrics: cache hits for repeated schemas, compiles by the worker, compile histogram', async () => {
  assert.ok((await metric('ladle_grammar_cache_hits_total')) >= 1);
  assert.ok((await metric('ladle_grammar_worker_compiles_total')) >= 1);
  assert.ok((await metric('ladle_grammar_compile_seconds_count')) >= 1);
  assert.ok((await metric('ladle_grammar_cache_entries')) >= 1);
});

if (failures) {
  console.log(`${failures} structured-output check(s) failed`);
  process.exit(1);
}
