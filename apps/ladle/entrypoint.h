// The entrypoint as `ladle entrypoint` and `ladle cluster` run it. Internal to the binary.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ladle/cluster/routed_engine.h"
#include "serve_common.h"
#include "vision_common.h"

namespace ladle::app {

struct EntrypointOpts {
  ServeOpts serve;
  std::vector<std::string> engines;
  std::string kv_check;  // socket:PATH of the kv-fetcher (CHECK role)
  std::string policy = "balanced";
  std::string name = "ep0";
  int64_t wait_engines_ms = 30000;
  int64_t dead_after_ms = 1000;
  // Prefill Load Balancer: the compute-quota a prefill rank may hold before it pulls no more.
  double prefill_quota_ms = 500;
  // Discovery through etcd (docs/cluster.md): engines registered under the prefix join and leave.
  std::string etcd;
  std::string etcd_prefix = "/ladle/engines/";
  // The SWA directory sharded across entrypoints (docs/cluster.md, "SWA directory"): served on
  // directory_listen, shared with the peers given, and with etcd, registered under
  // directory_etcd_prefix (where the other entrypoints are found).
  std::string directory_listen, directory_advertise;
  std::vector<std::string> directory_peers;
  std::string directory_etcd_prefix = "/ladle/entrypoints/";
  int64_t directory_lookup_ms = 50;
  // Images (docs/vision.md): the entrypoint runs the image stage with the served model's vision
  // tower (serve.model / serve.model_config; the built-in one by default) and sends the engines
  // the placeholders' embeddings.
  VisionOpts vision;
};

void AddEntrypointFlags(CLI::App* cmd, EntrypointOpts* eo);
// Serves until a drain completes; `on_ready` (optional) runs once the port is bound.
int RunEntrypoint(const EntrypointOpts& eo, std::function<void(server::Server*)> on_ready);

}  // namespace ladle::app
