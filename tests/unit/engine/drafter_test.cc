// The DSpark drafter (drafter.h) and its distillation (dspark_fit.h), on a small target so the
// fit takes seconds: acceptance of the three variants, save/load round trip, determinism and
// batch invariance, confidences and their calibration, and Load's errors.
#include "ladle/engine/drafter.h"

#include <gtest/gtest.h>

#include "engine_test_util.h"
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "ladle/engine/dspark_fit.h"
#include "ladle/engine/model.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace ladle::engine {
namespace {

struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& tag) {
    const char* base = std::getenv("TMPDIR");
    path = std::string(base ? base : "/tmp") + "/ladle-" + tag + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(reinterpret_cast<uintptr_t>(this));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

ModelConfig SmallTarget() { return testing::TinyModelConfig(4096); }

FitOptions SmallFit() {
  FitOptions o;
  o.prompts = 64;
  o.gen_tokens = 200;
  o.prompt_min = 8;
  o.prompt_max = 24;
  o.draft_vocab = 2048;  // half the target's ids: the subset path (d2t, E = 0 outside)
  o.rank = 16;
  o.seed = 7;
  o.heldout_fraction = 0.25;
  return o;
}

// One fit shared by the suite (a few seconds).
class DsparkFit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Create(SmallTarget(), "");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    auto r = FitDrafter(*model_, SmallFit(), [](std::string_view phase, double f) {
      EXPECT_GE(f, 0.0);
      EXPECT_LE(f, 1.0 + 1e-9) << phase;
    });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    report_ = new FitReport(std::move(r).value());
  }
  static void TearDownTestSuite() {
    delete report_;
    delete model_;
    report_ = nullptr;
    model_ = nullptr;
  }
  static Model* model_;
  static FitReport* report_;
};
Model* DsparkFit::model_ = nullptr;
FitReport* DsparkFit::report_ = nullptr;

// Drafting inputs: random unit-ish hidden states and ids spread over the target vocabulary
// (inside and outside the draft vocabulary).
struct Inputs {
  std::vector<std::vector<float>> hidden;
  std::vector<DraftInput> in;
};
Inputs RandomInputs(const DrafterConfig& c, int n, uint64_t seed, const std::vector<TokenId>& d2t) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs x;
  x.hidden.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& h = x.hidden[static_cast<size_t>(i)];
    h.resize(static_cast<size_t>(c.hidden));
    for (float& v : h) v = normal(rng);
    const TokenId last = i % 3 == 0 ? static_cast<TokenId>(rng() % c.target_vocab) : d2t[rng() % d2t.size()];
    x.in.push_back({h, last});
  }
  return x;
}

void ExpectSame(const std::vector<DraftOutput>& a, const std::vector<DraftOutput>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "input " << i;
    ASSERT_EQ(a[i].confidences.size(), b[i].confidences.size());
    for (size_t k = 0; k < a[i].confidences.size(); ++k) {
      EXPECT_EQ(a[i].confidences[k], b[i].confidences[k]) << "input " << i << " k " << k;  // bit-identical
    }
  }
}

TEST_F(DsparkFit, AcceptanceBeatsEachHeadAlone) {
  const FitReport& r = *report_;
  std::printf(
      "both %.3f backbone-only %.3f markov-only %.3f (held-out positions %lld, vocab %d, coverage %.3f, "
      "%.1f s)\n",
      r.both.acceptance_length, r.backbone_only.acceptance_length, r.markov_only.acceptance_length,
      static_cast<long long>(r.heldout_positions), r.weights.config.draft_vocab, r.vocab_coverage, r.seconds_total);
  for (const FitVariantStats* v : {&r.both, &r.backbone_only, &r.markov_only}) {
    std::printf("  prefix acceptance:");
    for (double x : v->prefix_accept) std::printf(" %.3f", x);
    std::printf("\n");
  }
  EXPECT_GT(r.heldout_positions, 0);
  EXPECT_GT(r.both.acceptance_length, 1.3);
  EXPECT_GE(r.both.acceptance_length, r.backbone_only.acceptance_length - 0.05);
  EXPECT_GE(r.both.acceptance_length, r.markov_only.acceptance_length - 0.05);
  const int g = r.weights.config.draft_tokens;
  for (const FitVariantStats* v : {&r.both, &r.backbone_only, &r.markov_only}) {
    EXPECT_GE(v->acceptance_length, 1.0);
    EXPECT_LE(v->acceptance_length, 1.0 + g);
    ASSERT_EQ(v->prefix_accept.size(), static_cast<size_t>(g));
    for (int k = 1; k < g; ++k) EXPECT_LE(v->prefix_accept[k], v->prefix_accept[k - 1]);  // prefixes shrink
  }
}

