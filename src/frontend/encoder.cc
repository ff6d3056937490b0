// RenderPrompt dispatch and EncodePrompt: the version-independent half of the encoders.
#include "ladle/frontend/encoder.h"

#include <fmt/format.h>

#include <algorithm>

#include "encoder_common.h"

namespace ladle::frontend {

Result<Prompt> RenderPrompt(const Request& request, ModelVersion version, const RenderOptions& options) {
  switch (version) {
    case ModelVersion::kV3: return encoder::RenderV3(request, /*r1=*/false, options);
    case ModelVersion::kR1: return encoder::RenderV3(request, /*r1=*/true, options);
    case ModelVersion::kV31: return encoder::RenderV31(request, options);
    case ModelVersion::kV32: return encoder::RenderV32(request, options);
    case ModelVersion::kV4: return encoder::RenderV4(request, options);
  }
  return InvalidArgument("unknown model version");
}

Result<EncodedPrompt> EncodePrompt(const Prompt& prompt, const tokenizer::Tokenizer& version_tok,
                                   const tokenizer::EncodeOptions& options) {
  std::vector<tokenizer::Segment> segments;
  segments.reserve(prompt.pieces.size());
  // A prompt uses a handful of distinct control ids; check each once against the tokenizer so
  // a wrong view (e.g. the bare V3 file for a V3.2 prompt) fails loudly instead of silently
  // placing a placeholder token where "<think>" belongs.
  std::vector<tokenizer::TokenId> checked;
  const std::string_view text = prompt.text;
  for (const PromptPiece& p : prompt.pieces) {
    const std::string_view piece = text.substr(p.begin, p.size);
    if (p.kind == PromptPiece::Kind::kText) {
      segments.push_back(tokenizer::Segment::Text(piece));
      continue;
    }
    if (std::find(checked.begin(), checked.end(), p.id) == checked.end()) {
      auto spelled = version_tok.IsAddedToken(p.id) ? version_tok.IdToToken(p.id) : std::nullopt;
      if (!spelled || *spelled != piece) {
        return Status(StatusCode::kFailedPrecondition,
                      fmt::format("tokenizer does not match model version {}: id {} should be the added token '{}' "
                                  "(use TokenizerForVersion)",
                                  ModelVersionName(prompt.version), p.id, piece));
      }
      checked.push_back(p.id);
    }
    segments.push_back(tokenizer::Segment::Special(p.id));
  }
  LADLE_ASSIGN_OR_RETURN(tokenizer::EncodedSegments enc, version_tok.EncodeSegments(segments, options));
  EncodedPrompt out;
  out.ids = std::move(enc.ids);
  out.special_positions = std::move(enc.special_positions);
  out.text = prompt.text;
  out.ends_in_thinking = prompt.ends_in_thinking;
  for (const PromptImage& im : prompt.images) {
    if (im.first_special + static_cast<size_t>(im.tokens) > out.special_positions.size() || im.tokens <= 0) {
      return Internal("a prompt image's placeholders are not among its control tokens");
    }
    out.images.push_back({out.special_positions[im.first_special], static_cast<uint32_t>(im.tokens), im.image_index});
  }
  return out;
}

std::string_view PromptText(const Prompt& prompt) { return prompt.text; }

}  // namespace ladle::frontend
