// The wire conversions: sampling settings both ways, Ladle's extras, finish reasons.
#include <gtest/gtest.h>

#include "rpc_convert.h"

namespace ladle::cluster {
namespace {

TEST(RpcConvert, SamplingRoundTrips) {
  engine::SamplingParams s;
  s.temperature = 0.7f;
  s.top_p = 0.9f;
  s.top_k = 40;
  s.min_p = 0.05f;
  s.presence_penalty = 0.5f;
  s.frequency_penalty = 0.25f;
  s.max_tokens = 123;
  s.stop = {"\n\n", "END"};
  s.stop_token_ids = {7, 9};
  s.ignore_eos = true;
  s.n = 3;
  s.top_logprobs = 5;
  s.seed = 42;
  pb::SamplingParams p;
  ToProto(s, &p);
  auto back = FromProto(p, 256);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->temperature, s.temperature);
  EXPECT_EQ(back->top_p, s.top_p);
  EXPECT_EQ(back->top_k, s.top_k);
  EXPECT_EQ(back->min_p, s.min_p);
  EXPECT_EQ(back->presence_penalty, s.presence_penalty);
  EXPECT_EQ(back->frequency_penalty, s.frequency_penalty);
  EXPECT_EQ(back->max_tokens, 123);
  EXPECT_EQ(back->stop, s.stop);
  EXPECT_EQ(back->stop_token_ids, s.stop_token_ids);
  EXPECT_TRUE(back->ignore_eos);
  EXPECT_EQ(back->n, 3);
  EXPECT_EQ(back->top_logprobs, 5);
  EXPECT_EQ(back->seed, std::optional<uint64_t>(42));
}

TEST(RpcConvert, DefaultsOfAnotherGateway) {
  pb::SamplingParams p;  // every field unset, as a minimal SMG request
  auto s = FromProto(p, 77);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->temperature, 1.0f);
  EXPECT_EQ(s->top_p, 1.0f);
  EXPECT_EQ(s->max_tokens, 77);
  EXPECT_EQ(s->n, 1);
  EXPECT_EQ(s->top_logprobs, -1);
  EXPECT_FALSE(s->seed.has_value());
}

TEST(RpcConvert, RefusesWhatTheEngineCannotHonour) {
  pb::SamplingParams p;
  p.set_temperature(-1);
  EXPECT_FALSE(FromProto(p, 1).ok());
  pb::SamplingParams q;
  q.set_repetition_penalty(1.2f);
  EXPECT_FALSE(FromProto(q, 1).ok());
  pb::SamplingParams r;
  (*r.mutable_logit_bias())[5] = 1.0f;
  EXPECT_FALSE(FromProto(r, 1).ok());
  pb::SamplingParams t;
  t.set_top_p(std::numeric_limits<float>::quiet_NaN());
  EXPECT_FALSE(FromProto(t, 1).ok());
}

TEST(RpcConvert, ExtrasRoundTripAndRejectGarbage) {
  LadleExtras x;
  x.constraint = R"({"spec":{}})";
  x.prefix_tokens = {1, 2, 3};
  x.agent = true;
  x.swa_anchor_for_len = 513;
  kvcache::BlockKey k;
  k.hi = 0x0123456789abcdefULL;
  k.lo = 0xfedcba9876543210ULL;
  x.swa_peers.push_back({k, "127.0.0.1:7001"});
  auto back = ExtrasFromJson(ExtrasToJson(x));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->constraint, x.constraint);
  EXPECT_EQ(back->prefix_tokens, x.prefix_tokens);
  EXPECT_TRUE(back->agent);
  EXPECT_EQ(back->swa_anchor_for_len, 513);
  ASSERT_EQ(back->swa_peers.size(), 1u);
  EXPECT_EQ(back->swa_peers[0].key, k);
  EXPECT_EQ(back->swa_peers[0].peer, "127.0.0.1:7001");
  // Another connector's JSON (no "ladle" key) is not ours: empty extras, no error.
  auto other = ExtrasFromJson(R"({"do_remote_prefill": true})");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->prefix_tokens.empty());
  for (const char* bad : {"{", R"({"ladle": 3})", R"({"ladle": {"prefix_tokens": [-1]}})",
                          R"({"ladle": {"prefix_tokens": [1e99]}})", R"({"ladle": {"swa_peers": [{"key": "zz"}]}})",
                          R"({"ladle": {"swa_anchor_for_len": -5}})"}) {
    EXPECT_FALSE(ExtrasFromJson(bad).ok()) << bad;
  }
}

