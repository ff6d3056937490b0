// SMG's SglangScheduler service (src/cluster/proto/sglang_scheduler.proto) in front of an
// engine server's DP ranks: the engine server registers it on its own port, beside VllmEngine
// and LadleEngine. Internal to the cluster module; docs/cluster.md, "Wire protocol".
#pragma once

#include <grpcpp/impl/service_type.h>

#include <functional>
#include <memory>
#include <vector>

#include "ladle/cluster/engine_server.h"

namespace ladle::cluster {

// `ranks` must outlive the service; `draining` says whether the server is shutting down.
// Generate calls hold no pointer to the service once they are submitted, so an engine Output
// that arrives after the server is gone is harmless.
std::unique_ptr<grpc::Service> MakeSglangService(const EngineServerOptions& o, std::vector<engine::Engine*> ranks,
                                                 std::function<bool()> draining);

}  // namespace ladle::cluster
