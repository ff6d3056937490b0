// Images in the reference model and the engine (issue 18): the vision tower's output, its
// embeddings replacing placeholder tokens in a forward, and image-aware prefix caching (the
// block chain key carries each covered image's content hash).
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>

#include "engine_test_util.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/engine/vision_model.h"

namespace ladle::engine {
namespace {

// A 2·merge × 2·merge patch grid (4 placeholders) of pseudo-random normalised pixels.
std::vector<float> Pixels(const ModelConfig& c, int grid, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> px(static_cast<size_t>(3) * grid * c.vision_patch * grid * c.vision_patch);
  for (float& v : px) v = u(rng);
  return px;
}

TEST(VisionModel, EncodeIsDeterministicAndSeesThePixels) {
  ModelConfig c;
  auto vm = VisionModel::Create(c, "");
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  const int grid = 4;  // 4 × 4 patches → 2 × 2 groups
  std::vector<float> a1, a2, b;
  ASSERT_TRUE((*vm)->Encode(Pixels(c, grid, 1).data(), grid, grid, &a1).ok());
  ASSERT_TRUE((*vm)->Encode(Pixels(c, grid, 1).data(), grid, grid, &a2).ok());
  ASSERT_TRUE((*vm)->Encode(Pixels(c, grid, 2).data(), grid, grid, &b).ok());
  ASSERT_EQ(a1.size(), static_cast<size_t>(4 * c.hidden));
  EXPECT_EQ(a1, a2);
  EXPECT_NE(a1, b);
  // Rows are RMS-normalised like token rows (weight ones): mean square 1.
  for (int r = 0; r < 4; ++r) {
    double ms = 0;
    for (int i = 0; i < c.hidden; ++i) ms += a1[static_cast<size_t>(r * c.hidden + i)] * a1[static_cast<size_t>(r * c.hidden + i)];
    EXPECT_NEAR(ms / c.hidden, 1.0, 1e-3);
  }
  // Each group depends on its own patches: changing one pixel of the first patch moves group 0
  // and (through attention) the others, but the output stays finite.
  for (float v : b) ASSERT_TRUE(std::isfinite(v));
}

TEST(VisionModel, RejectsBadGridsAndTextOnlyConfigs) {
  ModelConfig c;
  auto vm = VisionModel::Create(c, "");
  ASSERT_TRUE(vm.ok());
  std::vector<float> out, px(3 * 48 * 48);
  EXPECT_EQ((*vm)->Encode(px.data(), 3, 3, &out).code(), StatusCode::kInvalidArgument);  // not a multiple of merge
  EXPECT_EQ((*vm)->Encode(px.data(), 0, 2, &out).code(), StatusCode::kInvalidArgument);
  const int too_big = c.vision_max_side / c.vision_patch + c.vision_merge;
  EXPECT_EQ((*vm)->Encode(px.data(), too_big, 2, &out).code(), StatusCode::kInvalidArgument);
  ModelConfig text = c;
  text.vision_layers = 0;
  EXPECT_EQ(VisionModel::Create(text, "").status().code(), StatusCode::kFailedPrecondition);
  text = c;
  text.vocab_size = 4096;  // <｜image｜> = 129279 is not in the vocabulary
  EXPECT_FALSE(VisionEnabled(text));
}

TEST(VisionModel, SafetensorsRoundTrip) {
  ModelConfig c;
  auto seeded = VisionModel::Create(c, "");
  ASSERT_TRUE(seeded.ok());
  testing::TempDir dir("vision-weights");
  ASSERT_TRUE((*seeded)->Save(dir.path + "/vision.safetensors").ok());
  auto loaded = VisionModel::Create(c, dir.path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  std::vector<float> a, b;
  const auto px = Pixels(c, 2, 7);
  ASSERT_TRUE((*seeded)->Encode(px.data(), 2, 2, &a).ok());
  ASSERT_TRUE((*loaded)->Encode(px.data(), 2, 2, &b).ok());
  EXPECT_EQ(a, b);
  // A tower of another shape does not load from these files.
  ModelConfig other = c;
  other.vision_hidden = 64;
  EXPECT_FALSE(VisionModel::Create(other, dir.path).ok());
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  int64_t cached = -1;
};

class VisionEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    LADLE_REQUIRE_ENGINE_TOKENIZER();
    auto vm = VisionModel::Create(mc_, "");
    ASSERT_TRUE(vm.ok());
    vision_ = std::move(vm).value();
  }

