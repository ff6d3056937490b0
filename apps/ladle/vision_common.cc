#include "vision_common.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "ladle/cluster/vision_rpc.h"
#include "ladle/core/logging.h"
#include "ladle/engine/vision_model.h"
#include "ladle/vision/image_encoder.h"
#include "serve_common.h"

namespace ladle::app {

void AddVisionFlags(CLI::App* cmd, VisionOpts* o) {
  cmd->add_option("--vision-workers", o->vision_workers, "in-process vision encoder workers")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--vision-policy", o->vision_policy,
                  "which encoder worker takes an image: fewest-patches (the recipe), round-robin, fewest-images")
      ->capture_default_str()
      ->check(CLI::IsMember({"fewest-patches", "round-robin", "fewest-images"}));
  cmd->add_option("--vision-encoder", o->vision_encoders,
                  "a remote `ladle vision-encoder` machine, host:port (repeatable): images go to one of them at "
                  "random instead of in-process workers")
      ->take_all()
      ->allow_extra_args(false)
      ->delimiter(',');
  cmd->add_option("--vision-encoder-timeout-ms", o->vision_encoder_timeout_ms,
                  "deadline of one image on one remote vision encoder (then it is re-routed)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  cmd->add_option("--vision-encoder-cooldown-ms", o->vision_encoder_cooldown_ms,
                  "a remote vision encoder that failed is picked again after this")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}));
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
  cmd->add_option("--image-cache-mb", o->image_cache_mb,
                  "embeddings of recent image files kept (an image sent again skips decode and encode); 0: off")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--image-ca-file", o->image_ca_file,
                  "PEM file of extra CA certificates trusted for https image URLs (the system's CAs always are)");
  cmd->add_option("--image-threads", o->image_threads, "threads fetching, decoding and resizing images")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
}

namespace {

// The remote machines as this server's encoder: checked once at start (a machine of another
// model is a configuration error; one that is down is only a warning, it may come up later).
Result<std::unique_ptr<vision::ImageEncoder>> RemoteEncoder(const VisionOpts& o, const engine::ModelConfig& model,
                                                            const std::string& model_dir) {
  cluster::RemoteEncoderOptions ro;
  ro.endpoints = o.vision_encoders;
  ro.fingerprint = WeightsFingerprint(model, model_dir);
  ro.patch = model.vision_patch;
  ro.timeout_ms = o.vision_encoder_timeout_ms;
  ro.dead_cooldown_ms = o.vision_encoder_cooldown_ms;
  LADLE_ASSIGN_OR_RETURN(auto remote, cluster::RemoteImageEncoder::Create(std::move(ro)));
  for (const cluster::VisionEndpointInfo& e : remote->Probe(std::min<int64_t>(o.vision_encoder_timeout_ms, 5000))) {
    if (e.status.code() == StatusCode::kFailedPrecondition) return e.status;
    if (!e.status.ok()) {
      LADLE_LOG_WARN("serve.vision_encoder address={} reachable=false error='{}'", e.address, LogSafe(e.status.message()));
    } else {
      LADLE_LOG_INFO("serve.vision_encoder address={} reachable=true workers={}", e.address, e.workers);
    }
  }
  return std::unique_ptr<vision::ImageEncoder>(std::move(remote));
}

}  // namespace

Result<std::shared_ptr<vision::ImagePipeline>> BuildImagePipeline(const VisionOpts& o, const engine::ModelConfig& model,
                                                                  const std::string& model_dir) {
  if (!engine::VisionEnabled(model)) {
    LADLE_LOG_INFO("serve.vision enabled=false reason=\"the model has no vision tower\"");
    return std::shared_ptr<vision::ImagePipeline>();
  }
  // The local tower: its geometry drives preprocessing even when remote machines encode.
  LADLE_ASSIGN_OR_RETURN(auto tower, engine::VisionModel::Create(model, model_dir));
  std::shared_ptr<const engine::VisionModel> shared(std::move(tower));
  std::unique_ptr<vision::ImageEncoder> encoder;
  if (!o.vision_encoders.empty()) {
    LADLE_ASSIGN_OR_RETURN(encoder, RemoteEncoder(o, model, model_dir));
  } else {
    vision::LocalEncoderOptions lo;
    lo.workers = o.vision_workers;
    lo.policy = o.vision_policy;
    LADLE_ASSIGN_OR_RETURN(encoder, vision::MakeLocalEncoder(shared, lo));
  }
  vision::ImagePipelineOptions po;
  po.image.max_bytes = o.image_max_bytes;
  po.image.max_pixels = o.image_max_pixels;
  po.fetch.max_bytes = o.image_max_bytes;
  po.fetch.timeout = std::chrono::milliseconds(o.image_fetch_timeout_ms);
  po.fetch.max_redirects = o.image_max_redirects;
  po.fetch.allow_private = o.allow_private_image_urls;
  po.fetch.tls_ca_file = o.image_ca_file;
  po.max_images = o.max_images;
  po.max_total_patches = o.max_image_patches;
  po.io_threads = o.image_threads;
  po.embedding_cache_bytes = static_cast<size_t>(o.image_cache_mb) << 20;
  LADLE_ASSIGN_OR_RETURN(auto pipeline, vision::ImagePipeline::Create(po, vision::PreprocessFor(*shared),
                                                                      std::shared_ptr<vision::ImageEncoder>(std::move(encoder))));
  LADLE_LOG_INFO("serve.vision enabled=true encoders={} workers={} policy={} patch={} merge={} max_side={} "
                 "allow_private_urls={}",
                 o.vision_encoders.empty() ? std::string("local") : fmt::format("{}", fmt::join(o.vision_encoders, ",")),
                 pipeline->encoder().workers(), o.vision_policy, model.vision_patch, model.vision_merge,
                 model.vision_max_side, o.allow_private_image_urls);
  return std::shared_ptr<vision::ImagePipeline>(std::move(pipeline));
}

}  // namespace ladle::app
