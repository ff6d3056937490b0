// The vision encoder tier over gRPC on loopback (issue 18): VisionEncoderServer in front of
// local encoder workers, RemoteImageEncoder picking machines at random. Remote embeddings equal
// the tower's own bit for bit; a machine that stops mid-stream has its images re-routed; with
// every machine down images fail kUnavailable, naming the machines, without hanging; the
// encoder's own refusals (another model, a malformed request) are not re-routed.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "ladle/cluster/vision_rpc.h"
#include "ladle/engine/model.h"
#include "ladle/engine/vision_model.h"
#include "ladle/vision/image_encoder.h"
#include "ladle_vision.grpc.pb.h"

namespace ladle::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using vision::EncodedImage;
using vision::ImageTensor;

engine::ModelConfig Config() { return engine::ModelConfig{}; }
std::string Fp() { return engine::ModelFingerprint(Config()); }

std::shared_ptr<const engine::VisionModel> Tower() {
  static std::shared_ptr<const engine::VisionModel> m = [] {
    auto r = engine::VisionModel::Create(Config(), "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::shared_ptr<const engine::VisionModel>(std::move(r).value());
  }();
  return m;
}

std::shared_ptr<ImageTensor> Tensor(int gh, int gw, uint32_t seed) {
  auto t = std::make_shared<ImageTensor>();
  t->grid_h = gh;
  t->grid_w = gw;
  t->merge = 2;
  t->pixels.resize(static_cast<size_t>(3) * (gh * 16) * (gw * 16));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : t->pixels) v = u(rng);
  t->hash_hi = seed;
  t->hash_lo = ~uint64_t{seed};
  return t;
}

std::vector<float> Want(const ImageTensor& t) {
  std::vector<float> out;
  EXPECT_TRUE(Tower()->Encode(t.pixels.data(), t.grid_h, t.grid_w, &out).ok());
  return out;
}

// One `ladle vision-encoder` in this process.
struct Machine {
  std::unique_ptr<VisionEncoderServer> srv;
  std::string addr;
  int port = 0;

  explicit Machine(int workers, std::string fingerprint = Fp(), int at_port = 0) {
    auto local = vision::MakeLocalEncoder(Tower(), {.workers = workers});
    EXPECT_TRUE(local.ok()) << local.status().ToString();
    VisionEncoderServerOptions o;
    o.listen = "127.0.0.1:" + std::to_string(at_port);
    o.fingerprint = std::move(fingerprint);
    o.patch = Config().vision_patch;
    o.merge = Config().vision_merge;
    o.max_side = Config().vision_max_side;
    o.hidden = Config().hidden;
    o.policy = "fewest-patches";
    auto s = VisionEncoderServer::Start(std::move(o), std::move(local).value());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return;
    srv = std::move(s).value();
    port = srv->port();
    addr = "127.0.0.1:" + std::to_string(port);
  }
};

std::unique_ptr<RemoteImageEncoder> Remote(std::vector<std::string> endpoints, int64_t cooldown_ms = 2000,
                                           int64_t timeout_ms = 30000, std::string fp = Fp()) {
  RemoteEncoderOptions o;
  o.endpoints = std::move(endpoints);
  o.fingerprint = std::move(fp);
  o.patch = Config().vision_patch;
  o.seed = 20251130;
  o.dead_cooldown_ms = cooldown_ms;
  o.timeout_ms = timeout_ms;
  auto r = RemoteImageEncoder::Create(std::move(o));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

Result<EncodedImage> EncodeSync(vision::ImageEncoder& e, std::shared_ptr<const ImageTensor> t) {
  auto p = std::make_shared<std::promise<Result<EncodedImage>>>();
  auto f = p->get_future();
  e.Encode(std::move(t), [p](Result<EncodedImage> r) { p->set_value(std::move(r)); });
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    return Status(StatusCode::kDeadlineExceeded, "no answer in 60 s");
  }
  return f.get();
}

// Many images at once; each callback counted, so a second call of one `done` is caught.
struct Batch {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Result<EncodedImage>>> results;
  std::vector<int> calls;
  int answered = 0;

  explicit Batch(size_t n) : results(n), calls(n, 0) {}
  vision::ImageEncoder::Done Fn(size_t i) {
    return [this, i](Result<EncodedImage> r) {
      std::lock_guard lk(mu);
      if (++calls[i] == 1) {
        results[i] = std::move(r);
        ++answered;
      }
      cv.notify_all();
    };
  }
  bool WaitAll(std::chrono::seconds limit) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, limit, [&] { return answered == static_cast<int>(results.size()); });
  }
  bool WaitAtLeast(int n, std::chrono::seconds limit) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, limit, [&] { return answered >= n; });
  }
};

