// The encoder workers and the image stage: embeddings equal the vision tower's own, images
// spread over workers by patches, and every failure names the request part it came from.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <random>

#include "ladle/engine/vision_model.h"
#include "ladle/vision/image_encoder.h"
#include "ladle/vision/image_pipeline.h"
#include "test_images.h"

namespace ladle::vision {
namespace {

using ladle::testing::PngDataUrl;

std::shared_ptr<const engine::VisionModel> Tower() {
  static std::shared_ptr<const engine::VisionModel> m = [] {
    auto r = engine::VisionModel::Create(engine::ModelConfig{}, "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::shared_ptr<const engine::VisionModel>(std::move(r).value());
  }();
  return m;
}

std::shared_ptr<ImageTensor> Tensor(int grid, uint32_t seed) {
  auto t = std::make_shared<ImageTensor>();
  t->grid_h = t->grid_w = grid;
  t->merge = 2;
  const int px = grid * 16;
  t->pixels.resize(static_cast<size_t>(3) * px * px);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : t->pixels) v = u(rng);
  return t;
}

Result<EncodedImage> EncodeSync(ImageEncoder& e, std::shared_ptr<const ImageTensor> t) {
  std::promise<Result<EncodedImage>> p;
  auto f = p.get_future();
  e.Encode(std::move(t), [&p](Result<EncodedImage> r) { p.set_value(std::move(r)); });
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) return Status(StatusCode::kDeadlineExceeded, "timeout");
  return f.get();
}

TEST(LocalEncoder, RowsEqualTheTowersAndWorkIsSpread) {
  auto enc = MakeLocalEncoder(Tower(), {.workers = 2});
  ASSERT_TRUE(enc.ok());
  for (int i = 0; i < 4; ++i) {
    auto t = Tensor(4 + 2 * (i % 2), static_cast<uint32_t>(i));
    std::vector<float> want;
    ASSERT_TRUE(Tower()->Encode(t->pixels.data(), t->grid_h, t->grid_w, &want).ok());
    auto got = EncodeSync(**enc, t);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got->embeds, want);
    EXPECT_EQ(got->groups, t->groups());
  }
  // Many at once: both workers serve, and nothing stays in flight.
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < 12; ++i) {
    (*enc)->Encode(Tensor(2 + 2 * (i % 3), 100 + i), [&](Result<EncodedImage> r) {
      EXPECT_TRUE(r.ok());
      std::lock_guard lk(mu);
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return done == 12; }));
  const EncoderStats s = (*enc)->GetStats();
  EXPECT_EQ(s.images, 16u);
  ASSERT_EQ(s.images_per_worker.size(), 2u);
  EXPECT_GT(s.images_per_worker[0], 0u);
  EXPECT_GT(s.images_per_worker[1], 0u);
  EXPECT_EQ(s.patches_in_flight, (std::vector<int64_t>{0, 0}));
}

