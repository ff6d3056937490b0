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
      // The adapters record the part's path as the client wrote it; the conversation's own
      // numbering is the fallback.
      std::string where = content[c].image.where;
      if (where.empty()) where = fmt::format("{}[{}].content[{}]", field, m, c);
      refs.push_back({content[c].image.url, std::move(where)});
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

void AppendVisionMetrics(vision::ImagePipeline& images, std::string* out) {
  const vision::PipelineStats p = images.GetStats();
  const vision::EncoderStats e = images.encoder().GetStats();
  auto counter = [&](const char* name, const char* help, double v) {
    *out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
  };
  counter("ladle_vision_requests_total", "Requests that went through the image stage.", static_cast<double>(p.requests));
  counter("ladle_vision_images_total", "Images through the stage (prepared for generation, or measured for count_tokens).",
          static_cast<double>(p.images));
  counter("ladle_vision_failed_requests_total", "Requests whose images failed (a 400 naming the part, or an encoder error).",
          static_cast<double>(p.failed));
  counter("ladle_vision_fetched_total", "Images fetched from http(s) URLs.", static_cast<double>(p.fetched));
  counter("ladle_vision_encode_seconds_total", "Time the encoder workers spent encoding.", e.encode_ms_total / 1000.0);
  counter("ladle_vision_patches_total", "Vision patches encoded.", static_cast<double>(e.patches));
  counter("ladle_vision_embedding_cache_hits_total", "Images whose embeddings came from the cache (no decode or encode).",
          static_cast<double>(p.cache_hits));
  counter("ladle_vision_embedding_cache_misses_total", "Images looked up in the embedding cache and not found.",
          static_cast<double>(p.cache_misses));
  *out += fmt::format("# HELP ladle_vision_embedding_cache_bytes Embedding cache size.\n"
                      "# TYPE ladle_vision_embedding_cache_bytes gauge\nladle_vision_embedding_cache_bytes {}\n",
                      p.cache_bytes);
  *out += fmt::format("# HELP ladle_vision_in_flight Requests in the image stage.\n# TYPE ladle_vision_in_flight gauge\n"
                      "ladle_vision_in_flight {}\n",
                      p.in_flight);
  *out += "# HELP ladle_vision_worker_patches_in_flight Image patches queued or encoding per encoder worker.\n"
          "# TYPE ladle_vision_worker_patches_in_flight gauge\n";
  for (size_t w = 0; w < e.patches_in_flight.size(); ++w) {
    *out += fmt::format("ladle_vision_worker_patches_in_flight{{worker=\"{}\"}} {}\n", w, e.patches_in_flight[w]);
  }
  *out += "# HELP ladle_vision_worker_images_total Images each encoder worker has served.\n"
          "# TYPE ladle_vision_worker_images_total counter\n";
  for (size_t w = 0; w < e.images_per_worker.size(); ++w) {
    *out += fmt::format("ladle_vision_worker_images_total{{worker=\"{}\"}} {}\n", w, e.images_per_worker[w]);
  }
}

}  // namespace ladle::server
