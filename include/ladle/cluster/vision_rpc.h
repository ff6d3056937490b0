// The vision encoder tier over gRPC (issue 18; the recipe's "Vision Encoder Load Balancer"):
// images are routed per machine. The prefill side picks a vision-encoder machine AT RANDOM
// (lb::PickVisionMachine); on that machine the image goes to the worker with the fewest image
// patches in flight (vision::LocalImageEncoder, lb::VisionWorkerLedger).
//
//   VisionEncoderServer — `ladle vision-encoder`: one machine's workers (a vision::ImageEncoder,
//                         normally MakeLocalEncoder with G workers) behind the VisionEncoder
//                         service (src/cluster/proto/ladle_vision.proto).
//   RemoteImageEncoder  — a vision::ImageEncoder over N such machines, what `ladle serve
//                         --vision-encoder host:port` uses instead of in-process workers.
//
//   VisionEncoderServerOptions so; so.fingerprint = ...; so.patch = 16; ...
//   auto srv = VisionEncoderServer::Start(so, std::move(local));   // serving on (*srv)->port()
//   RemoteEncoderOptions ro; ro.endpoints = {"10.0.0.7:7100", "10.0.0.8:7100"}; ro.fingerprint = ...;
//   auto enc = RemoteImageEncoder::Create(ro);                      // an ImageEncoder
//
// Failures: a transport failure of one machine (UNAVAILABLE: refused, reset, the server shutting
// down; DEADLINE_EXCEEDED; CANCELLED by the server) marks that machine dead for a cool-down and
// re-routes the same image to another machine it has not tried; with none left the image fails
// kUnavailable naming every machine tried and why. The encoder's own answers (a bad request, a
// model fingerprint mismatch) fail the image at once: another machine would say the same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/vision/image_encoder.h"

namespace ladle::cluster {

struct VisionEncoderServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  // What a request's model_fingerprint must equal (the app's VisionFingerprint of its model).
  std::string fingerprint;
  // The tower's geometry: requests must use this patch and merge and fit max_side per side.
  int patch = 16, merge = 2, max_side = 1024;
  int hidden = 0;              // floats per embedding row, for HealthCheck
  std::string policy;          // the workers' policy, for GetLoad
  // Encode calls accepted at once (queued or encoding); beyond it RESOURCE_EXHAUSTED, which
  // the client answers by trying another machine. Each holds its request's pixels.
  int max_calls_in_flight = 256;
};

class VisionEncoderServer {
 public:
  // Serves `encoder` (owned: Shutdown destroys it to fail what is still queued). Starts
  // serving before it returns. The receive limit is sized for a max_side × max_side image.
  static Result<std::unique_ptr<VisionEncoderServer>> Start(VisionEncoderServerOptions o,
                                                            std::unique_ptr<vision::ImageEncoder> encoder);
  virtual ~VisionEncoderServer() = default;
  virtual int port() const = 0;
  // Stops taking calls (new ones get UNAVAILABLE, so clients re-route), lets the images in
  // flight finish for up to `deadline_ms`, then fails the rest (UNAVAILABLE) and stops. Idempotent.
  virtual void Shutdown(int64_t deadline_ms = 5000) = 0;
  // The workers' stats (vision::ImageEncoder::GetStats); empty after Shutdown.
  virtual vision::EncoderStats GetStats() const = 0;
};

struct RemoteEncoderOptions {
  std::vector<std::string> endpoints;  // host:port of `ladle vision-encoder` machines
  std::string fingerprint;             // sent with every image; the machine must serve the same model
  int patch = 16;                      // the local model's vision_patch (the tensors' geometry)
  int64_t timeout_ms = 30000;          // one attempt on one machine
  int64_t dead_cooldown_ms = 2000;     // a failed machine is picked again after this
  uint64_t seed = 0;                   // the machine pick's generator; 0: from std::random_device
  size_t max_in_flight = 4096;         // images sent and not answered; beyond it kResourceExhausted
};

// What one machine answered to HealthCheck (RemoteImageEncoder::Probe).
struct VisionEndpointInfo {
  std::string address;
  Status status;  // ok: reachable and serving the same model
  int workers = 0;
  std::string fingerprint;
};

class RemoteImageEncoder : public vision::ImageEncoder {
 public:
  // Channels are created lazily by gRPC: no machine needs to be up yet.
  static Result<std::unique_ptr<RemoteImageEncoder>> Create(RemoteEncoderOptions o);

  // Encode: never blocks; `done` runs exactly once, on a gRPC thread (or inline when the image
  // is refused before any call), never under this object's lock.
  // workers(): the workers the machines reported (HealthCheck or answers), one for a machine
  // not heard from yet. GetStats(): this client's counts; per-worker entries are the machines'
  // workers in endpoint order, their patches in flight as last reported.

  // HealthCheck of every machine at once, waiting at most `timeout_ms`: learns their workers;
  // a machine that does not answer is marked dead (for the cool-down) and reported with
  // kUnavailable; one serving another model is reported kFailedPrecondition.
  virtual std::vector<VisionEndpointInfo> Probe(int64_t timeout_ms) = 0;
  // Images moved to another machine after a failed attempt, so far.
  virtual uint64_t reroutes() const = 0;
};

}  // namespace ladle::cluster
