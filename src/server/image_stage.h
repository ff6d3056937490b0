// The session's side of the image stage (vision/image_pipeline.h): which parts of an adapted
// request are images, and how the prepared images come back into the prompt and the engine
// request. Internal to the server.
#pragma once

#include <vector>

#include "ladle/engine/engine.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/encoder.h"
#include "ladle/vision/image_pipeline.h"

namespace ladle::server {

// Every image part in request order, numbered (ImagePart::index) so the rendered prompt can
// say which is which, each named as the API names it ("messages[2].content[1]",
// "input[0].content[1]").
std::vector<vision::ImageRef> ImageRefs(frontend::Api api, frontend::Request* request);

// Writes each image's placeholder count into its part (by index).
void SetPlaceholders(const std::vector<vision::PreparedImage>& images, frontend::Request* request);

// The engine's view: each placeholder run of the encoded prompt with its image's embeddings
// and content hash.
std::vector<engine::PromptImage> EngineImages(const frontend::EncodedPrompt& encoded,
                                              const std::vector<vision::PreparedImage>& images);

// Prometheus text for the image stage and its encoder workers (appended to /metrics).
void AppendVisionMetrics(vision::ImagePipeline& images, std::string* out);

}  // namespace ladle::server
