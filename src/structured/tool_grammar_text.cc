// Free text that avoids markup, JSON arguments (through the schema compiler), and ordered
// optional items: the building blocks of the tool-call grammars.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ladle/tokenizer/tokenizer.h"
#include "tool_grammar_internal.h"


namespace ladle::structured::tool_grammar {

using grammar::CodeRange;
using grammar::kUnbounded;

namespace {

// Decodes valid UTF-8 (the markers are compile-time constants and tool-provided text that was
// already validated); stops at the first invalid byte.
std::vector<uint32_t> CodePointsOf(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) break;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string Utf8(uint32_t cp) {
  std::string s;
  tokenizer::AppendUtf8(s, cp);
  return s;
}

// A trie of the markers' code points after their leading '<'.
struct TrieNode {
  std::map<uint32_t, int> next;
  bool terminal = false;
};

}  // namespace

ExprId AnyText(GrammarBuilder& b) { return b.Star(b.AnyCodePoint()); }

Result<ExprId> TextAvoiding(GrammarBuilder& b, const std::vector<std::string>& avoid) {
  if (avoid.empty()) return AnyText(b);
  std::vector<TrieNode> trie(1);
  for (const std::string& m : avoid) {
    const std::vector<uint32_t> cps = CodePointsOf(m);
    if (cps.size() < 2 || cps[0] != '<' || std::count(cps.begin(), cps.end(), uint32_t{'<'}) != 1) {
      return InvalidArgument(fmt::format("text-avoiding marker '{}' must start with its only '<'", m));
    }
    int at = 0;
    for (size_t i = 1; i < cps.size(); ++i) {
      auto it = trie[at].next.find(cps[i]);
      if (it == trie[at].next.end()) {
        trie.push_back({});
        const int id = static_cast<int>(trie.size()) - 1;
        trie[at].next.emplace(cps[i], id);
        at = id;
      } else {
        at = it->second;
      }
    }
    trie[at].terminal = true;
  }
  // Because '<' opens every marker and appears nowhere else in them, a partial match can only
  // be broken (or completed) by what follows it, and every '<' restarts matching. So the text
  // is [^<]* ("<" R)*, where R at a trie node is: stop (the next thing is '<' or the end), or
  // a code point that continues no marker (nor '<') followed by [^<]*, or a code point that
  // continues a marker without completing it, then R of that node.
  const ExprId not_lt = b.CodePoints({{'<', '<'}}, /*negate=*/true);
  const ExprId plain = b.Star(not_lt);
  auto r = [&](auto&& self, int node) -> ExprId {
    std::vector<CodeRange> stop = {{'<', '<'}};
    std::vector<ExprId> alts = {b.Empty()};
    for (const auto& [cp, child] : trie[node].next) {
      stop.push_back({cp, cp});
      if (trie[child].terminal) continue;
      alts.push_back(b.Seq({b.Literal(Utf8(cp)), self(self, child)}));
    }
    alts.push_back(b.Seq({b.CodePoints(stop, /*negate=*/true), plain}));
    return b.Alt(alts);
  };
  return b.Seq({plain, b.Star(b.Seq({b.Literal("<"), r(r, 0)}))});
}

ExprId JoinedItems(GrammarBuilder& b, const std::vector<ExprId>& items, const std::vector<bool>& required, ExprId sep) {
  const size_t n = items.size();
  // tail[j]: items j.. each preceded by `sep`, optional ones optional.
  std::vector<ExprId> tail(n + 1);
  tail[n] = b.Empty();
  for (size_t j = n; j-- > 0;) {
    const ExprId with_sep = b.Seq({sep, items[j]});
    tail[j] = b.Seq({required[j] ? with_sep : b.Optional(with_sep), tail[j + 1]});
  }
  // The first present item is j; every item before it must be optional.
  std::vector<ExprId> firsts;
  bool all_optional = true;
  for (size_t j = 0; j < n; ++j) {
    firsts.push_back(b.Seq({items[j], tail[j + 1]}));
    if (required[j]) {
      all_optional = false;
      break;
    }
  }
  if (all_optional) firsts.push_back(b.Empty());
  return b.Alt(firsts);
}

// ---------------------------------------------------------------------------------------------
// JSON

Result<ExprId> SchemaJson(GrammarBuilder& b, const json::Value& schema, const grammar::JsonSchemaOptions& opts,
                          std::string_view path, grammar::CompileReport* report) {
  grammar::CompileReport local;
  LADLE_ASSIGN_OR_RETURN(ExprId e, grammar::AddJsonSchema(b, schema, opts, &local));
  if (report != nullptr) {
    for (grammar::Approximation& a : local.approximations) {
      report->approximations.push_back({std::string(path) + a.path, std::move(a.what)});
    }
  }
  return e;
}

Result<ExprId> AnyJsonValue(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) {
  return grammar::AddJsonSchema(b, json::Value::Bool(true), opts, nullptr);
}

Result<ExprId> AnyJsonObject(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) {
  json::Value s = json::Value::MakeObject();
  s.Set("type", json::Value::String("object"));
  return grammar::AddJsonSchema(b, s, opts, nullptr);
}

Result<ExprId> EmptyJsonObject(GrammarBuilder& b, const grammar::JsonSchemaOptions& opts) {
  json::Value s = json::Value::MakeObject();
  s.Set("type", json::Value::String("object"));
  s.Set("additionalProperties", json::Value::Bool(false));
  return grammar::AddJsonSchema(b, s, opts, nullptr);
}

Status CheckToolName(std::string_view name) {
  // What the output parser accepts as a name (tool_call_formats.cc): no whitespace, no quote,
  // angle bracket, backslash, backtick, brace or bracket, no control byte, at most 256 bytes.
  if (name.empty() || name.size() > 256) {
    return InvalidArgument(fmt::format("tool name '{}' must have 1 to 256 bytes", name));
  }
  if (!tokenizer::IsValidUtf8(name)) return InvalidArgument("a tool name is not valid UTF-8");
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) continue;
    if (c <= 0x20 || c == 0x7F || std::string_view("\"<>\\`{}[]").find(ch) != std::string_view::npos) {
      return InvalidArgument(fmt::format("tool name '{}' has a character the tool-call syntax cannot carry", name));
    }
  }
  return Status::Ok();
}

}  // namespace ladle::structured::tool_grammar
