// libFuzzer target for the streaming output parser (build and run with scripts/fuzz).
//
// The tokenizer is loaded once ($LADLE_TOKENIZER, else <cache>/..., else <shared>/...; see
// tokenizer_fuzz.cc) and viewed as every model version, plus V3.2 with ｜DSML｜ as a token and
// V4 with it as text. Each input becomes one id stream over the real vocabulary:
//
//   byte 0      setup (version/DSML form) and whether the prompt opened reasoning
//   byte 1      the engine's finish reason
//   then        one id per step, drawn by a selector byte: a control id of the version (think
//               markers, tool-call markers, ｜DSML｜, BOS/EOS, other added tokens), a token of
//               marker text ("<｜DSML｜", "invoke name=\"", "\n```json\n", "</think>", quotes,
//               braces, partial UTF-8 ...), an exact id (selector % 8 == 6, 3 bytes little-endian:
//               the seeds in fuzz/corpus/parser/ spell whole model outputs this way), or any id at
//               all (including ids past the vocabulary)
//
// and is parsed whole, token by token and at cut points derived from the input. Checked
// (a violation aborts with a message, and libFuzzer keeps the input):
//   * no crash, hang or sanitizer report;
//   * every kToolCallArgs lies between the kToolCallStart and kToolCallEnd of its index, starts
//     are sequential and never nested, text is never emitted inside an open call, exactly one
//     kFinish comes last, and kToolCalls is never reported without a call;
//   * the joined events are identical for every chunking;
//   * Push and Finish after the finish return nothing;
//   * by id only: where every marker of the version is a token and the stream holds no added
//     token, the output is exactly the decoded text, in the initial phase, with no call.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/frontend/model_version.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/tokenizer/tokenizer.h"

#ifndef LADLE_FUZZ_CACHE_DIR
#define LADLE_FUZZ_CACHE_DIR ".cache"
#endif
#ifndef LADLE_FUZZ_SHARED_DIR
#define LADLE_FUZZ_SHARED_DIR "../shared"
#endif