TEST_F(DsparkFit, CalibratedOnUnseenSequences) {
  const FitReport& r = *report_;
  ASSERT_EQ(r.predicted_pi.size(), static_cast<size_t>(r.weights.config.draft_tokens));
  for (size_t k = 0; k < r.predicted_pi.size(); ++k) {
    const ConfidenceChoice& ch = r.confidence[k];
    std::printf("k=%zu predicted %.3f observed %.3f T %.3f state ridge %g validation NLL %.4f -> %.4f\n", k + 1,
                r.predicted_pi[k], r.observed_pi[k], r.weights.conf_temperature[k], ch.lambda, ch.loss_features,
                ch.loss_chosen);
    EXPECT_NEAR(r.predicted_pi[k], r.observed_pi[k], 0.05) << "k " << k + 1;
    EXPECT_GT(r.weights.conf_temperature[k], 0.0f);
  }
}

TEST_F(DsparkFit, SaveLoadGivesIdenticalDrafts) {
  ScratchDir dir("drafter-roundtrip");
  ASSERT_TRUE(SaveDrafter(report_->weights, dir.path).ok());
  auto loaded = Drafter::Load(dir.path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto made = MakeDrafter(report_->weights);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const DrafterConfig& c = (*loaded)->config();
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.target_vocab, 4096);
  EXPECT_EQ(c.draft_vocab, report_->weights.config.draft_vocab);
  EXPECT_EQ(c.draft_tokens, 5);
  EXPECT_EQ(c.rank, 16);
  EXPECT_EQ(c.target, ModelFingerprint(SmallTarget()));
  Inputs x = RandomInputs(c, 40, 11, report_->weights.d2t);
  std::vector<DraftOutput> a, b;
  (*made)->Draft(x.in, &a);
  (*loaded)->Draft(x.in, &b);
  ExpectSame(a, b);
}

TEST_F(DsparkFit, DeterministicAndBatchInvariant) {
  auto d = MakeDrafter(report_->weights);
  ASSERT_TRUE(d.ok());
  const DrafterConfig& c = (*d)->config();
  Inputs x = RandomInputs(c, 37, 3, report_->weights.d2t);
  std::vector<DraftOutput> all, again;
  (*d)->Draft(x.in, &all);
  (*d)->Draft(x.in, &again);
  ExpectSame(all, again);
  // Alone, and in a differently composed batch (reversed, with its neighbours changed).
  for (size_t i = 0; i < x.in.size(); ++i) {
    std::vector<DraftOutput> one;
    (*d)->Draft(std::span<const DraftInput>(&x.in[i], 1), &one);
    ExpectSame(std::vector<DraftOutput>{all[i]}, one);
  }
  std::vector<DraftInput> rev(x.in.rbegin(), x.in.rend());
  std::vector<DraftOutput> out_rev;
  (*d)->Draft(rev, &out_rev);
  for (size_t i = 0; i < x.in.size(); ++i) ExpectSame({all[i]}, {out_rev[x.in.size() - 1 - i]});
  std::vector<DraftOutput> none;
  (*d)->Draft({}, &none);
  EXPECT_TRUE(none.empty());
}

