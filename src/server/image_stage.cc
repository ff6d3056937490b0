#include "image_stage.h"

#include <fmt/format.h>

namespace ladle::server {

std::vector<vision::ImageRef> ImageRefs(frontend::Api api, frontend::Request* request) {
  std::vector<vision::ImageRef> refs;
  const char* field = api == frontend::Api::kResponses ? "input" : "messages";
  for (size_t m = 0; m < request->messages.size(); ++m) {
    auto& content = request->messages[m].content;
    for (size_t c = 0; c < content.size(); ++c) {
      if (content[c].kind != frontend::ContentPart::Kind::kImage) continue;
      content[c].image.index = static_cast<int>(refs.size());
      refs.push_back({content[c].image.url, fmt::format("{}[{}].content[{}]", field, m, c)});
    }
  }
  return refs;
}

void SetPlaceholders(const std::vector<vision::PreparedImage>& images, frontend::Request* request) {
  for (auto& message : request->messages) {
    for (auto& part : message.content) {
      if (part.kind != frontend::ContentPart::Kind::kImage) continue;
      const int i = part.image.index;
      if (i < 0 || i >= static_cast<int>(images.size())) continue;
      part.image.placeholder_tokens = images[static_cast<size_t>(i)].groups;
      part.image.width = images[static_cast<size_t>(i)].width;
      part.image.height = images[static_cast<size_t>(i)].height;
    }
  }
}

std::vector<engine::PromptImage> EngineImages(const frontend::EncodedPrompt& encoded,
                                              const std::vector<vision::PreparedImage>& images) {
  std::vector<engine::PromptImage> out;
  for (const auto& run : encoded.images) {
    if (run.image_index < 0 || run.image_index >= static_cast<int>(images.size())) continue;
    const vision::PreparedImage& im = images[static_cast<size_t>(run.image_index)];
    engine::PromptImage p;
    p.pos = run.pos;
    p.tokens = static_cast<int32_t>(run.tokens);
    p.hash_hi = im.hash_hi;
    p.hash_lo = im.hash_lo;
    p.embeds = im.embeds;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace ladle::server