namespace {

using ladle::frontend::Event;
using ladle::frontend::FinishReason;
using ladle::frontend::ModelVersion;
using ladle::frontend::SpecialTokens;
using ladle::frontend::StreamParser;
using ladle::tokenizer::TokenId;
using ladle::tokenizer::Tokenizer;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "parser_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

struct Setup {
  ModelVersion version;
  SpecialTokens tokens;
  std::unique_ptr<Tokenizer> tok;
  std::vector<TokenId> controls;     // the version's control ids and other added tokens
  std::vector<TokenId> marker_text;  // ordinary tokens that spell marker fragments
  bool all_markers_are_tokens = false;
};

std::vector<Setup>* g_setups = nullptr;

std::string ResolveTokenizerPath() {
  if (const char* env = std::getenv("LADLE_TOKENIZER"); env && *env) return env;
  const std::string rel = "/tokenizers/deepseek-v3/tokenizer.json";
  for (const std::string& p : {std::string(LADLE_FUZZ_CACHE_DIR) + rel, std::string(LADLE_FUZZ_SHARED_DIR) + rel}) {
    if (FILE* f = std::fopen(p.c_str(), "rb")) {
      std::fclose(f);
      return p;
    }
  }
  Fail("no tokenizer.json", "set LADLE_TOKENIZER");
}

Setup MakeSetup(const Tokenizer& base, ModelVersion v, std::optional<std::optional<TokenId>> dsml_override) {
  Setup s;
  s.version = v;
  s.tokens = ladle::frontend::SpecialTokensFor(v);
  if (dsml_override) s.tokens.dsml = *dsml_override;
  std::vector<ladle::tokenizer::AddedToken> add;
  if (s.tokens.think) add.push_back({*s.tokens.think, "<think>", false, true});
  if (s.tokens.end_think) add.push_back({*s.tokens.end_think, "</think>", false, true});
  if (s.tokens.dsml) add.push_back({*s.tokens.dsml, "｜DSML｜", false, true});
  auto t = add.empty() ? ladle::Result<Tokenizer>(base) : base.WithAddedTokens(add);
  if (!t.ok()) Fail("tokenizer view", t.status().ToString());
  s.tok = std::make_unique<Tokenizer>(std::move(t).value());

  const SpecialTokens& st = s.tokens;
  for (const auto& id : {st.think, st.end_think, st.tool_calls_begin, st.tool_calls_end, st.tool_call_begin,
                         st.tool_call_end, st.tool_sep, st.dsml, st.tool_outputs_begin, st.tool_output_end}) {
    if (id) s.controls.push_back(*id);
  }
  s.controls.push_back(st.bos);
  s.controls.push_back(st.eos);
  s.controls.push_back(st.user);
  s.controls.push_back(st.assistant);

  const char* fragments[] = {
      "<｜DSML｜", "｜DSML｜", "<", "</", "invoke name=\"", "parameter name=\"", "\" string=\"true\">",
      "\" string=\"false\">", "\">", "</｜DSML｜parameter>", "</｜DSML｜invoke>", "function_calls>", "tool_calls>",
      "\n```json\n", "\n```", "```", "json", "<think>", "</think>", "think>", "{", "}", "[", "]", "\"", "\\", ":",
      ",", "\n", " ", "  ", "get_weather", "function", "location", "NYC", "true", "false", "null", "12", "-3.5e2",
      "é", "🦜", "鿰", "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "\\u00e9", "\\\""};
  for (const char* f : fragments) {
    for (TokenId id : s.tok->EncodePlain(f)) s.marker_text.push_back(id);
  }
  // Tokens that are not UTF-8 on their own (pieces of a code point).
  for (TokenId id = 0; id < 128000 && s.marker_text.size() < 400; id += 97) {
    auto b = s.tok->Decode(std::span<const TokenId>(&id, 1));
    if (b.ok() && !ladle::tokenizer::IsValidUtf8(*b)) s.marker_text.push_back(id);
  }
  const bool dsml_version = v == ModelVersion::kV32 || v == ModelVersion::kV4;
  s.all_markers_are_tokens = st.think.has_value() && (!dsml_version || st.dsml.has_value());
  return s;
}

// Events with adjacent text of one kind (and call) joined.
std::vector<Event> Normalize(const std::vector<Event>& events) {
  std::vector<Event> out;
  for (const Event& e : events) {
    const bool text = e.kind == Event::Kind::kReasoning || e.kind == Event::Kind::kContent ||
                      e.kind == Event::Kind::kToolCallArgs;
    if (text && !out.empty() && out.back().kind == e.kind && out.back().tool_index == e.tool_index) {
      out.back().text += e.text;
      continue;
    }
    out.push_back(e);
  }
  return out;
}

std::string Describe(const std::vector<Event>& events) {
  std::string s;
  for (const Event& e : events) {
    s += std::to_string(static_cast<int>(e.kind)) + " #" + std::to_string(e.tool_index) + " " + e.tool_name + " [" +
         e.text.substr(0, 80) + "]\n";
  }
  return s;
}

void CheckInvariants(const std::vector<Event>& events) {
  int open = -1, next = 0, calls = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    switch (e.kind) {
      case Event::Kind::kToolCallStart:
        if (open >= 0 || e.tool_index != next || e.tool_name.empty() || e.tool_id.empty())
          Fail("bad tool call start", Describe(events));
        open = next++;
        ++calls;
        break;
      case Event::Kind::kToolCallArgs:
        if (open < 0 || e.tool_index != open) Fail("arguments outside their call", Describe(events));
        break;
      case Event::Kind::kToolCallEnd:
        if (open < 0 || e.tool_index != open) Fail("end without its start", Describe(events));
        open = -1;
        break;
      case Event::Kind::kReasoning:
      case Event::Kind::kContent:
        if (open >= 0) Fail("text inside an open call", Describe(events));
        if (e.text.empty()) Fail("empty text event", Describe(events));
        break;
      case Event::Kind::kFinish:
        if (i + 1 != events.size() || open >= 0) Fail("finish not last or call left open", Describe(events));
        if (e.finish == FinishReason::kToolCalls && calls == 0) Fail("tool_calls finish without a call", Describe(events));
        break;
    }
  }
  if (events.empty() || events.back().kind != Event::Kind::kFinish) Fail("no finish", Describe(events));
}

bool Same(const std::vector<Event>& a, const std::vector<Event>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Event &x = a[i], &y = b[i];
    if (x.kind != y.kind || x.text != y.text || x.tool_index != y.tool_index || x.tool_id != y.tool_id ||
        x.tool_name != y.tool_name || x.finish != y.finish || x.malformed != y.malformed)
      return false;
  }
  return true;
}

