// `ladle vision-encoder`'s server: the VisionEncoder service over gRPC's callback API in front
// of one machine's encoder workers (a vision::ImageEncoder).
//
// Why the callback API: an encode takes from milliseconds to seconds (a 1024×1024 image is 4096
// patches of full attention), and images wait in the workers' queues behind each other. The
// handler only validates the request, copies its pixels into a tensor and queues it; the
// worker that encodes it finishes the call from its own thread. No gRPC thread waits on an
// encode, so a burst of calls costs queue entries, not threads; max_calls_in_flight bounds the
// memory those entries hold (each keeps its pixels).
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ladle/cluster/vision_rpc.h"
#include "ladle/core/logging.h"
#include "ladle_vision.grpc.pb.h"
#include "vision_wire.h"

namespace ladle::cluster {

namespace v1 = ::ladle::vision::v1;

namespace {

class VisionServerImpl final : public VisionEncoderServer, public v1::VisionEncoder::CallbackService {
 public:
  VisionServerImpl(VisionEncoderServerOptions o, std::unique_ptr<vision::ImageEncoder> encoder)
      : o_(std::move(o)), encoder_(std::move(encoder)), workers_(encoder_->workers()) {}
  ~VisionServerImpl() override { Shutdown(0); }

  Status Start() {
    if (o_.patch <= 0 || o_.merge <= 0 || o_.max_side < o_.patch * o_.merge) {
      return InvalidArgument("vision encoder server: bad geometry (patch, merge, max_side)");
    }
    if (o_.fingerprint.empty()) return InvalidArgument("vision encoder server: the model fingerprint is empty");
    // The largest request is a max_side × max_side image: 3 channels of float32, plus room for
    // the other fields. gRPC's default 4 MiB would refuse a 1024×1024 image (12 MiB).
    const int64_t side = o_.max_side;
    const int64_t limit = 3 * side * side * 4 + (1 << 20);
    if (limit > (1LL << 30)) return InvalidArgument("vision encoder server: max_side is too large for one message");
    grpc::ServerBuilder b;
    b.AddListeningPort(o_.listen, grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    b.SetMaxReceiveMessageSize(static_cast<int>(limit));
    b.SetMaxSendMessageSize(64 << 20);
    server_ = b.BuildAndStart();
    if (!server_ || port_ == 0) return Status(StatusCode::kUnavailable, "vision encoder server: cannot listen on " + o_.listen);
    return Status::Ok();
  }

  int port() const override { return port_; }

  vision::EncoderStats GetStats() const override {
    std::shared_ptr<vision::ImageEncoder> enc;
    {
      std::lock_guard lk(mu_);
      enc = encoder_;
    }
    return enc ? enc->GetStats() : vision::EncoderStats{};
  }

  void Shutdown(int64_t deadline_ms) override {
    {
      std::lock_guard lk(mu_);
      if (shut_) return;
      shut_ = true;
      draining_ = true;  // new Encode calls get UNAVAILABLE from here on: clients re-route
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms));
    // grpc::Server::Shutdown blocks until every call is finished, and ours finish only when
    // the workers answer, so it runs beside the wait below rather than before it.
    std::thread stopper([this, deadline_ms] {
      if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms)));
    });
    std::shared_ptr<vision::ImageEncoder> enc;
    {
      std::unique_lock lk(mu_);
      if (!cv_.wait_until(lk, deadline, [&] { return calls_ == 0; })) {
        LADLE_LOG_WARN("vision_encoder.shutdown calls_in_flight={} (failing the queued ones)", calls_);
      }
      enc = std::move(encoder_);
    }
    // Destroying the workers fails what is still queued (kCancelled, sent as UNAVAILABLE so
    // clients re-route) and waits for the images being encoded.
    enc.reset();
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return calls_ == 0; });
    }
    stopper.join();
    if (server_) server_->Wait();
  }

  // --- VisionEncoder ------------------------------------------------------------------
  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* ctx, const v1::EncodeRequest* req,
                                   v1::EncodeResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (Status v = Validate(*req); !v.ok()) {
      reactor->Finish(vision_wire::ToGrpc(v));
      return reactor;
    }
    std::shared_ptr<vision::ImageEncoder> enc;
    {
      std::lock_guard lk(mu_);
      if (draining_ || !encoder_) {
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the vision encoder is shutting down"));
        return reactor;
      }
      if (calls_ >= o_.max_calls_in_flight) {
        reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     fmt::format("the vision encoder has {} images in flight", calls_)));
        return reactor;
      }
      ++calls_;
      enc = encoder_;
    }
    auto t = std::make_shared<vision::ImageTensor>();
    t->grid_h = req->grid_h();
    t->grid_w = req->grid_w();
    t->merge = req->merge();
    t->hash_hi = req->hash_hi();
    t->hash_lo = req->hash_lo();
    vision_wire::GetFloats(req->pixels(), &t->pixels);
    // The workers call back on their own thread. The encoder is alive while it calls back (the
    // callback runs inside it), so a raw pointer to it is safe there; a shared_ptr in its own
    // queue would keep it alive from inside and could destroy it on one of its workers.
    vision::ImageEncoder* raw = enc.get();
    enc->Encode(std::move(t), [this, reactor, resp, raw](Result<vision::EncodedImage> r) {
      grpc::Status st;
      if (r.ok()) {
        const std::vector<float>& rows = *r->embeds;
        resp->set_groups(r->groups);
        resp->set_hidden(r->groups > 0 ? static_cast<int32_t>(rows.size() / static_cast<size_t>(r->groups)) : 0);
        vision_wire::PutFloats(rows.data(), rows.size(), resp->mutable_embeddings());
        resp->set_worker(r->worker);
        resp->set_queue_ms(r->queue_ms);
        resp->set_encode_ms(r->encode_ms);
        for (int64_t p : raw->GetStats().patches_in_flight) resp->add_patches_in_flight(p);
      } else {
        st = vision_wire::ToGrpc(r.status());
      }
      reactor->Finish(st);
      EndCall();
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* ctx, const v1::GetLoadRequest*,
                                    v1::GetLoadResponse* resp) override {
    const vision::EncoderStats s = GetStats();
    resp->set_workers(workers_);
    for (int64_t p : s.patches_in_flight) resp->add_patches_in_flight(p);
    for (uint64_t n : s.images_per_worker) resp->add_images_per_worker(n);
    resp->set_images_served(s.images);
    resp->set_images_failed(s.failed);
    resp->set_policy(o_.policy);
    {
      std::lock_guard lk(mu_);
      resp->set_calls_in_flight(static_cast<uint64_t>(calls_));
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* ctx, const v1::HealthCheckRequest*,
                                        v1::HealthCheckResponse* resp) override {
    bool draining;
    {
      std::lock_guard lk(mu_);
      draining = draining_;
    }
    resp->set_healthy(!draining);
    resp->set_message(draining ? "draining" : "ok");
    resp->set_workers(workers_);
    resp->set_model_fingerprint(o_.fingerprint);
    resp->set_patch(o_.patch);
    resp->set_merge(o_.merge);
    resp->set_max_side(o_.max_side);
    resp->set_hidden(o_.hidden);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  // Everything about the request that the workers would otherwise trust: the model, the
  // geometry, and the pixel count against the grid (64-bit: the grid comes from the wire).
  Status Validate(const v1::EncodeRequest& q) const {
    if (q.model_fingerprint() != o_.fingerprint) {
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("this vision encoder serves another model: it is '{}', the request is for '{}'",
                                o_.fingerprint, q.model_fingerprint()));
    }
    if (q.patch() != o_.patch || q.merge() != o_.merge) {
      return InvalidArgument(fmt::format("patch {} and merge {} do not match this encoder's patch {} and merge {}",
                                         q.patch(), q.merge(), o_.patch, o_.merge));
    }
    const int64_t gh = q.grid_h(), gw = q.grid_w(), p = o_.patch;
    if (gh <= 0 || gw <= 0 || gh % o_.merge != 0 || gw % o_.merge != 0) {
      return InvalidArgument(fmt::format("grid {}x{} must be positive multiples of merge {}", gh, gw, o_.merge));
    }
    if (gh * p > o_.max_side || gw * p > o_.max_side) {
      return InvalidArgument(fmt::format("grid {}x{} at patch {} exceeds the encoder's max side {}", gh, gw, p, o_.max_side));
    }
    const int64_t want = 3 * (gh * p) * (gw * p) * 4;
    if (static_cast<int64_t>(q.pixels().size()) != want) {
      return InvalidArgument(fmt::format("pixels hold {} bytes; a {}x{} grid at patch {} needs {} (float32, 3 channels)",
                                         q.pixels().size(), gh, gw, p, want));
    }
    return Status::Ok();
  }

  void EndCall() {
    std::lock_guard lk(mu_);
    --calls_;
    cv_.notify_all();  // under the lock: Shutdown may destroy us as soon as it sees zero
  }

  const VisionEncoderServerOptions o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<vision::ImageEncoder> encoder_;  // null once Shutdown dropped it
  const int workers_;
  bool draining_ = false, shut_ = false;
  int calls_ = 0;  // Encode calls accepted and not yet finished
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace

Result<std::unique_ptr<VisionEncoderServer>> VisionEncoderServer::Start(VisionEncoderServerOptions o,
                                                                        std::unique_ptr<vision::ImageEncoder> encoder) {
  if (!encoder) return InvalidArgument("vision encoder server: no encoder");
  if (o.max_calls_in_flight < 1) return InvalidArgument("vision encoder server: max_calls_in_flight must be >= 1");
  auto s = std::make_unique<VisionServerImpl>(std::move(o), std::move(encoder));
  LADLE_RETURN_IF_ERROR(s->Start());
  return std::unique_ptr<VisionEncoderServer>(std::move(s));
}

}  // namespace ladle::cluster
