// The delimiter tables of each model version: which markers exist, whether each is a control
// token (one symbol, matched by id) or text (matched byte by byte), and which of them every
// grammar state listens for. Built once per version and shared.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "output_parser_impl.h"

namespace ladle::frontend::parser {
namespace {

constexpr std::string_view kDsmlText = "｜DSML｜";

struct Builder {
  const SpecialTokens& st;
  bool dsml_token = false;

  // A marker spelled as text, with its ｜DSML｜ part as one symbol when that is a token.
  std::vector<Symbol> Text(std::string_view s) const {
    std::vector<Symbol> out;
    for (size_t i = 0; i < s.size();) {
      if (dsml_token && s.substr(i, kDsmlText.size()) == kDsmlText) {
        out.push_back(kSymDsml);
        i += kDsmlText.size();
      } else {
        out.push_back(static_cast<uint8_t>(s[i++]));
      }
    }
    return out;
  }
};

struct DelimList {
  std::vector<std::vector<Symbol>> syms;
  std::vector<Delim> kinds;
  void Add(Delim d, std::vector<Symbol> s) {
    syms.push_back(std::move(s));
    kinds.push_back(d);
  }
};

Result<std::shared_ptr<const Grammar>> Build(ModelVersion v, const SpecialTokens& st) {
  auto g = std::make_shared<Grammar>();
  g->dsml = v == ModelVersion::kV32 || v == ModelVersion::kV4;
  g->v3_fence = v == ModelVersion::kV3 || v == ModelVersion::kR1;
  g->think_is_token = st.think.has_value() && st.end_think.has_value();
  g->dsml_is_token = g->dsml && st.dsml.has_value();
  Builder b{st, g->dsml_is_token};

  if (g->think_is_token) {
    g->controls.push_back({*st.think, kSymThink});
    g->controls.push_back({*st.end_think, kSymEndThink});
  }
  // Control tokens every state listens for (one symbol each; ｜DSML｜ is excluded because it
  // only means something inside a DSML tag).
  DelimList singles;
  if (g->think_is_token) {
    singles.Add(Delim::kThink, {kSymThink});
    singles.Add(Delim::kEndThink, {kSymEndThink});
  }
  if (!g->dsml) {
    const std::pair<std::optional<tokenizer::TokenId>, std::pair<Symbol, Delim>> markers[] = {
        {st.tool_calls_begin, {kSymCallsBegin, Delim::kCallsBegin}},
        {st.tool_calls_end, {kSymCallsEnd, Delim::kCallsEnd}},
        {st.tool_call_begin, {kSymCallBegin, Delim::kCallBegin}},
        {st.tool_call_end, {kSymCallEnd, Delim::kCallEnd}},
        {st.tool_sep, {kSymSep, Delim::kSep}},
    };
    for (const auto& [id, sd] : markers) {
      if (!id) return InvalidArgument(fmt::format("{} has no tool-call marker tokens", ModelVersionName(v)));
      g->controls.push_back({*id, sd.first});
      singles.Add(sd.second, {sd.first});
    }
  } else if (g->dsml_is_token) {
    g->controls.push_back({*st.dsml, kSymDsml});
  }

  auto with_singles = [&] { return singles; };
  std::array<DelimList, kNumCtx> lists;
  for (auto& l : lists) l = with_singles();

  // <think> / </think> as text where the version has no tokens for them (V3, R1): only the
  // reasoning and content states look for them; inside a tool call they are argument text.
  if (!g->think_is_token) {
    for (Ctx c : {kCtxReasoning, kCtxContent}) {
      lists[c].Add(Delim::kThink, b.Text("<think>"));
      lists[c].Add(Delim::kEndThink, b.Text("</think>"));
    }
  }

  if (g->v3_fence) {
    lists[kCtxV3Name].Add(Delim::kFenceOpen, b.Text("\n```json\n"));
    lists[kCtxV3Args].Add(Delim::kFenceClose, b.Text("\n```"));
  }

  if (g->dsml) {
    const auto sec_open = {b.Text("<｜DSML｜function_calls>"), b.Text("<｜DSML｜tool_calls>")};
    const auto sec_close = {b.Text("</｜DSML｜function_calls>"), b.Text("</｜DSML｜tool_calls>")};
    auto add_open = [&](DelimList& l) {
      for (const auto& s : sec_open) l.Add(Delim::kSectionOpen, s);
    };
    auto add_close = [&](DelimList& l) {
      for (const auto& s : sec_close) l.Add(Delim::kSectionClose, s);
    };
    const auto invoke_open = b.Text("<｜DSML｜invoke name=\"");
    const auto invoke_close = b.Text("</｜DSML｜invoke>");
    const auto param_open = b.Text("<｜DSML｜parameter name=\"");
    const auto param_close = b.Text("</｜DSML｜parameter>");

    // Content: a wrapper or a bare invoke starts tool calls. Where ｜DSML｜ is a token, stray
    // closers are parser-owned syntax too and are dropped; as text they stay prose.
    add_open(lists[kCtxContent]);
    lists[kCtxContent].Add(Delim::kInvokeOpen, invoke_open);
    if (g->dsml_is_token) {
      add_close(lists[kCtxContent]);
      lists[kCtxContent].Add(Delim::kInvokeClose, invoke_close);
      lists[kCtxContent].Add(Delim::kParamOpen, param_open);
      lists[kCtxContent].Add(Delim::kParamClose, param_close);
      // A tool call opened by id inside reasoning ends the reasoning (models sometimes skip
      // </think>); text that merely looks like one stays reasoning.
      add_open(lists[kCtxReasoning]);
      lists[kCtxReasoning].Add(Delim::kInvokeOpen, invoke_open);
    }

    DelimList& sec = lists[kCtxSection];
    add_open(sec);
    add_close(sec);
    sec.Add(Delim::kInvokeOpen, invoke_open);
    sec.Add(Delim::kInvokeClose, invoke_close);
    sec.Add(Delim::kParamClose, param_close);

    for (Ctx c : {kCtxDsmlTag, kCtxDsmlBody}) {
      DelimList& l = lists[c];
      add_open(l);
      add_close(l);
      l.Add(Delim::kInvokeOpen, invoke_open);
      l.Add(Delim::kInvokeClose, invoke_close);
      l.Add(Delim::kParamOpen, param_open);
      l.Add(Delim::kParamClose, param_close);
    }
    lists[kCtxDsmlTag].Add(Delim::kTagEnd, b.Text("\">"));

    // A value ends only at a closer: the fewer delimiters a value listens for, the less value
    // text that quotes DSML (e.g. a file about DSML) can be cut short.
    DelimList& val = lists[kCtxDsmlValue];
    add_close(val);
    val.Add(Delim::kInvokeClose, invoke_close);
    val.Add(Delim::kParamClose, param_close);
  }

  for (int c = 0; c < kNumCtx; ++c) {
    auto set = DelimiterSet::Build(std::move(lists[c].syms));
    if (!set.ok()) return Internal(fmt::format("parser grammar {} state {}: {}", ModelVersionName(v), c,
                                               set.status().ToString()));
    g->ctx[c].set = std::move(set).value();
    g->ctx[c].kinds = std::move(lists[c].kinds);
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

std::string Key(ModelVersion v, const SpecialTokens& st) {
  auto id = [](const std::optional<tokenizer::TokenId>& t) { return t ? static_cast<int64_t>(*t) : -1; };
  return fmt::format("{}:{}:{}:{}:{}:{}:{}:{}:{}", static_cast<int>(v), id(st.think), id(st.end_think),
                     id(st.tool_calls_begin), id(st.tool_calls_end), id(st.tool_call_begin), id(st.tool_call_end),
                     id(st.tool_sep), id(st.dsml));
}

}  // namespace

Result<std::shared_ptr<const Grammar>> GetGrammar(ModelVersion v, const SpecialTokens& st) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Grammar>> cache;
  const std::string key = Key(v, st);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  LADLE_ASSIGN_OR_RETURN(auto g, Build(v, st));
  cache.emplace(key, g);
  return g;
}

}  // namespace ladle::frontend::parser
