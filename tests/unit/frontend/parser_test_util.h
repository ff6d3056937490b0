// Helpers shared by the output-parser tests: versioned tokenizers, running a parser over ids
// cut at given points, joining events, checking the stream invariants, and reading the
// result back the way a client would (reasoning, content, calls).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ladle/frontend/model_version.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/tokenizer/tokenizer.h"
#include "test_data.h"

namespace ladle::frontend::parser_test {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

// The base DeepSeek-V3 tokenizer, loaded once (nullptr when the file is missing).
inline const Tokenizer* BaseTokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::FromFile(testing::TokenizerPath());
    return t.ok() ? std::make_unique<Tokenizer>(std::move(t).value()) : nullptr;
  }();
  return tok.get();
}

// The tokenizer as a parser configured with `st` sees it: the base file plus exactly the
// added tokens `st` names (think markers, ｜DSML｜). Built by hand rather than with
// TokenizerForVersion so a test can also run a version with ｜DSML｜ as text or as a token.
inline Tokenizer TokenizerWith(const SpecialTokens& st) {
  std::vector<tokenizer::AddedToken> add;
  if (st.think) add.push_back({*st.think, "<think>", false, true});
  if (st.end_think) add.push_back({*st.end_think, "</think>", false, true});
  if (st.dsml) add.push_back({*st.dsml, "｜DSML｜", false, true});
  if (add.empty()) return *BaseTokenizer();
  auto t = BaseTokenizer()->WithAddedTokens(add);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// One way to configure a parser: version, its control ids (possibly overridden), prompt tail.
struct ParserSetup {
  ModelVersion version = ModelVersion::kV3;
  SpecialTokens tokens;
  bool think = false;
  std::string label;  // for messages

  static ParserSetup Of(ModelVersion v, bool think) { return ParserSetup{v, SpecialTokensFor(v), think, std::string(ModelVersionName(v))}; }
  ParserSetup WithDsml(std::optional<TokenId> id) const {
    ParserSetup s = *this;
    s.tokens.dsml = id;
    s.label += id ? "+dsml-token" : "+dsml-text";
    return s;
  }
};

struct Runner {
  ParserSetup setup;
  Tokenizer tok;

  explicit Runner(ParserSetup s) : setup(std::move(s)), tok(TokenizerWith(setup.tokens)) {}

  std::unique_ptr<StreamParser> Make() const {
    StreamParserOptions o;
    o.tool_id_prefix = "call_";
    o.special_tokens = setup.tokens;
    auto p = StreamParser::Create(setup.version, tok, setup.think, o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return std::make_unique<StreamParser>(std::move(p).value());
  }

  // Ids pushed in pieces ending at each of `cuts` (ascending; the rest goes last).
  std::vector<Event> Run(std::span<const TokenId> ids, const std::vector<size_t>& cuts,
                         FinishReason finish = FinishReason::kStop) const {
    auto p = Make();
    std::vector<Event> all;
    size_t at = 0;
    auto push = [&](size_t end) {
      auto ev = p->Push(ids.subspan(at, end - at));
      all.insert(all.end(), ev.begin(), ev.end());
      at = end;
    };
    for (size_t c : cuts) push(c);
    push(ids.size());
    auto ev = p->Finish(finish);
    all.insert(all.end(), ev.begin(), ev.end());
    return all;
  }
  std::vector<Event> RunWhole(std::span<const TokenId> ids, FinishReason finish = FinishReason::kStop) const {
    return Run(ids, {}, finish);
  }
  std::vector<Event> RunTokenByToken(std::span<const TokenId> ids, FinishReason finish = FinishReason::kStop) const {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < ids.size(); ++i) cuts.push_back(i);
    return Run(ids, cuts, finish);
  }
};

// Adjacent text events of the same kind (and call) joined: the chunking-independent form.
inline std::vector<Event> Normalize(const std::vector<Event>& events) {
  std::vector<Event> out;
  for (const Event& e : events) {
    const bool text = e.kind == Event::Kind::kReasoning || e.kind == Event::Kind::kContent ||
                      e.kind == Event::Kind::kToolCallArgs;
    if (text && e.text.empty()) continue;
    if (text && !out.empty() && out.back().kind == e.kind && out.back().tool_index == e.tool_index) {
      out.back().text += e.text;
      continue;
    }
    out.push_back(e);
  }
  return out;
}

inline std::string KindName(Event::Kind k) {
  switch (k) {
    case Event::Kind::kReasoning: return "reasoning";
    case Event::Kind::kContent: return "content";
    case Event::Kind::kToolCallStart: return "start";
    case Event::Kind::kToolCallArgs: return "args";
    case Event::Kind::kToolCallEnd: return "end";
    case Event::Kind::kFinish: return "finish";
  }
  return "?";
}

inline std::string Describe(const std::vector<Event>& events) {
  std::string s;
  for (const Event& e : events) {
    // (Appended piece by piece: "literal" + std::string trips GCC 12's -Wrestrict false positive.)
    s += KindName(e.kind);
    if (e.tool_index >= 0) {
      s += '#';
      s += std::to_string(e.tool_index);
    }
    if (!e.tool_name.empty()) {
      s += " name=";
      s += e.tool_name;
    }
    if (!e.text.empty()) {
      s += " [";
      s += e.text;
      s += ']';
    }
    if (e.kind == Event::Kind::kFinish) {
      s += ' ';
      s += FinishReasonName(e.finish);
      if (e.malformed) s += " malformed";
    }
    s += '\n';
  }
  return s;
}

inline bool SameEvents(const std::vector<Event>& a, const std::vector<Event>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Event &x = a[i], &y = b[i];
    if (x.kind != y.kind || x.text != y.text || x.tool_index != y.tool_index || x.tool_id != y.tool_id ||
        x.tool_name != y.tool_name || x.finish != y.finish || x.malformed != y.malformed) {
      return false;
    }
  }
  return true;
}