TEST_F(DsparkFit, ConfidencesInOpenUnitIntervalAndTokensInVocab) {
  auto d = MakeDrafter(report_->weights);
  ASSERT_TRUE(d.ok());
  const DrafterConfig& c = (*d)->config();
  Inputs x = RandomInputs(c, 64, 5, report_->weights.d2t);
  // Extremes too: a huge hidden state drives the logits (and the confidence logit) far out.
  for (float& v : x.hidden[0]) v *= 1e4f;
  std::fill(x.hidden[1].begin(), x.hidden[1].end(), 0.0f);
  std::vector<DraftOutput> out;
  std::vector<float> feats;
  ASSERT_TRUE(DraftWithFeatures(**d, x.in, &out, &feats).ok());
  EXPECT_EQ(feats.size(), x.in.size() * c.draft_tokens * kDraftFeatures);
  std::set<TokenId> vocab(report_->weights.d2t.begin(), report_->weights.d2t.end());
  for (const DraftOutput& o : out) {
    ASSERT_EQ(o.tokens.size(), static_cast<size_t>(c.draft_tokens));
    for (size_t k = 0; k < o.tokens.size(); ++k) {
      EXPECT_GT(o.confidences[k], 0.0f);
      EXPECT_LT(o.confidences[k], 1.0f);
      EXPECT_TRUE(vocab.count(o.tokens[k]));
    }
  }
}

TEST_F(DsparkFit, RejectsBadOptions) {
  FitOptions o = SmallFit();
  o.heldout_fraction = 1.5;
  EXPECT_EQ(FitDrafter(*model_, o).status().code(), StatusCode::kInvalidArgument);
  o = SmallFit();
  o.prompts = 2;
  EXPECT_EQ(FitDrafter(*model_, o).status().code(), StatusCode::kInvalidArgument);
  o = SmallFit();
  o.prompt_ids = {{5, 6, 7}, {9999999}, {8}};
  EXPECT_EQ(FitDrafter(*model_, o).status().code(), StatusCode::kInvalidArgument);
}

void ExpectSameWeights(const DrafterWeights& a, const DrafterWeights& b) {
  EXPECT_EQ(a.config.draft_vocab, b.config.draft_vocab);
  EXPECT_EQ(a.config.target, b.config.target);
  EXPECT_EQ(a.d2t, b.d2t);
  EXPECT_EQ(a.embed, b.embed);
  EXPECT_EQ(a.head, b.head);
  EXPECT_EQ(a.backbone_weight, b.backbone_weight);
  EXPECT_EQ(a.backbone_bias, b.backbone_bias);
  EXPECT_EQ(a.markov_u, b.markov_u);
  EXPECT_EQ(a.markov_v, b.markov_v);
  EXPECT_EQ(a.conf_weight, b.conf_weight);
  EXPECT_EQ(a.conf_bias, b.conf_bias);
  EXPECT_EQ(a.conf_temperature, b.conf_temperature);
}

// Same seed, same drafter, bit for bit; and a target loaded from safetensors (the lm_head and
// embedding rows then come from the mapping) fits the same drafter as the seeded one. Caller's
// prompts, several Forward batches.
TEST(DsparkFitSmall, DeterministicAndSameFromLoadedWeights) {
  ModelConfig c = SmallTarget();
  FitOptions o;
  o.gen_tokens = 30;
  o.draft_vocab = 256;
  o.rank = 4;
  o.batch = 4;
  o.markov_epochs = 1;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 7; ++i) {
    std::vector<TokenId> p(static_cast<size_t>(5 + i));
    for (auto& t : p) t = static_cast<TokenId>(3 + rng() % 4000);
    o.prompt_ids.push_back(p);
  }
  auto seeded = Model::Create(c, "");
  ASSERT_TRUE(seeded.ok());
  auto a = FitDrafter(**seeded, o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = FitDrafter(**seeded, o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->train_sequences + a->heldout_sequences, 7);
  ExpectSameWeights(a->weights, b->weights);
  EXPECT_EQ(a->both.acceptance_length, b->both.acceptance_length);

  ScratchDir dir("dspark-weights");
  ASSERT_TRUE(model::ModelWeights::Seeded(c)->Save(dir.path).ok());
  auto loaded = Model::Create(c, dir.path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto l = FitDrafter(**loaded, o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ExpectSameWeights(a->weights, l->weights);
}

// ---- Load errors, on a tiny hand-made drafter.

DrafterWeights TinyWeights() {
  DrafterWeights w;
  w.config.hidden = 4;
  w.config.target_vocab = 50;
  w.config.draft_vocab = 6;
  w.config.draft_tokens = 3;
  w.config.rank = 2;
  w.config.target = "test";
  const size_t H = 4, G = 3, Vd = 6, R = 2;
  w.d2t = {10, 3, 44, 7, 20, 49};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) x = u(rng);
  };
  fill(w.embed, Vd * H);
  fill(w.backbone_weight, G * H * 2 * H);
  fill(w.backbone_bias, G * H);
  fill(w.head, Vd * H);
  fill(w.markov_u, Vd * R);
  fill(w.markov_v, Vd * R);
  fill(w.conf_weight, G * kDraftFeatures);
  fill(w.conf_bias, G);
  w.conf_temperature = {1.0f, 0.5f, 2.0f};
  return w;
}

