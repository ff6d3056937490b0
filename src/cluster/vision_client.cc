// RemoteImageEncoder: the prefill side of the Vision Encoder Load Balancer. Each image goes to a
// machine drawn at random (lb::PickVisionMachine) among the live ones it has not tried; the
// machine's own ledger picks the worker. A machine that fails in transport is marked dead for a
// cool-down and the image moves on to another; the encoder's own refusals end the image.
//
// Threads: Encode runs on the caller's thread and only queues an async gRPC call; answers come
// on gRPC's callback threads, which also send a re-routed image on. `done` always runs with no
// lock of ours held, and nothing thrown by it reaches gRPC.
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <random>
#include <unordered_set>

#include "ladle/cluster/vision_rpc.h"
#include "ladle/core/logging.h"
#include "ladle/lb/vision_lb.h"
#include "rpc_convert.h"
#include "ladle_vision.grpc.pb.h"
#include "vision_wire.h"

namespace ladle::cluster {

namespace v1 = ::ladle::vision::v1;

namespace {

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Whether a failed call says the machine (or the path to it) is gone, rather than the encoder
// refusing the image: those move the image to another machine. CANCELLED here is the server's
// doing (its shutdown deadline); our own cancels happen only while shutting down, checked first.
bool IsTransportFailure(grpc::StatusCode c) {
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::DEADLINE_EXCEEDED ||
         c == grpc::StatusCode::CANCELLED || c == grpc::StatusCode::ABORTED;
}

class RemoteEncoderImpl final : public RemoteImageEncoder {
 public:
  explicit RemoteEncoderImpl(RemoteEncoderOptions o)
      : o_(std::move(o)), rng_(o_.seed != 0 ? o_.seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {
    for (const std::string& ep : o_.endpoints) {
      auto m = std::make_unique<Machine>();
      m->address = ep.rfind("grpc://", 0) == 0 ? ep.substr(7) : ep;
      // Fail fast on a dead machine instead of waiting for a reconnect: the image re-routes.
      m->channel = FailFastChannel(m->address);
      m->stub = v1::VisionEncoder::NewStub(m->channel);
      machines_.push_back(std::move(m));
    }
  }

  ~RemoteEncoderImpl() override {
    std::vector<std::shared_ptr<Attempt>> active;
    {
      std::lock_guard lk(mu_);
      shutting_down_ = true;
      active.assign(active_.begin(), active_.end());
    }
    for (auto& a : active) a->ctx.TryCancel();
    active.clear();
    // Every call answers (cancelled ones at once), and each answer may still touch us.
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return calls_ == 0 && jobs_ == 0; });
  }

  void Encode(std::shared_ptr<const vision::ImageTensor> image, Done done) override {
    if (!image) return SafeDone(done, InvalidArgument("no image"));
    const int64_t p = o_.patch;
    const int64_t want = 3 * (int64_t{image->grid_h} * p) * (int64_t{image->grid_w} * p);
    if (image->grid_h <= 0 || image->grid_w <= 0 || static_cast<int64_t>(image->pixels.size()) != want) {
      return SafeDone(done, InvalidArgument(fmt::format("image tensor of {} floats does not fit a {}x{} grid at patch {}",
                                                        image->pixels.size(), image->grid_h, image->grid_w, p)));
    }
    Status refused;
    {
      std::lock_guard lk(mu_);
      if (shutting_down_) {
        refused = Status(StatusCode::kCancelled, "the remote vision encoder is shutting down");
      } else if (static_cast<size_t>(jobs_) >= o_.max_in_flight) {
        refused = ResourceExhausted(fmt::format("{} images are already waiting on remote vision encoders", jobs_));
      } else {
        ++jobs_;
      }
    }
    if (!refused.ok()) return SafeDone(done, refused);
    auto job = std::make_shared<Job>();
    job->image = std::move(image);
    job->done = std::move(done);
    // Serialised once: a re-route sends the same bytes to the next machine.
    job->req.set_grid_h(job->image->grid_h);
    job->req.set_grid_w(job->image->grid_w);
    job->req.set_merge(job->image->merge);
    job->req.set_patch(o_.patch);
    job->req.set_hash_hi(job->image->hash_hi);
    job->req.set_hash_lo(job->image->hash_lo);
    job->req.set_model_fingerprint(o_.fingerprint);
    vision_wire::PutFloats(job->image->pixels.data(), job->image->pixels.size(), job->req.mutable_pixels());
    Dispatch(job);
  }

