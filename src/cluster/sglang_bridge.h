// An entrypoint's way to an SGLang worker (SMG's SglangScheduler protocol): an in-process
// VllmEngine server that translates every call to SglangScheduler calls on the worker, so the
// routed engine, which speaks VllmEngine, drives the worker unchanged. Named by the address
// scheme: `ladle entrypoint --engine sglang://host:port`. Internal to the cluster module.
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>

namespace ladle::cluster {

class SglangBridge {
 public:
  // `address`: host:port of the SGLang worker.
  static std::shared_ptr<SglangBridge> Start(const std::string& address);
  virtual ~SglangBridge() = default;
  // The channel a VllmEngine (and LadleEngine) stub dials: LadleEngine answers UNIMPLEMENTED, so
  // the routed engine takes the worker for a foreign (SMG-protocol) one.
  virtual std::shared_ptr<grpc::Channel> channel() = 0;
};

}  // namespace ladle::cluster
