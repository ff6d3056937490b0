#include "ladle/frontend/model_version.h"

#include <fmt/format.h>

#include <vector>

namespace ladle::frontend {

Result<ModelVersion> ParseModelVersion(std::string_view name) {
  if (name == "v3") return ModelVersion::kV3;
  if (name == "r1") return ModelVersion::kR1;
  if (name == "v3.1" || name == "v3.2-exp") return ModelVersion::kV31;
  if (name == "v3.2") return ModelVersion::kV32;
  if (name == "v4") return ModelVersion::kV4;
  return InvalidArgument(fmt::format("unknown model version '{}' (v3, r1, v3.1, v3.2-exp, v3.2, v4)", name));
}

std::string_view ModelVersionName(ModelVersion v) {
  switch (v) {
    case ModelVersion::kV3: return "v3";
    case ModelVersion::kR1: return "r1";
    case ModelVersion::kV31: return "v3.1";
    case ModelVersion::kV32: return "v3.2";
    case ModelVersion::kV4: return "v4";
  }
  return "unknown";
}

namespace {

// Ids from DeepSeek-V3's tokenizer.json (the file every later version extends).
SpecialTokens BaseTokens() {
  SpecialTokens t;
  t.tool_calls_begin = 128806;
  t.tool_calls_end = 128807;
  t.tool_call_begin = 128808;
  t.tool_call_end = 128809;
  t.tool_outputs_begin = 128810;
  t.tool_outputs_end = 128811;
  t.tool_output_begin = 128812;
  t.tool_output_end = 128813;
  t.tool_sep = 128814;
  return t;
}

// V3.1 and later re-purpose placeholders 128798/128799 as <think>/</think>
// (DeepSeek-V3.1 tokenizer.json, added_tokens).
SpecialTokens ThinkingTokens() {
  SpecialTokens t = BaseTokens();
  t.think = 128798;
  t.end_think = 128799;
  return t;
}

}  // namespace

const SpecialTokens& SpecialTokensFor(ModelVersion v) {
  static const SpecialTokens kV3 = BaseTokens();
  static const SpecialTokens kV31 = ThinkingTokens();
  switch (v) {
    case ModelVersion::kV3:
    case ModelVersion::kR1:
      return kV3;
    default:
      return kV31;
  }
}

Result<tokenizer::Tokenizer> TokenizerForVersion(const tokenizer::Tokenizer& base, ModelVersion v) {
  const SpecialTokens& st = SpecialTokensFor(v);
  std::vector<tokenizer::AddedToken> overrides;
  if (st.think) overrides.push_back({*st.think, "<think>", false, true});
  if (st.end_think) overrides.push_back({*st.end_think, "</think>", false, true});
  if (st.dsml) overrides.push_back({*st.dsml, "｜DSML｜", false, true});
  if (overrides.empty()) return base;
  return base.WithAddedTokens(overrides);
}

}  // namespace ladle::frontend