std::vector<Event> Run(const Setup& s, bool think, std::span<const TokenId> ids, const std::vector<size_t>& cuts,
                       FinishReason finish) {
  ladle::frontend::StreamParserOptions o;
  o.tool_id_prefix = "t";
  o.special_tokens = s.tokens;
  auto p = StreamParser::Create(s.version, *s.tok, think, o);
  if (!p.ok()) Fail("Create failed", p.status().ToString());
  std::vector<Event> all;
  size_t at = 0;
  for (size_t c : cuts) {
    auto ev = p->Push(ids.subspan(at, c - at));
    all.insert(all.end(), ev.begin(), ev.end());
    at = c;
  }
  auto ev = p->Push(ids.subspan(at));
  all.insert(all.end(), ev.begin(), ev.end());
  ev = p->Finish(finish);
  all.insert(all.end(), ev.begin(), ev.end());
  if (!p->Push(ids).empty() || !p->Finish(finish).empty()) Fail("events after the finish", "");
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const std::string path = ResolveTokenizerPath();
  auto base = Tokenizer::FromFile(path);
  if (!base.ok()) Fail("cannot load tokenizer", base.status().ToString());
  g_setups = new std::vector<Setup>();
  g_setups->push_back(MakeSetup(*base, ModelVersion::kV3, std::nullopt));
  g_setups->push_back(MakeSetup(*base, ModelVersion::kR1, std::nullopt));
  g_setups->push_back(MakeSetup(*base, ModelVersion::kV31, std::nullopt));
  g_setups->push_back(MakeSetup(*base, ModelVersion::kV32, std::nullopt));
  g_setups->push_back(MakeSetup(*base, ModelVersion::kV32, std::optional<TokenId>(128825)));
  g_setups->push_back(MakeSetup(*base, ModelVersion::kV4, std::nullopt));
  g_setups->push_back(MakeSetup(*base, ModelVersion::kV4, std::optional<std::optional<TokenId>>(std::nullopt)));
  std::fprintf(stderr, "parser_fuzz: loaded %s, %zu setups\n", path.c_str(), g_setups->size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Setup& s = (*g_setups)[data[0] % g_setups->size()];
  const bool think = (data[0] / g_setups->size()) % 2 == 1;
  static constexpr FinishReason kFinishes[] = {FinishReason::kStop, FinishReason::kLength, FinishReason::kToolCalls,
                                               FinishReason::kCancelled, FinishReason::kError};
  const FinishReason finish = kFinishes[data[1] % 5];

  std::vector<TokenId> ids;
  const size_t vocab = s.tok->VocabSize();
  for (size_t i = 2; i < size && ids.size() < 4096;) {
    const uint8_t sel = data[i++];
    const uint8_t b = i < size ? data[i++] : 0;
    switch (sel % 8) {
      case 0:
      case 1: ids.push_back(s.controls[b % s.controls.size()]); break;
      case 6: {
        // An exact id (little-endian, 3 bytes): how the seeds spell real model output.
        const uint8_t c = i < size ? data[i++] : 0;
        const uint8_t d = i < size ? data[i++] : 0;
        ids.push_back(static_cast<TokenId>((uint32_t{b} | uint32_t{c} << 8 | uint32_t{d} << 16) % (vocab + 16)));
        break;
      }
      case 7: {
        const uint8_t c = i < size ? data[i++] : 0;
        ids.push_back(static_cast<TokenId>(((uint32_t{b} << 8 | c) * 131u + sel) % (vocab + 16)));
        break;
      }
      default: ids.push_back(s.marker_text[(uint32_t{b} << 3 | (sel >> 3)) % s.marker_text.size()]); break;
    }
  }

  const std::vector<Event> whole = Normalize(Run(s, think, ids, {}, finish));
  CheckInvariants(whole);
  std::vector<size_t> every;
  for (size_t i = 1; i < ids.size(); ++i) every.push_back(i);
  const std::vector<Event> by_token = Run(s, think, ids, every, finish);
  CheckInvariants(by_token);
  if (!Same(Normalize(by_token), whole)) Fail("token-by-token events differ", Describe(whole) + "---\n" + Describe(Normalize(by_token)));
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  std::vector<size_t> cuts;
  for (size_t i = 1; i < ids.size(); ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    if ((h >> 61) == 0) cuts.push_back(i);
  }
  const std::vector<Event> split = Run(s, think, ids, cuts, finish);
  if (!Same(Normalize(split), whole)) Fail("chunked events differ", Describe(whole) + "---\n" + Describe(Normalize(split)));

  // By id only: with no added token in the stream, nothing can be markup.
  if (s.all_markers_are_tokens) {
    bool any_added = false;
    std::vector<TokenId> valid;
    for (TokenId id : ids) {
      if (!s.tok->IsValidId(id)) continue;
      any_added = any_added || s.tok->IsAddedToken(id);
      valid.push_back(id);
    }
    if (!any_added) {
      auto text = s.tok->Decode(valid);
      if (!text.ok()) Fail("decode", text.status().ToString());
      std::string got;
      for (const Event& e : whole) {
        if (e.kind == Event::Kind::kToolCallStart) Fail("a call without any control token", Describe(whole));
        if (e.kind == Event::Kind::kReasoning && !think) Fail("reasoning without </think>", Describe(whole));
        if (e.kind == Event::Kind::kContent && think) Fail("content without </think>", Describe(whole));
        if (e.kind == Event::Kind::kReasoning || e.kind == Event::Kind::kContent) got += e.text;
      }
      if (got != *text) Fail("plain text changed", got + "\n---\n" + *text);
    }
  }
  return 0;
}
