#include "vision_common.h"

#include "ladle/core/logging.h"
#include "ladle/engine/vision_model.h"
#include "ladle/vision/image_encoder.h"

namespace ladle::app {

void AddVisionFlags(CLI::App* cmd, VisionOpts* o) {
  cmd->add_option("--vision-workers", o->vision_workers, "in-process vision encoder workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--vision-policy", o->vision_policy,
                  "which encoder worker takes an image: fewest-patches (the recipe), round-robin, fewest-images")
      ->capture_default_str()
      ->check(CLI::IsMember({"fewest-patches", "round-robin", "fewest-images"}));
  cmd->add_flag("--allow-private-image-urls", o->allow_private_image_urls,
                "fetch image URLs that resolve to loopback or private addresses (off: the SSRF guard refuses them)");
  cmd->add_option("--image-max-bytes", o->image_max_bytes, "largest encoded image")->capture_default_str();
  cmd->add_option("--image-max-pixels", o->image_max_pixels, "largest image (width × height, as declared)")
      ->capture_default_str();
  cmd->add_option("--max-images-per-request", o->max_images, "images in one request")->capture_default_str();
  cmd->add_option("--max-image-patches", o->max_image_patches, "vision patches over all of a request's images")
      ->capture_default_str();
  cmd->add_option("--image-fetch-timeout-ms", o->image_fetch_timeout_ms, "fetching one image URL, redirects included")
      ->capture_default_str();
  cmd->add_option("--image-max-redirects", o->image_max_redirects, "redirects followed for an image URL")
      ->capture_default_str();
  cmd->add_option("--image-threads", o->image_threads, "threads fetching, decoding and resizing images")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

Result<std::shared_ptr<vision::ImagePipeline>> BuildImagePipeline(const VisionOpts& o, const engine::ModelConfig& model,
                                                                  const std::string& model_dir) {
  if (!engine::VisionEnabled(model)) {
    LADLE_LOG_INFO("serve.vision enabled=false reason=\"the model has no vision tower\"");
    return std::shared_ptr<vision::ImagePipeline>();
  }
  LADLE_ASSIGN_OR_RETURN(auto tower, engine::VisionModel::Create(model, model_dir));
  std::shared_ptr<const engine::VisionModel> shared(std::move(tower));
  vision::LocalEncoderOptions lo;
  lo.workers = o.vision_workers;
  lo.policy = o.vision_policy;
  LADLE_ASSIGN_OR_RETURN(auto encoder, vision::MakeLocalEncoder(shared, lo));
  vision::ImagePipelineOptions po;
  po.image.max_bytes = o.image_max_bytes;
  po.image.max_pixels = o.image_max_pixels;
  po.fetch.max_bytes = o.image_max_bytes;
  po.fetch.timeout = std::chrono::milliseconds(o.image_fetch_timeout_ms);
  po.fetch.max_redirects = o.image_max_redirects;
  po.fetch.allow_private = o.allow_private_image_urls;
  po.max_images = o.max_images;
  po.max_total_patches = o.max_image_patches;
  po.io_threads = o.image_threads;
  LADLE_ASSIGN_OR_RETURN(auto pipeline, vision::ImagePipeline::Create(po, vision::PreprocessFor(*shared),
                                                                      std::shared_ptr<vision::ImageEncoder>(std::move(encoder))));
  LADLE_LOG_INFO("serve.vision enabled=true workers={} policy={} patch={} merge={} max_side={} allow_private_urls={}",
                 o.vision_workers, o.vision_policy, model.vision_patch, model.vision_merge, model.vision_max_side,
                 o.allow_private_image_urls);
  return std::shared_ptr<vision::ImagePipeline>(std::move(pipeline));
}

}  // namespace ladle::app