  int workers() const override {
    std::lock_guard lk(mu_);
    int n = 0;
    for (const auto& m : machines_) n += std::max(1, m->workers);
    return n;
  }

  vision::EncoderStats GetStats() const override {
    std::lock_guard lk(mu_);
    vision::EncoderStats s = stats_;
    for (const auto& m : machines_) {
      const size_t w = static_cast<size_t>(std::max(1, m->workers));
      for (size_t i = 0; i < w; ++i) {
        s.patches_in_flight.push_back(i < m->reported_patches.size() ? m->reported_patches[i] : 0);
        s.images_per_worker.push_back(i < m->served.size() ? m->served[i] : 0);
      }
    }
    return s;
  }

  uint64_t reroutes() const override {
    std::lock_guard lk(mu_);
    return reroutes_;
  }

  std::vector<VisionEndpointInfo> Probe(int64_t timeout_ms) override {
    struct Latch {
      std::mutex mu;
      std::condition_variable cv;
      size_t left = 0;
    };
    struct Check {
      grpc::ClientContext ctx;
      v1::HealthCheckRequest req;
      v1::HealthCheckResponse resp;
      grpc::Status status;
    };
    auto latch = std::make_shared<Latch>();
    std::vector<std::shared_ptr<Check>> checks;
    latch->left = machines_.size();
    for (size_t i = 0; i < machines_.size(); ++i) {
      auto c = std::make_shared<Check>();
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
      checks.push_back(c);
      BeginCall();
      machines_[i]->stub->async()->HealthCheck(&c->ctx, &c->req, &c->resp, [this, c, latch](grpc::Status s) {
        c->status = std::move(s);
        {
          std::lock_guard lk(latch->mu);
          --latch->left;
          latch->cv.notify_all();
        }
        EndCall();
      });
    }
    {
      // Each check has its deadline, so each answers; the wait is bounded by it.
      std::unique_lock lk(latch->mu);
      latch->cv.wait(lk, [&] { return latch->left == 0; });
    }
    std::vector<VisionEndpointInfo> out;
    for (size_t i = 0; i < machines_.size(); ++i) {
      const Check& c = *checks[i];
      Machine& m = *machines_[i];
      VisionEndpointInfo info;
      info.address = m.address;
      if (!c.status.ok()) {
        info.status = Status(StatusCode::kUnavailable, fmt::format("vision encoder {} does not answer: {}", m.address,
                                                                   c.status.error_message()));
      } else if (!c.resp.healthy()) {
        info.status = Status(StatusCode::kUnavailable, fmt::format("vision encoder {} is {}", m.address, c.resp.message()));
      } else if (c.resp.model_fingerprint() != o_.fingerprint) {
        info.status = Status(StatusCode::kFailedPrecondition,
                             fmt::format("vision encoder {} serves another model: it is '{}', this server is '{}'",
                                         m.address, c.resp.model_fingerprint(), o_.fingerprint));
      } else if (c.resp.patch() != o_.patch) {
        info.status = Status(StatusCode::kFailedPrecondition,
                             fmt::format("vision encoder {} uses patch {}, this server {}", m.address, c.resp.patch(), o_.patch));
      }
      info.workers = c.resp.workers();
      info.fingerprint = c.resp.model_fingerprint();
      std::lock_guard lk(mu_);
      if (c.status.ok() && c.resp.workers() > 0) m.workers = c.resp.workers();
      if (info.status.code() == StatusCode::kUnavailable) m.dead_until_ms = SteadyNowMs() + o_.dead_cooldown_ms;
      out.push_back(std::move(info));
    }
    return out;
  }

 private:
  struct Machine {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::VisionEncoder::Stub> stub;
    int64_t dead_until_ms = 0;  // steady clock; picked again once it has passed
    int workers = 0;            // as the machine reported; 0 not heard from
    std::vector<int64_t> reported_patches;  // per worker, with its last answer
    std::vector<uint64_t> served;           // per worker, images it answered us
    int64_t in_flight = 0;
  };
  // One image across its attempts.
  struct Job {
    std::shared_ptr<const vision::ImageTensor> image;
    Done done;
    v1::EncodeRequest req;  // read by one attempt at a time
    std::vector<uint32_t> tried;
    std::string why;        // "host:port: reason; ..." for the final error
    bool busy = false;      // some machine answered RESOURCE_EXHAUSTED
  };
  // One call to one machine.
  struct Attempt {
    grpc::ClientContext ctx;
    v1::EncodeResponse resp;
    std::shared_ptr<Job> job;
    uint32_t machine = 0;
  };