TEST(VisionRpc, RemoteEncodeEqualsTheTowerBitForBit) {
  Machine m(2);
  auto remote = Remote({m.addr});
  ASSERT_TRUE(remote);
  const auto probe = remote->Probe(5000);
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_TRUE(probe[0].status.ok()) << probe[0].status.ToString();
  EXPECT_EQ(probe[0].workers, 2);
  EXPECT_EQ(remote->workers(), 2);
  const std::vector<std::pair<int, int>> grids = {{2, 2}, {4, 6}, {8, 2}, {6, 10}};
  for (size_t i = 0; i < grids.size(); ++i) {
    auto t = Tensor(grids[i].first, grids[i].second, static_cast<uint32_t>(i));
    auto got = EncodeSync(*remote, t);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->groups, t->groups());
    EXPECT_EQ(*got->embeds, Want(*t));  // bit for bit: float32 over the wire, no rounding
    EXPECT_GE(got->worker, 0);
  }
  const vision::EncoderStats s = remote->GetStats();
  EXPECT_EQ(s.images, grids.size());
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.patches, 4u + 24u + 16u + 60u);
  EXPECT_EQ(s.patches_in_flight.size(), 2u);  // the machine's two workers
  EXPECT_EQ(m.srv->GetStats().images, grids.size());
}

TEST(VisionRpc, ImagesOfAMachineStoppedMidStreamAreReRouted) {
  auto a = std::make_unique<Machine>(1);
  Machine b(2);
  auto remote = Remote({a->addr, b.addr});
  ASSERT_TRUE(remote);
  const size_t n = 24;
  std::vector<std::shared_ptr<ImageTensor>> images;
  for (size_t i = 0; i < n; ++i) images.push_back(Tensor(20 + 2 * static_cast<int>(i % 3), 20, static_cast<uint32_t>(100 + i)));
  Batch batch(n);
  for (size_t i = 0; i < n; ++i) remote->Encode(images[i], batch.Fn(i));
  // Some answers are back, the rest queued on both machines: machine A stops without waiting.
  ASSERT_TRUE(batch.WaitAtLeast(2, std::chrono::seconds(60)));
  const uint64_t a_served = a->srv->GetStats().images;
  a->srv->Shutdown(0);
  ASSERT_TRUE(batch.WaitAll(std::chrono::seconds(120)));
  size_t ok = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(batch.calls[i], 1) << "image " << i;
    ASSERT_TRUE(batch.results[i]->ok()) << "image " << i << ": " << batch.results[i]->status().ToString();
    EXPECT_EQ(*(*batch.results[i])->embeds, Want(*images[i])) << "image " << i;
    ++ok;
  }
  EXPECT_EQ(ok, n);
  EXPECT_GT(remote->reroutes(), 0u);  // A had images queued when it stopped
  // Every re-routed image went to B (the one machine left) and was encoded there.
  EXPECT_GE(b.srv->GetStats().images, remote->reroutes());
  EXPECT_LT(a_served, n);
  // New images go to B alone while A is down.
  for (int i = 0; i < 6; ++i) {
    auto t = Tensor(2, 4, static_cast<uint32_t>(900 + i));
    auto got = EncodeSync(*remote, t);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got->embeds, Want(*t));
  }
  a.reset();
}

TEST(VisionRpc, EveryMachineDownFailsThoseImagesOnlyAndPromptly) {
  auto a = std::make_unique<Machine>(1);
  auto b = std::make_unique<Machine>(1);
  const std::string a_addr = a->addr, b_addr = b->addr;
  const int a_port = a->port;
  auto remote = Remote({a_addr, b_addr}, /*cooldown_ms=*/200);
  ASSERT_TRUE(remote);
  auto before = EncodeSync(*remote, Tensor(2, 2, 1));
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  a->srv->Shutdown(0);
  b->srv->Shutdown(0);
  a.reset();
  b.reset();
  const auto t0 = Clock::now();
  for (int i = 0; i < 4; ++i) {
    auto r = EncodeSync(*remote, Tensor(2, 2, static_cast<uint32_t>(10 + i)));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
    EXPECT_NE(r.status().message().find("no vision encoder machine is reachable"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(a_addr), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(b_addr), std::string::npos) << r.status().ToString();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));  // refused connections, not timeouts
  EXPECT_EQ(remote->GetStats().failed, 4u);
  // A machine back on A's port is used again once its cool-down (and the channel's reconnect
  // backoff) has passed.
  Machine again(1, Fp(), a_port);
  ASSERT_TRUE(again.srv);
  bool served = false;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!served && Clock::now() < deadline) {
    auto t = Tensor(2, 2, 77);
    auto r = EncodeSync(*remote, t);
    served = r.ok() && *r->embeds == Want(*t);
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(served) << "the machine back on " << a_addr << " was never used";
}