// Rewrites drafter.safetensors with one tensor changed (or dropped when shape is empty).
void WriteWith(const DrafterWeights& w, const std::string& dir, const std::string& name, std::vector<int64_t> shape) {
  ASSERT_TRUE(SaveDrafter(w, dir).ok());
  std::vector<float> d2t(w.d2t.begin(), w.d2t.end());
  std::vector<model::TensorToWrite> t = {
      {"d2t", {6}, d2t},
      {"embed", {6, 4}, w.embed},
      {"backbone.weight", {3, 4, 8}, w.backbone_weight},
      {"backbone.bias", {3, 4}, w.backbone_bias},
      {"head", {6, 4}, w.head},
      {"markov.u", {6, 2}, w.markov_u},
      {"markov.v", {6, 2}, w.markov_v},
      {"confidence.weight", {3, 3}, w.conf_weight},
      {"confidence.bias", {3}, w.conf_bias},
      {"confidence.temperature", {3}, w.conf_temperature},
  };
  std::vector<float> storage;
  for (auto it = t.begin(); it != t.end(); ++it) {
    if (it->name != name) continue;
    if (shape.empty()) {
      t.erase(it);
    } else {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      storage.assign(static_cast<size_t>(n), 0.5f);
      it->shape = shape;
      it->data = storage;
    }
    break;
  }
  ASSERT_TRUE(model::WriteSafetensors(dir + "/drafter.safetensors", t).ok());
}

TEST(DrafterLoad, RoundTripsTinyDrafter) {
  ScratchDir dir("drafter-tiny");
  DrafterWeights w = TinyWeights();
  ASSERT_TRUE(SaveDrafter(w, dir.path).ok());
  auto d = Drafter::Load(dir.path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto m = MakeDrafter(w);
  ASSERT_TRUE(m.ok());
  std::vector<float> h1 = {0.1f, -2.0f, 0.3f, 1.0f}, h2 = {1, 1, 1, 1};
  std::vector<DraftInput> in = {{h1, 44}, {h2, 0}, {h1, 49}};
  std::vector<DraftOutput> a, b;
  (*d)->Draft(in, &a);
  (*m)->Draft(in, &b);
  ExpectSame(a, b);
  for (const auto& o : a) {
    for (TokenId t : o.tokens) EXPECT_NE(std::find(w.d2t.begin(), w.d2t.end(), t), w.d2t.end());
  }
}

// The confidence head's backbone-state term (confidence.hidden) round-trips and changes the
// confidences; a file written before it existed (no such tensor) loads with the term at zero.
TEST(DrafterLoad, TheStateTermRoundTripsAndIsOptional) {
  ScratchDir dir("drafter-state");
  DrafterWeights w = TinyWeights();
  std::vector<float> h1 = {0.1f, -2.0f, 0.3f, 1.0f}, h2 = {1, 1, 1, 1};
  std::vector<DraftInput> in = {{h1, 44}, {h2, 0}, {h1, 49}};
  std::vector<DraftOutput> without, with, loaded;
  auto plain = MakeDrafter(w);
  ASSERT_TRUE(plain.ok());
  (*plain)->Draft(in, &without);
  w.conf_hidden.resize(static_cast<size_t>(w.config.draft_tokens) * w.config.hidden);
  for (size_t i = 0; i < w.conf_hidden.size(); ++i) w.conf_hidden[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
  auto made = MakeDrafter(w);
  ASSERT_TRUE(made.ok());
  (*made)->Draft(in, &with);
  ASSERT_TRUE(SaveDrafter(w, dir.path).ok());
  auto d = Drafter::Load(dir.path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  (*d)->Draft(in, &loaded);
  ExpectSame(with, loaded);
  bool differs = false;
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(with[i].tokens, without[i].tokens);  // the term scores drafts, it does not pick them
    differs = differs || with[i].confidences != without[i].confidences;
  }
  EXPECT_TRUE(differs);
  // An older file: every tensor but confidence.hidden.
  WriteWith(TinyWeights(), dir.path, "", {});
  auto old = Drafter::Load(dir.path);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  (*old)->Draft(in, &loaded);
  ExpectSame(without, loaded);
  w.conf_hidden.pop_back();
  EXPECT_FALSE(MakeDrafter(w).ok());
}

TEST(DrafterLoad, WrongShapeIsAnErrorNamingTheTensor) {
  ScratchDir dir("drafter-shape");
  WriteWith(TinyWeights(), dir.path, "backbone.weight", {3, 4, 4});
  auto d = Drafter::Load(dir.path);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("backbone.weight"), std::string::npos) << d.status().ToString();
  WriteWith(TinyWeights(), dir.path, "markov.v", {6, 3});
  d = Drafter::Load(dir.path);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("markov.v"), std::string::npos) << d.status().ToString();
}

