// DeepSeek model versions and their control tokens. The version is chosen by configuration
// (--model-version), never guessed from a model name.
#pragma once

#include <optional>
#include <string_view>

#include "ladle/core/result.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::frontend {

enum class ModelVersion : uint8_t {
  kV3,   // DeepSeek-V3 (chat template of tokenizer_config.json)
  kR1,   // DeepSeek-R1 (V3 base, reasoning in <think>)
  kV31,  // DeepSeek-V3.1 and V3.2-Exp (thinking / non-thinking, tool calls with markers)
  kV32,  // DeepSeek-V3.2 (DSML <｜DSML｜function_calls>)
  kV4,   // DeepSeek-V4 (DSML <｜DSML｜tool_calls>)
};

// "v3", "r1", "v3.1" (also "v3.2-exp"), "v3.2", "v4".
Result<ModelVersion> ParseModelVersion(std::string_view name);
std::string_view ModelVersionName(ModelVersion v);

// Control-token ids of a version. A field is nullopt where the version has no such token
// (then the text form, if any, is ordinary text to that version).
struct SpecialTokens {
  tokenizer::TokenId bos = 0;  // <｜begin▁of▁sentence｜>
  tokenizer::TokenId eos = 1;  // <｜end▁of▁sentence｜>
  tokenizer::TokenId user = 128803;
  tokenizer::TokenId assistant = 128804;
  std::optional<tokenizer::TokenId> think;      // <think>
  std::optional<tokenizer::TokenId> end_think;  // </think>
  std::optional<tokenizer::TokenId> tool_calls_begin, tool_calls_end, tool_call_begin, tool_call_end,
      tool_sep, tool_outputs_begin, tool_outputs_end, tool_output_begin, tool_output_end;
  std::optional<tokenizer::TokenId> dsml;  // ｜DSML｜
  std::optional<tokenizer::TokenId> image;  // <｜image｜>: one per image patch group (vision versions)
};

const SpecialTokens& SpecialTokensFor(ModelVersion v);

// The tokenizer as `v` sees it: the DeepSeek V3 tokenizer.json with the version's
// re-purposed added tokens (e.g. 128798 = "<think>" from V3.1 on) applied.
Result<tokenizer::Tokenizer> TokenizerForVersion(const tokenizer::Tokenizer& base, ModelVersion v);

}  // namespace ladle::frontend
