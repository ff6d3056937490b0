// `ladle vision-encoder`: one vision-encoder machine of the recipe's Vision Encoder Load
// Balancer. G workers (the stand-in for one encoder per GPU) run the model's vision tower; an
// image goes to the worker with the fewest patches in flight. Served over gRPC
// (src/cluster/proto/ladle_vision.proto) for `ladle serve --vision-encoder host:port`, which
// picks a machine at random per image. Runs until SIGINT/SIGTERM, then finishes the images in
// flight (up to --drain-deadline-ms) and exits.
//
//   ladle vision-encoder --port 7100 --workers 8 --model-config bench/serve/tiny_model.json
#include <fmt/format.h>
#include <signal.h>

#include <fstream>

#include "commands.h"
#include "ladle/cluster/vision_rpc.h"
#include "ladle/core/logging.h"
#include "ladle/engine/vision_model.h"
#include "ladle/vision/image_encoder.h"
#include "serve_common.h"
#include "vision_common.h"

namespace ladle::app {

namespace {

struct VisionEncoderOpts {
  std::string host = "127.0.0.1";
  int port = 7100;
  int workers = 1;
  std::string policy = "fewest-patches";
  std::string model;         // weights folder (config.json + *.safetensors)
  std::string model_config;  // config.json of the built-in seeded model
  int max_queued_images = 1024;
  int max_calls = 256;
  int64_t drain_deadline_ms = 10000;
  std::string port_file;
};

int RunVisionEncoder(const VisionEncoderOpts& o) {
  // Signals are waited for by this thread; every thread started below inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  if (!o.model.empty() && !o.model_config.empty()) {
    LADLE_LOG_ERROR("vision_encoder.failed error='--model and --model-config exclude each other'");
    return 2;
  }
  engine::ModelConfig config;
  if (!o.model_config.empty() || !o.model.empty()) {
    auto c = engine::ModelConfig::FromFile(o.model_config.empty() ? o.model + "/config.json" : o.model_config);
    if (!c.ok()) {
      LADLE_LOG_ERROR("vision_encoder.failed error='{}'", LogSafe(c.status().ToString()));
      return 2;
    }
    config = *c;
  }
  if (!engine::VisionEnabled(config)) {
    LADLE_LOG_ERROR("vision_encoder.failed error='the model has no vision tower'");
    return 2;
  }
  auto tower = engine::VisionModel::Create(config, o.model);
  if (!tower.ok()) {
    LADLE_LOG_ERROR("vision_encoder.failed error='{}'", LogSafe(tower.status().ToString()));
    return 1;
  }
  std::shared_ptr<const engine::VisionModel> shared(std::move(tower).value());
  vision::LocalEncoderOptions lo;
  lo.workers = o.workers;
  lo.policy = o.policy;
  lo.max_queued_images = static_cast<size_t>(o.max_queued_images);
  auto local = vision::MakeLocalEncoder(shared, lo);
  if (!local.ok()) {
    LADLE_LOG_ERROR("vision_encoder.failed error='{}'", LogSafe(local.status().ToString()));
    return 2;
  }
  const vision::PreprocessConfig pre = vision::PreprocessFor(*shared);
  cluster::VisionEncoderServerOptions so;
  so.listen = fmt::format("{}:{}", o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host, o.port);
  so.fingerprint = WeightsFingerprint(config, o.model);
  so.patch = pre.patch;
  so.merge = pre.merge;
  so.max_side = config.vision_max_side;
  so.hidden = config.hidden;
  so.policy = o.policy;
  so.max_calls_in_flight = o.max_calls;
  auto srv = cluster::VisionEncoderServer::Start(std::move(so), std::move(local).value());
  if (!srv.ok()) {
    LADLE_LOG_ERROR("vision_encoder.failed error='{}'", LogSafe(srv.status().ToString()));
    return 1;
  }
  if (!o.port_file.empty()) {
    // Written whole, then renamed, so a reader never sees a partial port.
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream(tmp) << (*srv)->port() << "\n";
    std::rename(tmp.c_str(), o.port_file.c_str());
  }
  LADLE_LOG_INFO("vision_encoder.listening host={} port={} workers={} policy={} patch={} merge={} max_side={}", o.host,
                 (*srv)->port(), o.workers, o.policy, pre.patch, pre.merge, config.vision_max_side);
  int sig = 0;
  sigwait(&sigs, &sig);
  const vision::EncoderStats st = (*srv)->GetStats();
  LADLE_LOG_INFO("vision_encoder.stopping signal={} images={} failed={}", sig, st.images, st.failed);
  (*srv)->Shutdown(o.drain_deadline_ms);
  srv->reset();
  LADLE_LOG_INFO("vision_encoder.exit code=0");
  return 0;
}

void RegisterVisionEncoder(CLI::App& app, RunFn* run) {
  auto o = std::make_shared<VisionEncoderOpts>();
  auto* cmd = app.add_subcommand("vision-encoder",
                                 "Serve G vision encoder workers over gRPC for `ladle serve --vision-encoder host:port`");
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free port, logged as vision_encoder.listening port=N)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--workers", o->workers, "encoder workers (one per GPU on a real machine)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--policy", o->policy,
                  "which worker takes an image: fewest-patches (the recipe), round-robin, fewest-images")
      ->capture_default_str()
      ->check(CLI::IsMember({"fewest-patches", "round-robin", "fewest-images"}));
  cmd->add_option("--model", o->model, "weights folder (config.json + *.safetensors); default: built-in");
  cmd->add_option("--model-config", o->model_config, "config.json sizing the built-in seeded model");
  cmd->add_option("--max-queued-images", o->max_queued_images, "images waiting for a worker; beyond it refused")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-calls", o->max_calls, "encode calls accepted at once (each holds its pixels)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--drain-deadline-ms", o->drain_deadline_ms, "on SIGTERM, how long the images in flight may take")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  cmd->add_option("--port-file", o->port_file, "write the port here once serving");
  cmd->callback([run, o] { *run = [o] { return RunVisionEncoder(*o); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterVisionEncoder);

}  // namespace ladle::app