TEST(LocalEncoder, BadGridFailsThatImageOnly) {
  auto enc = MakeLocalEncoder(Tower(), {.workers = 1});
  ASSERT_TRUE(enc.ok());
  auto bad = Tensor(3, 1);  // not a multiple of merge
  EXPECT_EQ(EncodeSync(**enc, bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(EncodeSync(**enc, Tensor(2, 2)).ok());
  EXPECT_EQ(MakeLocalEncoder(Tower(), {.workers = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(MakeLocalEncoder(Tower(), {.workers = 1, .policy = "fastest"}).ok());
}

struct Stage {
  std::unique_ptr<ImagePipeline> p;
  explicit Stage(ImagePipelineOptions o = {}) {
    auto enc = MakeLocalEncoder(Tower(), {.workers = 2});
    EXPECT_TRUE(enc.ok());
    auto r = ImagePipeline::Create(o, PreprocessFor(*Tower()), std::shared_ptr<ImageEncoder>(std::move(enc).value()));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    p = std::move(r).value();
  }
  Result<std::vector<PreparedImage>> Run(std::vector<ImageRef> refs) {
    std::promise<Result<std::vector<PreparedImage>>> pr;
    auto f = pr.get_future();
    p->Prepare(std::move(refs), [&pr](Result<std::vector<PreparedImage>> r) { pr.set_value(std::move(r)); });
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) return Status(StatusCode::kDeadlineExceeded, "timeout");
    return f.get();
  }
};

TEST(ImagePipeline, DataUrlsBecomeEmbeddings) {
  Stage s;
  auto r = s.Run({{PngDataUrl(64, 40, 1), "messages[0].content[0]"}, {PngDataUrl(64, 40, 1), "messages[0].content[2]"},
                  {PngDataUrl(33, 100, 9), "messages[2].content[1]"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  const PreprocessConfig pre = PreprocessFor(*Tower());
  for (const PreparedImage& im : *r) {
    int gh = 0, gw = 0;
    GridFor(im.width, im.height, pre, &gh, &gw);
    EXPECT_EQ(im.grid_h, gh);
    EXPECT_EQ(im.grid_w, gw);
    EXPECT_EQ(im.groups, (gh / 2) * (gw / 2));
    ASSERT_TRUE(im.embeds);
    EXPECT_EQ(im.embeds->size(), static_cast<size_t>(im.groups) * 256);
  }
  // The same picture twice: the same content hash and rows; another picture: another hash.
  EXPECT_EQ((*r)[0].hash_hi, (*r)[1].hash_hi);
  EXPECT_EQ((*r)[0].hash_lo, (*r)[1].hash_lo);
  EXPECT_EQ(*(*r)[0].embeds, *(*r)[1].embeds);
  EXPECT_FALSE((*r)[0].hash_hi == (*r)[2].hash_hi && (*r)[0].hash_lo == (*r)[2].hash_lo);
  EXPECT_EQ(s.p->GetStats().in_flight, 0u);
}

TEST(ImagePipeline, EmbeddingCacheSkipsDecodeAndEncode) {
  Stage s;
  const std::string url = PngDataUrl(96, 64, 5);
  auto first = s.Run({{url, "a"}});
  ASSERT_TRUE(first.ok());
  const uint64_t encoded = s.p->encoder().GetStats().images;
  auto again = s.Run({{url, "b"}, {PngDataUrl(96, 64, 6), "c"}});
  ASSERT_TRUE(again.ok());
  // The repeat is served from the cache: same rows (the same buffer), same content hash, and
  // only the new image reached the encoder.
  EXPECT_EQ((*again)[0].embeds, (*first)[0].embeds);
  EXPECT_EQ((*again)[0].hash_lo, (*first)[0].hash_lo);
  EXPECT_EQ((*again)[0].groups, (*first)[0].groups);
  EXPECT_EQ(s.p->encoder().GetStats().images, encoded + 1);
  const PipelineStats st = s.p->GetStats();
  EXPECT_EQ(st.cache_hits, 1u);
  EXPECT_EQ(st.cache_entries, 2u);
  // A zero-byte cache keeps nothing.
  ImagePipelineOptions off;
  off.embedding_cache_bytes = 0;
  Stage none(off);
  ASSERT_TRUE(none.Run({{url, "a"}}).ok());
  ASSERT_TRUE(none.Run({{url, "a"}}).ok());
  EXPECT_EQ(none.p->GetStats().cache_hits, 0u);
  EXPECT_EQ(none.p->encoder().GetStats().images, 2u);
}

TEST(ImagePipeline, FailuresNameThePart) {
  ImagePipelineOptions o;
  o.max_images = 2;
  o.max_total_patches = 64;
  Stage s(o);
  const std::string good = PngDataUrl(32, 32, 3);
  auto corrupt = s.Run({{good, "messages[0].content[0]"}, {"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA", "messages[1].content[3]"}});
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(corrupt.status().message().find("messages[1].content[3]: "), std::string::npos) << corrupt.status().message();

  auto many = s.Run({{good, "a"}, {good, "b"}, {good, "messages[4].content[0]"}});
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("messages[4].content[0]: a request may carry at most 2 images"), std::string::npos)
      << many.status().message();

  auto patches = s.Run({{PngDataUrl(512, 512, 1), "input[0].content[1]"}});  // 32 × 32 = 1024 patches > 64
  ASSERT_FALSE(patches.ok());
  EXPECT_NE(patches.status().message().find("input[0].content[1]: the request's images need"), std::string::npos)
      << patches.status().message();

  // The SSRF guard: no fetch of a loopback or private address without the flag.
  for (const char* url : {"http://127.0.0.1:9/x.png", "http://10.0.0.1/x.png", "http://[::1]/x.png"}) {
    auto r = s.Run({{url, "messages[0].content[1]"}});
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(r.status().message().find("messages[0].content[1]: "), std::string::npos);
    EXPECT_NE(r.status().message().find("--allow-private-image-urls"), std::string::npos) << r.status().message();
  }
  // Nothing was lost: the good image still goes through, and nothing stays in flight.
  EXPECT_TRUE(s.Run({{good, "x"}}).ok());
  EXPECT_EQ(s.p->GetStats().in_flight, 0u);
}

}  // namespace
}  // namespace ladle::vision