// The stream's structural rules; "" when they hold.
inline std::string CheckInvariants(const std::vector<Event>& events) {
  int open = -1;
  int next = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const std::string at = " at event " + std::to_string(i);
    switch (e.kind) {
      case Event::Kind::kToolCallStart:
        if (open >= 0) return "start while call " + std::to_string(open) + " is open" + at;
        if (e.tool_index != next) return "tool index not sequential" + at;
        if (e.tool_name.empty() || e.tool_id.empty()) return "start without name or id" + at;
        open = next++;
        break;
      case Event::Kind::kToolCallArgs:
        if (open < 0 || e.tool_index != open) return "args outside their call" + at;
        break;
      case Event::Kind::kToolCallEnd:
        if (open < 0 || e.tool_index != open) return "end without its start" + at;
        open = -1;
        break;
      case Event::Kind::kReasoning:
      case Event::Kind::kContent:
        if (open >= 0) return "text inside an open call" + at;
        if (e.text.empty()) return "empty text event" + at;
        break;
      case Event::Kind::kFinish:
        if (i + 1 != events.size()) return "finish is not last" + at;
        if (open >= 0) return "finish with an open call";
        break;
    }
  }
  if (events.empty() || events.back().kind != Event::Kind::kFinish) return "no finish";
  return "";
}

struct Call {
  std::string id, name, args;
};

struct Parsed {
  std::string reasoning, content;
  std::vector<Call> calls;
  FinishReason finish = FinishReason::kStop;
  bool malformed = false;
};

inline Parsed Collect(const std::vector<Event>& events) {
  Parsed p;
  for (const Event& e : events) {
    switch (e.kind) {
      case Event::Kind::kReasoning: p.reasoning += e.text; break;
      case Event::Kind::kContent: p.content += e.text; break;
      case Event::Kind::kToolCallStart: p.calls.push_back({e.tool_id, e.tool_name, ""}); break;
      case Event::Kind::kToolCallArgs: p.calls.back().args += e.text; break;
      case Event::Kind::kToolCallEnd: break;
      case Event::Kind::kFinish:
        p.finish = e.finish;
        p.malformed = e.malformed;
        break;
    }
  }
  return p;
}

// Runs `ids` whole, token by token and split at every point; expects the same joined events
// every time and the invariants to hold. Returns the joined events of the whole run.
inline std::vector<Event> RunAllChunkings(const Runner& r, std::span<const TokenId> ids, FinishReason finish,
                                          const std::string& what) {
  const std::vector<Event> whole = Normalize(r.RunWhole(ids, finish));
  EXPECT_EQ(CheckInvariants(whole), "") << what << "\n" << Describe(whole);
  const std::vector<Event> by_token = r.RunTokenByToken(ids, finish);
  EXPECT_EQ(CheckInvariants(by_token), "") << what << " (token by token)\n" << Describe(by_token);
  EXPECT_TRUE(SameEvents(Normalize(by_token), whole))
      << what << ": token-by-token differs\nwhole:\n" << Describe(whole) << "token by token:\n"
      << Describe(Normalize(by_token));
  for (size_t cut = 1; cut < ids.size(); ++cut) {
    const std::vector<Event> split = r.Run(ids, {cut}, finish);
    if (!SameEvents(Normalize(split), whole)) {
      ADD_FAILURE() << what << ": split at token " << cut << " differs\nwhole:\n" << Describe(whole) << "split:\n"
                    << Describe(Normalize(split));
      break;
    }
  }
  return whole;
}

}  // namespace ladle::frontend::parser_test