TEST(VisionRpc, AnotherModelIsAClearErrorAndNotReRouted) {
  Machine good(1);
  Machine other(1, "ladle-ref/v1 some other model");
  auto remote = Remote({good.addr, other.addr});
  ASSERT_TRUE(remote);
  const auto probe = remote->Probe(5000);
  ASSERT_EQ(probe.size(), 2u);
  EXPECT_TRUE(probe[0].status.ok()) << probe[0].status.ToString();
  EXPECT_EQ(probe[1].status.code(), StatusCode::kFailedPrecondition) << probe[1].status.ToString();
  const size_t n = 16;
  Batch batch(n);
  for (size_t i = 0; i < n; ++i) remote->Encode(Tensor(2, 2, static_cast<uint32_t>(i)), batch.Fn(i));
  ASSERT_TRUE(batch.WaitAll(std::chrono::seconds(60)));
  size_t failed = 0;
  for (size_t i = 0; i < n; ++i) {
    const Result<EncodedImage>& r = *batch.results[i];
    if (r.ok()) continue;
    ++failed;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
    EXPECT_NE(r.status().message().find("serves another model"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(other.addr), std::string::npos) << r.status().ToString();
  }
  // Random halves: some on each machine. Not re-routed: the good machine served only its own.
  EXPECT_GT(failed, 0u);
  EXPECT_LT(failed, n);
  EXPECT_EQ(good.srv->GetStats().images, n - failed);
}

TEST(VisionRpc, MalformedRequestsAreInvalidArgument) {
  Machine m(1);
  auto channel = grpc::CreateChannel(m.addr, grpc::InsecureChannelCredentials());
  auto stub = ::ladle::vision::v1::VisionEncoder::NewStub(channel);
  auto call = [&](const ::ladle::vision::v1::EncodeRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ::ladle::vision::v1::EncodeResponse resp;
    return stub->Encode(&ctx, req, &resp);
  };
  auto base = [&](int gh, int gw, size_t floats) {
    ::ladle::vision::v1::EncodeRequest req;
    req.set_grid_h(gh);
    req.set_grid_w(gw);
    req.set_merge(2);
    req.set_patch(16);
    req.set_model_fingerprint(Fp());
    req.mutable_pixels()->assign(floats * 4, '\0');
    return req;
  };
  EXPECT_TRUE(call(base(2, 2, 3 * 32 * 32)).ok());
  EXPECT_EQ(call(base(2, 2, 3 * 32 * 32 - 1)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // short
  EXPECT_EQ(call(base(2, 2, 3 * 32 * 32 + 7)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // long
  EXPECT_EQ(call(base(3, 2, 3 * 48 * 32)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);     // not a multiple of merge
  EXPECT_EQ(call(base(0, 2, 0)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call(base(-2, 2, 0)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call(base(66, 2, 3 * (66 * 16) * 32)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // > max side
  EXPECT_EQ(call(base(1 << 30, 1 << 30, 0)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // no overflow
  auto bad_patch = base(2, 2, 3 * 32 * 32);
  bad_patch.set_patch(14);
  EXPECT_EQ(call(bad_patch).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto bad_bytes = base(2, 2, 0);
  bad_bytes.mutable_pixels()->assign(3 * 32 * 32 * 4 - 2, '\0');  // not even whole floats
  EXPECT_EQ(call(bad_bytes).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto other = base(2, 2, 3 * 32 * 32);
  other.set_model_fingerprint("another");
  EXPECT_EQ(call(other).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // The client refuses a tensor that does not fit its grid before any call.
  auto remote = Remote({m.addr});
  auto t = Tensor(2, 2, 5);
  t->pixels.pop_back();
  auto r = EncodeSync(*remote, t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // The server still serves after all of that.
  auto good = EncodeSync(*remote, Tensor(2, 2, 6));
  EXPECT_TRUE(good.ok()) << good.status().ToString();
}

TEST(VisionRpc, DestroyingTheClientAnswersEveryImageOnce) {
  Machine m(1);
  const size_t n = 12;
  Batch batch(n);
  {
    auto remote = Remote({m.addr});
    for (size_t i = 0; i < n; ++i) remote->Encode(Tensor(12, 12, static_cast<uint32_t>(i)), batch.Fn(i));
  }  // cancelled in flight: each image answered (done or kCancelled) before the destructor returns
  EXPECT_EQ(batch.answered, static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(batch.calls[i], 1);
    if (!batch.results[i]->ok()) {
      EXPECT_EQ(batch.results[i]->status().code(), StatusCode::kCancelled);
    }
  }
}

TEST(VisionRpc, ShutdownFinishesInFlightWithinTheDeadline) {
  Machine m(2);
  auto remote = Remote({m.addr});
  const size_t n = 6;
  Batch batch(n);
  for (size_t i = 0; i < n; ++i) remote->Encode(Tensor(8, 8, static_cast<uint32_t>(i)), batch.Fn(i));
  // Every image accepted by the machine (encoded, or counted in a worker's patches in flight).
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    const vision::EncoderStats s = m.srv->GetStats();
    int64_t seen = static_cast<int64_t>(s.images) * 64;
    for (int64_t p : s.patches_in_flight) seen += p;
    if (seen == static_cast<int64_t>(n) * 64) break;
    ASSERT_LT(Clock::now(), deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  m.srv->Shutdown(30000);  // a graceful stop: what was accepted is encoded
  ASSERT_TRUE(batch.WaitAll(std::chrono::seconds(60)));
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(batch.results[i]->ok()) << batch.results[i]->status().ToString();
}

}  // namespace
}  // namespace ladle::cluster