  std::unique_ptr<Engine> Make(bool exact = true) {
    auto m = Model::Create(mc_, "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = 48;
    c.max_running = 4;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 96;  // chunks end inside the image, so its rows span two forwards
    // A hit replays its whole prefix through the encoder (no SWA entry to skip it), so the
    // image's rows are read again, and the output must be the cold run's bit for bit.
    c.exact_replay = exact;
    if (exact) c.swa_pool_bytes = 0;
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // 150 text tokens, an 8 × 8-group image (64 placeholders) at 150, 306 more text tokens (long
  // enough that the hit policy's cap, L − 134, lets a hit cover the image's block).
  SubmitRequest Prompt(uint32_t pixel_seed, bool with_image = true) {
    SubmitRequest r;
    r.prompt = testing::PatternPrompt(520, 3);
    for (int i = 0; i < 64; ++i) r.prompt[static_cast<size_t>(150 + i)] = mc_.image_token_id;
    if (!with_image) return r;
    auto rows = std::make_shared<std::vector<float>>();
    EXPECT_TRUE(vision_->Encode(Pixels(mc_, 16, pixel_seed).data(), 16, 16, rows.get()).ok());
    PromptImage im;
    im.pos = 150;
    im.tokens = 64;
    im.hash_hi = pixel_seed;
    im.hash_lo = 0x5eed;
    im.embeds = rows;
    r.images.push_back(im);
    return r;
  }

  Outcome Go(Engine& e, SubmitRequest r) {
    r.sampling.max_tokens = 4;
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.top_logprobs = 0;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Outcome got;
    auto id = e.Submit(std::move(r), [&](const Output& o) {
      std::lock_guard lk(mu);
      for (const auto& ev : o.tokens) {
        got.tokens.push_back(ev.token);
        got.logprobs.push_back(ev.logprob);
      }
      if (o.finished) {
        EXPECT_EQ(o.error, "");
        got.cached = o.cached_tokens;
        done = true;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return got;
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done; }));
    return got;
  }

  ModelConfig mc_;
  std::unique_ptr<VisionModel> vision_;
};

TEST_F(VisionEngine, TheModelSeesTheImage) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  const Outcome a = Go(*e, Prompt(1));
  auto fresh = Make();
  const Outcome b = Go(*fresh, Prompt(2));
  auto fresh2 = Make();
  const Outcome none = Go(*fresh2, Prompt(0, /*with_image=*/false));
  ASSERT_EQ(a.tokens.size(), 4u);
  // A different image (or the bare placeholder embeddings) gives different logits.
  EXPECT_NE(a.logprobs, b.logprobs);
  EXPECT_NE(a.logprobs, none.logprobs);
}

TEST_F(VisionEngine, PrefixCacheKeysImagesByContent) {
  auto cold_b_engine = Make();
  const Outcome cold_b = Go(*cold_b_engine, Prompt(2));

  auto e = Make();
  const Outcome a = Go(*e, Prompt(1));
  EXPECT_EQ(a.cached, 0);
  // The same image again: the hit crosses the image (block 1 covers placeholders 150-255), and
  // the bounded replay before the hit's end re-reads the image's embeddings, so the output is
  // the cold one exactly.
  const Outcome a2 = Go(*e, Prompt(1));
  EXPECT_GT(a2.cached, 150 + 64 - 128) << "no hit past the image's first block";
  EXPECT_EQ(a2.tokens, a.tokens);
  EXPECT_EQ(a2.logprobs, a.logprobs);
  // Same text, another image: only blocks before the image may be shared.
  const Outcome b = Go(*e, Prompt(2));
  EXPECT_LE(b.cached, 128);
  EXPECT_EQ(b.tokens, cold_b.tokens);
  EXPECT_EQ(b.logprobs, cold_b.logprobs);
  // Placeholders with no image at all never hit the image's blocks either.
  const Outcome bare = Go(*e, Prompt(0, false));
  EXPECT_LE(bare.cached, 128);
}

// The recipe's hit policy as served (SWA entries in the host pool, bounded replay otherwise):
// the hit still crosses the image and the answer stays the cold one (greedy tokens; the
// bounded replay's logits are close, not bit-equal, as for text).
TEST_F(VisionEngine, HitPolicyAcrossAnImageBoundary) {
  auto e = Make(/*exact=*/false);
  const Outcome a = Go(*e, Prompt(1));
  const Outcome a2 = Go(*e, Prompt(1));
  EXPECT_GT(a2.cached, 150 + 64 - 128);
  EXPECT_EQ(a2.tokens, a.tokens);
  ASSERT_EQ(a2.logprobs.size(), a.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a2.logprobs[i], a.logprobs[i], 0.1);
  const Outcome b = Go(*e, Prompt(2));
  EXPECT_LE(b.cached, 128);
}

TEST_F(VisionEngine, RejectsMalformedImages) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  SubmitRequest r = Prompt(1);
  r.images[0].pos = 500;  // runs past the prompt
  EXPECT_EQ(e->Submit(r, [](const Output&) {}).status().code(), StatusCode::kInvalidArgument);
  r = Prompt(1);
  r.images.push_back(r.images[0]);  // overlaps
  EXPECT_EQ(e->Submit(r, [](const Output&) {}).status().code(), StatusCode::kInvalidArgument);
  r = Prompt(1);
  r.images[0].tokens = 63;  // rows for 64
  EXPECT_EQ(e->Submit(r, [](const Output&) {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladle::engine
