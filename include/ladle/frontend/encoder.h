// Per-version DeepSeek prompt encoders: one conversation (conversation.h) → the exact prompt a
// DeepSeek model version expects, as pieces of text and control tokens placed by id.
//
// Two steps, so the text can be checked byte for byte and the ids stay injection-proof:
//   RenderPrompt  — applies the version's reference rules (chat template or DeepSeek's own
//                   encoding script) and returns a Prompt: the full text plus, for every piece,
//                   whether it is text or a control token. Control tokens come only from the
//                   encoder itself; anything a user, a tool or a model argument wrote is text.
//   EncodePrompt  — tokenizes a Prompt with the version's tokenizer view
//                   (TokenizerForVersion): text pieces as plain BPE, control tokens by id, so
//                   "<｜User｜>" typed by a user stays ordinary tokens.
// The rules and their sources are in docs/prompt_formats.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/model_version.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::frontend {

// One piece of a rendered prompt. Adjacent text is always merged into one piece, because BPE
// must see the whole run between two control tokens (as Hugging Face does) to give the same ids.
struct PromptPiece {
  enum class Kind : uint8_t { kText, kSpecial };
  Kind kind = Kind::kText;
  size_t begin = 0;  // byte range in Prompt::text; for kSpecial, the token's spelling
  size_t size = 0;
  tokenizer::TokenId id = 0;  // kSpecial only
};

// An image's run of placeholder control tokens in a rendered prompt.
struct PromptImage {
  size_t first_special = 0;  // ordinal of its first placeholder among the prompt's kSpecial pieces
  int tokens = 0;            // placeholders in the run
  int image_index = -1;      // ImagePart::index
};

struct Prompt {
  ModelVersion version = ModelVersion::kV32;
  std::string text;                 // the whole prompt, control tokens spelled out
  std::vector<PromptPiece> pieces;  // in order, covering `text` exactly
  // True when the prompt ends with "<think>" open, i.e. the model's output starts inside its
  // reasoning (the output parser's initial phase). False after "</think>", after a plain
  // "<｜Assistant｜>", and after tool results in versions that hand back without a think tag.
  bool ends_in_thinking = false;
  std::vector<PromptImage> images;  // in prompt order (which need not be the request's order)
};

struct RenderOptions {
  // Prepend <｜begin▁of▁sentence｜> (every reference does for a fresh conversation).
  bool add_bos = true;
  // V3.2 and V4: drop reasoning (and, as the references do, developer turns) from before the
  // last user turn in thinking mode. DeepSeek's encoders default to true.
  bool drop_thinking = true;
};

// Renders `request` for `version`. Fails with kInvalidArgument when the conversation breaks a
// rule of the version (e.g. a tool result with no matching call for V3.2, tool-call arguments
// that are not a JSON object for the DSML versions, an empty developer message) and with
// kUnsupported for content the version cannot take (images, in a version without an image token;
// V4 places one <｜image｜> per patch group, ImagePart::placeholder_tokens of them).
Result<Prompt> RenderPrompt(const Request& request, ModelVersion version, const RenderOptions& options = {});

struct EncodedPrompt {
  std::vector<tokenizer::TokenId> ids;
  std::vector<uint32_t> special_positions;  // index in `ids` of every control token placed
  std::string text;                         // == PromptText(prompt)
  bool ends_in_thinking = false;
  struct Image {
    uint32_t pos = 0;     // index in `ids` of the first placeholder
    uint32_t tokens = 0;  // consecutive placeholders
    int image_index = -1; // ImagePart::index
  };
  std::vector<Image> images;  // in prompt order
};

// Tokenizes `prompt` with `version_tok`, which must be TokenizerForVersion(base, prompt.version):
// every control token of the prompt must be an added token of `version_tok` spelled the same
// (kFailedPrecondition otherwise, e.g. when handed the plain V3 file for a V3.2 prompt, where
// 128798 is a placeholder and not "<think>").
Result<EncodedPrompt> EncodePrompt(const Prompt& prompt, const tokenizer::Tokenizer& version_tok,
                                   const tokenizer::EncodeOptions& options = {});

// The prompt as text (control tokens spelled out), for printing and golden comparisons.
std::string_view PromptText(const Prompt& prompt);

}  // namespace ladle::frontend