TEST(RpcConvert, FinishReasons) {
  pb::GenerateComplete c;
  c.set_finish_reason("length");
  EXPECT_EQ(FinishFromProto(c), engine::FinishKind::kLength);
  c.set_finish_reason("stop");
  EXPECT_EQ(FinishFromProto(c), engine::FinishKind::kEos);
  c.set_matched_token_id(9);
  EXPECT_EQ(FinishFromProto(c), engine::FinishKind::kStopToken);
  c.set_matched_stop_str("END");
  EXPECT_EQ(FinishFromProto(c), engine::FinishKind::kStopString);
  c.set_finish_reason("abort");
  EXPECT_EQ(FinishFromProto(c), engine::FinishKind::kCancelled);
  EXPECT_EQ(FinishReasonName(engine::FinishKind::kStopString), "stop");
  EXPECT_EQ(FinishReasonName(engine::FinishKind::kLength), "length");
}

}  // namespace
}  // namespace ladle::cluster

namespace ladle::cluster {
namespace {

std::vector<engine::PromptImage> TwoImages() {
  std::vector<engine::PromptImage> v(2);
  v[0].pos = 5;
  v[0].tokens = 2;
  v[0].hash_hi = 0x0123456789abcdefull;
  v[0].hash_lo = 0xfedcba9876543210ull;
  v[0].embeds = std::make_shared<std::vector<float>>(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f});
  v[1].pos = 300;
  v[1].tokens = 1;
  v[1].hash_hi = 7;
  v[1].hash_lo = 9;
  v[1].embeds = std::make_shared<std::vector<float>>(std::vector<float>{4.0f, 5.0f, -6.5f});
  return v;
}

TEST(RpcConvert, ImagesRoundTripBitForBit) {
  pb::MultimodalInputs mm;
  ImagesToProto(TwoImages(), &mm);
  EXPECT_EQ(mm.mm_hashes(0), "0123456789abcdeffedcba9876543210");
  auto back = ImagesFromProto(mm);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto want = TwoImages();
  ASSERT_EQ(back->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*back)[i].pos, want[i].pos);
    EXPECT_EQ((*back)[i].tokens, want[i].tokens);
    EXPECT_EQ((*back)[i].hash_hi, want[i].hash_hi);
    EXPECT_EQ((*back)[i].hash_lo, want[i].hash_lo);
    ASSERT_EQ((*back)[i].embeds->size(), want[i].embeds->size());
    EXPECT_EQ(std::memcmp((*back)[i].embeds->data(), want[i].embeds->data(), want[i].embeds->size() * 4), 0);
  }
}

TEST(RpcConvert, MalformedImagesAreInvalidArgument) {
  auto check = [](const std::function<void(pb::MultimodalInputs*)>& spoil, const char* what) {
    pb::MultimodalInputs mm;
    ImagesToProto(TwoImages(), &mm);
    spoil(&mm);
    auto r = ImagesFromProto(mm);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what;
  };
  check([](auto* m) { m->mutable_mm_hashes()->RemoveLast(); }, "hash missing");
  check([](auto* m) { m->set_mm_hashes(0, "xyz"); }, "bad hash");
  check([](auto* m) { m->mutable_mm_placeholders(1)->set_length(2); }, "more rows than sent");
  check([](auto* m) { m->mutable_mm_placeholders(1)->set_length(0); }, "empty run");
  check([](auto* m) { (*m->mutable_model_specific_tensors())["image_embeds"].mutable_inline_()->pop_back(); }, "bytes");
  check([](auto* m) { (*m->mutable_model_specific_tensors())["image_embeds"].set_dtype("bfloat16"); }, "dtype");
  check([](auto* m) { m->mutable_model_specific_tensors()->erase("image_embeds"); }, "no embeds");
  check([](auto* m) { m->mutable_pixel_values()->set_dtype("float32"); }, "pixels");
  check([](auto* m) { m->mutable_mm_placeholders(1)->set_length(0); m->mutable_mm_placeholders(0)->set_length(1); },
        "rows left over");
}

}  // namespace
}  // namespace ladle::cluster