  static void SafeDone(const Done& done, Result<vision::EncodedImage> r) {
    // `done` belongs to the caller; whatever it throws stops here, not in gRPC's threads.
    try {
      done(std::move(r));
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("vision_remote.callback_threw error='{}'", e.what());
    } catch (...) {
      LADLE_LOG_ERROR("vision_remote.callback_threw");
    }
  }

  void BeginCall() {
    std::lock_guard lk(mu_);
    ++calls_;
  }
  void EndCall() {
    std::lock_guard lk(mu_);
    --calls_;
    cv_.notify_all();  // under the lock: the destructor may free us once it sees zero
  }

  // Sends the image to a machine it has not tried: a live one at random, else (every live one
  // tried, or none live) one still in its cool-down, as a last resort that costs one failed
  // connect; with every machine tried, the image fails.
  void Dispatch(const std::shared_ptr<Job>& job) {
    std::shared_ptr<Attempt> a;
    bool cancelled = false;
    {
      std::lock_guard lk(mu_);
      if (shutting_down_) {
        cancelled = true;
      } else {
        const int64_t now = SteadyNowMs();
        std::vector<bool> alive(machines_.size());
        for (size_t i = 0; i < machines_.size(); ++i) alive[i] = machines_[i]->dead_until_ms <= now;
        std::optional<uint32_t> m = lb::PickVisionMachine(alive, job->tried, rng_());
        if (!m) m = lb::PickVisionMachine(static_cast<uint32_t>(machines_.size()), job->tried, rng_());
        if (m) {
          a = std::make_shared<Attempt>();
          a->job = job;
          a->machine = *m;
          a->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.timeout_ms));
          ++machines_[*m]->in_flight;
          ++calls_;
          active_.insert(a);
        }
      }
    }
    if (cancelled) return Finish(job, Status(StatusCode::kCancelled, "the remote vision encoder is shutting down"));
    if (!a) {
      if (job->busy) {
        return Finish(job, ResourceExhausted(fmt::format("every vision encoder machine is busy ({})", job->why)));
      }
      return Finish(job, Status(StatusCode::kUnavailable,
                                fmt::format("no vision encoder machine is reachable (tried {})", job->why)));
    }
    machines_[a->machine]->stub->async()->Encode(&a->ctx, &job->req, &a->resp,
                                                 [this, a](grpc::Status s) { OnAnswer(a, std::move(s)); });
  }

  void OnAnswer(const std::shared_ptr<Attempt>& a, grpc::Status s) {
    // Runs on a gRPC thread: nothing may escape it.
    try {
      Answer(a, s);
    } catch (const std::exception& e) {
      LADLE_LOG_ERROR("vision_remote.answer_failed error='{}'", e.what());
    } catch (...) {
      LADLE_LOG_ERROR("vision_remote.answer_failed");
    }
    EndCall();
  }

  void Answer(const std::shared_ptr<Attempt>& a, const grpc::Status& s) {
    const std::shared_ptr<Job>& job = a->job;
    Machine& m = *machines_[a->machine];
    bool shutting_down;
    bool newly_dead = false;
    {
      std::lock_guard lk(mu_);
      --m.in_flight;
      active_.erase(a);
      shutting_down = shutting_down_;
      if (s.ok()) {
        m.dead_until_ms = 0;
      } else if (IsTransportFailure(s.error_code()) && !shutting_down) {
        newly_dead = m.dead_until_ms <= SteadyNowMs();
        m.dead_until_ms = SteadyNowMs() + o_.dead_cooldown_ms;
        std::fill(m.reported_patches.begin(), m.reported_patches.end(), 0);  // unknown now
      }
    }
    if (s.ok()) return Finish(job, Decode(a->resp, m, *job->image));
    if (shutting_down) return Finish(job, Status(StatusCode::kCancelled, "the remote vision encoder is shutting down"));
    const std::string reason = fmt::format("{}: {}", m.address, s.error_message());
    if (IsTransportFailure(s.error_code()) || s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      if (newly_dead) {
        LADLE_LOG_WARN("vision_remote.machine_dead address={} code={} error='{}' cooldown_ms={}", m.address,
                       static_cast<int>(s.error_code()), s.error_message(), o_.dead_cooldown_ms);
      }
      job->tried.push_back(a->machine);
      job->why += (job->why.empty() ? "" : "; ") + reason;
      job->busy = job->busy || s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      {
        std::lock_guard lk(mu_);
        ++reroutes_;
      }
      return Dispatch(job);
    }
    // The encoder's own answer (a bad request, another model): every machine would say the
    // same, so the image fails here. Another model is a deployment error, not the client's.
    StatusCode code = vision_wire::FromGrpc(s.error_code());
    if (code == StatusCode::kFailedPrecondition) code = StatusCode::kInternal;
    Finish(job, Status(code, fmt::format("vision encoder {}", reason)));
  }

  // The answer as embeddings, checked against the image it is for.
  Result<vision::EncodedImage> Decode(const v1::EncodeResponse& r, Machine& m, const vision::ImageTensor& image) {
    const int64_t groups = r.groups(), hidden = r.hidden();
    if (groups != image.groups() || hidden <= 0 ||
        static_cast<int64_t>(r.embeddings().size()) != groups * hidden * 4) {
      return Internal(fmt::format("vision encoder {} answered {} rows of {} ({} bytes) for an image of {} patch groups",
                                  m.address, groups, hidden, r.embeddings().size(), image.groups()));
    }
    auto rows = std::make_shared<std::vector<float>>();
    vision_wire::GetFloats(r.embeddings(), rows.get());
    {
      std::lock_guard lk(mu_);
      const int reported = r.patches_in_flight_size();
      if (reported > 0 && reported <= 4096) {
        m.workers = reported;
        m.reported_patches.assign(r.patches_in_flight().begin(), r.patches_in_flight().end());
      }
      if (r.worker() >= 0 && r.worker() < 4096) {
        if (m.served.size() <= static_cast<size_t>(r.worker())) m.served.resize(static_cast<size_t>(r.worker()) + 1);
        ++m.served[static_cast<size_t>(r.worker())];
      }
    }
    vision::EncodedImage out;
    out.embeds = std::move(rows);
    out.groups = static_cast<int>(groups);
    out.worker = r.worker();
    out.queue_ms = r.queue_ms();
    out.encode_ms = r.encode_ms();
    return out;
  }

  // The image's one answer: counted, then handed to its callback with no lock held.
  void Finish(const std::shared_ptr<Job>& job, Result<vision::EncodedImage> r) {
    {
      std::lock_guard lk(mu_);
      if (r.ok()) {
        ++stats_.images;
        stats_.patches += static_cast<uint64_t>(job->image->patches());
        stats_.encode_ms_total += r->encode_ms;
      } else {
        ++stats_.failed;
      }
    }
    Done done = std::move(job->done);
    job->done = nullptr;
    SafeDone(done, std::move(r));
    std::lock_guard lk(mu_);
    --jobs_;
    cv_.notify_all();
  }

  const RemoteEncoderOptions o_;
  std::vector<std::unique_ptr<Machine>> machines_;  // fixed after construction
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;  // the machine pick's draws, under mu_
  bool shutting_down_ = false;
  int64_t calls_ = 0;  // gRPC calls whose callback has not finished
  int64_t jobs_ = 0;   // images whose `done` has not run
  uint64_t reroutes_ = 0;
  std::unordered_set<std::shared_ptr<Attempt>> active_;
  vision::EncoderStats stats_;
};

}  // namespace

Result<std::unique_ptr<RemoteImageEncoder>> RemoteImageEncoder::Create(RemoteEncoderOptions o) {
  if (o.endpoints.empty()) return InvalidArgument("remote vision encoder: no endpoints");
  if (o.endpoints.size() > 1024) return InvalidArgument("remote vision encoder: at most 1024 endpoints");
  for (const std::string& e : o.endpoints) {
    if (e.empty() || e.find(':') == std::string::npos) {
      return InvalidArgument(fmt::format("remote vision encoder: '{}' is not host:port", e));
    }
  }
  if (o.fingerprint.empty()) return InvalidArgument("remote vision encoder: the model fingerprint is empty");
  if (o.patch <= 0) return InvalidArgument("remote vision encoder: patch must be positive");
  if (o.timeout_ms <= 0) return InvalidArgument("remote vision encoder: the timeout must be positive");
  if (o.dead_cooldown_ms < 0) return InvalidArgument("remote vision encoder: the cool-down must be >= 0");
  if (o.max_in_flight == 0) return InvalidArgument("remote vision encoder: max_in_flight must be >= 1");
  return std::unique_ptr<RemoteImageEncoder>(new RemoteEncoderImpl(std::move(o)));
}

}  // namespace ladle::cluster
