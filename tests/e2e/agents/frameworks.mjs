// The Vercel AI SDK and LangChain JS against a running `ladle serve`, used the documented way
// with stock settings (issue 12 §2). The served model has random weights, so the checks are
// about the protocol (forced tool calls get 200 output tokens: the shortest DSML call of these
// tools is about 85 tokens on V3.2, and fewer is a 400 by design): every call succeeds, text and tool calls arrive, structured outputs parse
// against their schema, and multi-turn Responses conversations (store defaults to true, so the
// SDK sends item_reference items) resolve.
//   node frameworks.mjs <base url> <api key>
import assert from 'node:assert/strict';
import { generateText, streamText, generateObject, tool, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { z } from 'zod';

const [base, apiKey] = process.argv.slice(2);
const MODEL = 'ladle';
const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey });
const anthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey });

let failures = 0;
async function check(name, fn) {
  const t0 = performance.now();
  try {
    await fn();
    console.log(`ok   ${name} (${(performance.now() - t0).toFixed(0)} ms)`);
  } catch (err) {
    failures++;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
    if (err?.responseBody) console.log(`     body: ${String(err.responseBody).slice(0, 400)}`);
  }
}

const weather = z.object({ city: z.string().max(20), days: z.number().int().min(1).max(7) });
const person = z.object({ name: z.string().max(16), age: z.number().int().min(0).max(150) });

// ---- Vercel AI SDK ----
for (const [label, model] of [
  ['chat', () => openai.chat(MODEL)],
  ['responses', () => openai.responses(MODEL)],
  ['anthropic', () => anthropic(MODEL)],
]) {
  await check(`ai-sdk ${label}: generateText`, async () => {
    const r = await generateText({ model: model(), prompt: 'Say hello.', maxOutputTokens: 8 });
    assert.equal(typeof r.text, 'string');
    assert.ok(r.usage.outputTokens > 0, JSON.stringify(r.usage));
  });
  await check(`ai-sdk ${label}: streamText`, async () => {
    const r = streamText({ model: model(), prompt: 'Count to three.', maxOutputTokens: 8 });
    let text = '';
    for await (const delta of r.textStream) text += delta;
    assert.equal(text, await r.text);
    assert.ok((await r.usage).outputTokens > 0);
  });
  await check(`ai-sdk ${label}: a forced tool call parses against its schema`, async () => {
    const r = await generateText({
      model: model(), prompt: 'What is the weather in Paris?', maxOutputTokens: 200,
      tools: { get_weather: tool({ description: 'Weather forecast', inputSchema: weather }) },
      toolChoice: { type: 'tool', toolName: 'get_weather' }, stopWhen: stepCountIs(1),
    });
    assert.equal(r.toolCalls.length >= 1, true, `no tool call: ${JSON.stringify(r.content)}`);
    const call = r.toolCalls[0];
    assert.equal(call.toolName, 'get_weather');
    weather.parse(call.input);
  });
  await check(`ai-sdk ${label}: generateObject`, async () => {
    const r = await generateObject({ model: model(), schema: person, prompt: 'Invent a person.', maxOutputTokens: 200 });
    person.parse(r.object);
  });
}

await check('ai-sdk responses: multi-turn with store (item_reference) the documented way', async () => {
  const messages = [{ role: 'user', content: 'Hi, remember the number 7.' }];
  const first = await generateText({ model: openai.responses(MODEL), messages, maxOutputTokens: 8 });
  messages.push(...first.response.messages);
  messages.push({ role: 'user', content: 'Which number?' });
  const second = await generateText({ model: openai.responses(MODEL), messages, maxOutputTokens: 8 });
  assert.equal(typeof second.text, 'string');
  assert.ok(second.usage.inputTokens > first.usage.inputTokens, `${second.usage.inputTokens} <= ${first.usage.inputTokens}`);
});

await check('ai-sdk responses: a tool loop (call, result, answer) with store on', async () => {
  const r = await generateText({
    model: openai.responses(MODEL), prompt: 'Weather in Oslo?', maxOutputTokens: 200,
    tools: { get_weather: tool({ description: 'Weather forecast', inputSchema: weather, execute: async () => ({ temp: 3 }) }) },
    toolChoice: 'required', stopWhen: stepCountIs(2), prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : {}),
  });
  assert.equal(r.steps.length, 2, JSON.stringify(r.steps.map((s) => s.finishReason)));
  assert.ok(r.steps[0].toolResults.length >= 1);
});

// ---- LangChain JS ----
const lcOpenAI = (extra = {}) =>
  new ChatOpenAI({ model: MODEL, apiKey, configuration: { baseURL: `${base}/v1` }, maxTokens: 16, maxRetries: 0, ...extra });
const lcAnthropic = (extra = {}) =>
  new ChatAnthropic({ model: MODEL, apiKey, anthropicApiUrl: base, maxTokens: 16, maxRetries: 0, ...extra });

for (const [label, make] of [['openai', lcOpenAI], ['openai responses', (x = {}) => lcOpenAI({ useResponsesApi: true, ...x })], ['anthropic', lcAnthropic]]) {
  await check(`langchain ${label}: invoke and stream`, async () => {
    const m = make();
    const r = await m.invoke('Say hi.');
    assert.equal(typeof r.content === 'string' || Array.isArray(r.content), true);
    let chunks = 0;
    for await (const c of await m.stream('Say hi.')) chunks += c ? 1 : 0;
    assert.ok(chunks > 0);
  });
  await check(`langchain ${label}: bindTools with a forced tool`, async () => {
    const m = make({ maxTokens: 200 }).bindTools([{ name: 'get_weather', description: 'Weather forecast', schema: weather }], { tool_choice: 'get_weather' });
    const r = await m.invoke('Weather in Rome?');
    assert.ok(r.tool_calls?.length >= 1, JSON.stringify(r));
    assert.equal(r.tool_calls[0].name, 'get_weather');
    weather.parse(r.tool_calls[0].args);
  });
  await check(`langchain ${label}: withStructuredOutput`, async () => {
    const m = make({ maxTokens: 200 });
    const r = await m.withStructuredOutput(person).invoke('Invent a person.');
    person.parse(r);
  });
}

console.log(failures ? `${failures} framework check(s) failed` : 'all framework checks passed');
process.exit(failures ? 1 : 0);