TEST(DrafterLoad, MissingTensorIsAnError) {
  ScratchDir dir("drafter-missing");
  WriteWith(TinyWeights(), dir.path, "confidence.temperature", {});
  auto d = Drafter::Load(dir.path);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("confidence.temperature"), std::string::npos) << d.status().ToString();
}

TEST(DrafterLoad, BadD2tIsAnError) {
  ScratchDir dir("drafter-d2t");
  DrafterWeights w = TinyWeights();
  ASSERT_TRUE(SaveDrafter(w, dir.path).ok());
  w.d2t[2] = 50;  // outside the target vocabulary
  EXPECT_FALSE(SaveDrafter(w, dir.path).ok());
  EXPECT_FALSE(MakeDrafter(w).ok());
  w.d2t[2] = 10;  // a repeat
  EXPECT_FALSE(MakeDrafter(w).ok());
  // A fractional id in the file.
  WriteWith(TinyWeights(), dir.path, "d2t", {6});  // 0.5 everywhere
  auto d = Drafter::Load(dir.path);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("d2t"), std::string::npos) << d.status().ToString();
}

TEST(DrafterLoad, CorruptOrMissingFilesAreErrors) {
  ScratchDir dir("drafter-corrupt");
  EXPECT_FALSE(Drafter::Load(dir.path).ok());  // nothing there
  ASSERT_TRUE(SaveDrafter(TinyWeights(), dir.path).ok());
  // Truncated safetensors.
  const std::string st = dir.path + "/drafter.safetensors";
  const auto size = std::filesystem::file_size(st);
  std::filesystem::resize_file(st, size / 2);
  EXPECT_FALSE(Drafter::Load(dir.path).ok());
  // Garbage safetensors.
  std::ofstream(st, std::ios::trunc) << "not a safetensors file at all";
  EXPECT_FALSE(Drafter::Load(dir.path).ok());
  // Bad JSON, and JSON missing a size or disagreeing with the tensors.
  ASSERT_TRUE(SaveDrafter(TinyWeights(), dir.path).ok());
  std::ofstream(dir.path + "/drafter.json", std::ios::trunc) << "{\"hidden\": 4,";
  EXPECT_FALSE(Drafter::Load(dir.path).ok());
  std::ofstream(dir.path + "/drafter.json", std::ios::trunc)
      << R"({"hidden": 4, "target_vocab": 50, "draft_vocab": 6, "draft_tokens": 3})";
  EXPECT_EQ(Drafter::Load(dir.path).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir.path + "/drafter.json", std::ios::trunc)
      << R"({"hidden": 4, "target_vocab": 50, "draft_vocab": 7, "draft_tokens": 3, "rank": 2})";
  EXPECT_EQ(Drafter::Load(dir.path).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir.path + "/drafter.json", std::ios::trunc)
      << R"({"hidden": 4, "target_vocab": 50, "draft_vocab": 6, "draft_tokens": 0, "rank": 2})";
  EXPECT_EQ(Drafter::Load(dir.path).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladle::engine
