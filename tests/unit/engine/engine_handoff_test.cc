// PD hand-off (engine.h HandoffState; docs/engine.md "PD hand-off"): engine A prefills a prompt
// with handoff_export (max_tokens 1), engine B resumes from A's state with prompt + first token,
// the full blocks coming through an fs: store the two share; B's tokens and logprobs must be bit
// for bit those of engine C running the whole request, for prompts under a block, at block
// multiples, one past them and over a thousand tokens, greedy and sampled with a seed (the
// sampler state travels too). The KV storage's slot state restores a ring exactly at any
// position; a state that misses its blocks or does not fit falls back and is counted; a
// cancelled resume frees what it holds.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine_test_util.h"
#include "store_wrappers.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/kvcache/kv_store.h"

namespace ladle::engine {
namespace {

using testing::PatternPrompt;

ModelConfig Mc() {
  ModelConfig mc;
  mc.vocab_size = 8192;  // the built-in shape with a smaller LM head: quick on 2 cores
  return mc;
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  int64_t cached = -1;
  FinishKind finish = FinishKind::kError;
  std::string error;
  std::shared_ptr<const HandoffState> handoff;
};

SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.top_logprobs = 0;
  return p;
}

SamplingParams Sampled(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.presence_penalty = 0.4f;  // the penalty counts must travel too
  p.frequency_penalty = 0.2f;
  p.seed = 4242;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.top_logprobs = 0;
  return p;
}

// Submits one request and waits for its finish (up to two minutes).
Outcome Submit(Engine& e, SubmitRequest req) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Outcome got;
  auto id = e.Submit(std::move(req), [&](const Output& o) {
    std::lock_guard lk(mu);
    for (const auto& ev : o.tokens) {
      got.tokens.push_back(ev.token);
      got.logprobs.push_back(ev.logprob);
    }
    if (o.finished) {
      got.cached = o.cached_tokens;
      got.finish = o.finish;
      got.error = o.error;
      got.handoff = o.handoff;
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

SubmitRequest Req(std::vector<TokenId> prompt, SamplingParams p) {
  SubmitRequest r;
  r.prompt = std::move(prompt);
  r.sampling = p;
  return r;
}

void ExpectBitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "logprob " << i << ": " << a[i] << " vs " << b[i];
  }
}

class EngineHandoff : public ::testing::Test {
 protected:
  void SetUp() override { LADLE_REQUIRE_ENGINE_TOKENIZER(); }

  static std::shared_ptr<kvcache::KvStore> Open(const std::string& dir) {
    auto s = kvcache::KvStore::Open("fs:" + dir);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::shared_ptr<kvcache::KvStore>(std::move(s).value()) : nullptr;
  }

  // Fixed chunks (the same chunk boundaries in every engine), no SWA pool on the cold engine.
  static std::unique_ptr<Engine> Make(std::shared_ptr<kvcache::KvStore> store, int blocks = 48,
                                      std::function<void(EngineConfig&)> tweak = nullptr) {
    auto m = Model::Create(Mc(), "");
    EXPECT_TRUE(m.ok());
    EngineConfig c;
    c.num_blocks = blocks;
    c.max_running = 4;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 256;
    c.kv_store = std::move(store);
    c.kv_fetch_deadline_base_ms = 5000;
    if (tweak) tweak(c);
    auto e = CreateEngine(c, std::move(m).value(), *testing::EngineTokenizer());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static void WaitWrites(Engine& e, uint64_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (e.GetStats().kv_store_writes < want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GE(e.GetStats().kv_store_writes, want);
  }

  // A prefills `prompt` with export; returns its run (first token + state) once A's blocks are
  // in the store.
  static Outcome Export(Engine& a, const std::vector<TokenId>& prompt, SamplingParams p) {
    const uint64_t writes0 = a.GetStats().kv_store_writes;
    p.max_tokens = 1;
    SubmitRequest r = Req(prompt, p);
    r.handoff_export = true;
    Outcome got = Submit(a, std::move(r));
    EXPECT_EQ(got.tokens.size(), 1u) << got.error;
    EXPECT_TRUE(got.handoff != nullptr);
    if (got.handoff) {
      const int64_t L = static_cast<int64_t>(prompt.size());
      EXPECT_EQ(got.handoff->position, L);
      EXPECT_EQ(got.handoff->first_token, got.tokens[0]);
      EXPECT_EQ(got.handoff->full_blocks, L / 128);
      EXPECT_EQ(got.handoff->blocks_persisted, L / 128);
      EXPECT_EQ(got.handoff->partial_tokens, L % 128);
      WaitWrites(a, writes0 + static_cast<uint64_t>(L / 128));
    }
    return got;
  }

  static Outcome Resume(Engine& b, const std::vector<TokenId>& prompt, const Outcome& exported, SamplingParams p,
                    int max_tokens) {
    std::vector<TokenId> next = prompt;
    next.push_back(exported.tokens.at(0));
    p.max_tokens = max_tokens;
    SubmitRequest r = Req(std::move(next), p);
    r.resume = exported.handoff;
    return Submit(b, std::move(r));
  }

  // A → B against C, for each length; `encode` sends the state through Encode/DecodeHandoff.
  void ExpectExact(const std::vector<int>& lengths, SamplingParams p, bool encode) {
    testing::TempDir dir("handoff");
    auto store = Open(dir.path);  // one handle per process (the store's index is locked)
    auto a = Make(store);
    auto b = Make(store);
    auto c = Make(nullptr);
    constexpr int kTokens = 8;
    uint64_t fetched = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const int len = lengths[i];
      SCOPED_TRACE("prompt length " + std::to_string(len));
      const auto prompt = PatternPrompt(len, 900 + len);
      const Outcome whole = Submit(*c, Req(prompt, [&] {
                                 SamplingParams q = p;
                                 q.max_tokens = kTokens;
                                 return q;
                               }()));
      ASSERT_EQ(whole.tokens.size(), static_cast<size_t>(kTokens)) << whole.error;
      Outcome exported = Export(*a, prompt, p);
      ASSERT_TRUE(exported.handoff);
      EXPECT_EQ(exported.tokens[0], whole.tokens[0]);
      if (encode) {
        auto decoded = DecodeHandoff(EncodeHandoff(*exported.handoff));
        ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
        exported.handoff = std::make_shared<HandoffState>(std::move(decoded).value());
      }
      const Outcome resumed = Resume(*b, prompt, exported, p, kTokens - 1);
      ASSERT_EQ(resumed.tokens.size(), static_cast<size_t>(kTokens - 1)) << resumed.error;
      EXPECT_EQ(resumed.cached, len) << "every prompt token but the first generated one came with the state";
      EXPECT_EQ(resumed.tokens, std::vector<TokenId>(whole.tokens.begin() + 1, whole.tokens.end()))
          << "the resumed engine must continue exactly as one engine does";
      ExpectBitIdentical(resumed.logprobs, std::vector<float>(whole.logprobs.begin() + 1, whole.logprobs.end()));
      const Stats sb = b->GetStats();
      EXPECT_EQ(sb.handoff_imports, i + 1);
      EXPECT_EQ(sb.handoff_fallbacks, 0u);
      fetched += static_cast<uint64_t>(len / 128);
      EXPECT_EQ(sb.kv_store_fetch_blocks, fetched) << "the full blocks came from the store";
      EXPECT_EQ(a->GetStats().handoff_exports, i + 1);
    }
  }
};

// The storage's slot state at a position that is no block multiple restores a ring (encoder,
// decoder from the bounded replay, encoder outputs, positions) so that the next decode step
// gives the same logits bit for bit, in another storage and another slot.
TEST(KvSlotState, RestoresTheRingsExactlyAtAnyPosition) {
  auto m = Model::Create(Mc(), "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Model& model = **m;
  for (int len : {5, 128, 200, 301}) {
    SCOPED_TRACE("len " + std::to_string(len));
    auto kv1 = model.NewKvStorage(8, 2);
    auto kv2 = model.NewKvStorage(8, 4);
    ASSERT_GT(kv1->slot_state_bytes(), 0u);
    const auto prompt = PatternPrompt(len, len);
    std::vector<int32_t> table1 = {0, 1, 2, 3}, table2 = {5, 6, 7, 4};
    std::vector<float> logits;
    SeqStep st;
    st.tokens = prompt;
    st.block_table = table1;
    st.swa_slot = 1;
    st.prefill = true;
    ASSERT_TRUE(model.Forward({&st, 1}, *kv1, &logits).ok());
    // The state and the blocks into the other storage.
    std::vector<uint8_t> ring(kv1->slot_state_bytes());
    ASSERT_TRUE(kv1->ReadSlotState(1, len, ring));
    EXPECT_FALSE(kv1->ReadSlotState(1, len - 1, ring)) << "the rings end at len";
    EXPECT_TRUE(kv2->SlotStateFits(len, ring));
    EXPECT_FALSE(kv2->SlotStateFits(len + 1, ring));
    ASSERT_TRUE(kv2->WriteSlotState(3, len, ring));
    std::vector<uint8_t> blk(kv1->block_bytes());
    for (int i = 0; i <= len / 128; ++i) {
      ASSERT_TRUE(kv1->ReadBlock(table1[i], blk));
      ASSERT_TRUE(kv2->WriteBlock(table2[i], blk));
    }
    // Two decode steps in each.
    std::vector<TokenId> tok = {77};
    for (int step = 0; step < 2; ++step) {
      std::vector<float> l1, l2;
      SeqStep d1;
      d1.tokens = tok;
      d1.start_pos = len + step;
      d1.block_table = table1;
      d1.swa_slot = 1;
      SeqStep d2 = d1;
      d2.block_table = table2;
      d2.swa_slot = 3;
      ASSERT_TRUE(model.Forward({&d1, 1}, *kv1, &l1).ok());
      ASSERT_TRUE(model.Forward({&d2, 1}, *kv2, &l2).ok());
      ASSERT_EQ(l1.size(), l2.size());
      EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)), 0) << "step " << step;
      tok[0] = 78;
    }
  }
}

TEST(HandoffEncoding, RoundTripsAndRejectsDamage) {
  HandoffState h;
  h.model = "ladle-ref/v1 test";
  h.position = 300;
  h.first_token = 4711;
  h.ring = {1, 2, 3, 4, 5};
  h.partial_block = {9, 8, 7};
  h.partial_tokens = 44;
  h.full_blocks = 2;
  h.blocks_persisted = 2;
  h.rng = 0x1234567890abcdefull;
  h.counts = {{4711, 1}, {5, 3}};
  const std::vector<uint8_t> bytes = EncodeHandoff(h);
  auto back = DecodeHandoff(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model, h.model);
  EXPECT_EQ(back->position, h.position);
  EXPECT_EQ(back->first_token, h.first_token);
  EXPECT_EQ(back->ring, h.ring);
  EXPECT_EQ(back->partial_block, h.partial_block);
  EXPECT_EQ(back->partial_tokens, h.partial_tokens);
  EXPECT_EQ(back->full_blocks, h.full_blocks);
  EXPECT_EQ(back->blocks_persisted, h.blocks_persisted);
  EXPECT_EQ(back->rng, h.rng);
  EXPECT_EQ(back->counts, h.counts);
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_FALSE(DecodeHandoff(std::span<const uint8_t>(bytes).first(cut)).ok()) << "cut at " << cut;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(DecodeHandoff(longer).ok());
}

TEST_F(EngineHandoff, GreedyResumeIsBitIdenticalToOneEngine) {
  // Under a block, a block multiple, one past one; the state also crosses Encode/Decode.
  ExpectExact({77, 128, 256, 257}, Greedy(8), /*encode=*/true);
}

#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
TEST_F(EngineHandoff, GreedyResumeOfALongPromptIsBitIdenticalToOneEngine) {
  ExpectExact({1100}, Greedy(8), /*encode=*/false);
}
#endif

TEST_F(EngineHandoff, SampledResumeWithASeedIsBitIdenticalToOneEngine) {
  ExpectExact({129, 300}, Sampled(8), /*encode=*/false);
}

// An export whose prompt hit the exporting engine's pool (an earlier turn's blocks and SWA
// entry) still queues every full block, the reused ones too, and the resume continues exactly as
// that engine would have: C, with the same history, runs the whole request.
TEST_F(EngineHandoff, AnExportWithAPrefixHitQueuesItsReusedBlocksToo) {
  testing::TempDir dir("handoff-hit");
  auto store = Open(dir.path);
  auto a = Make(store);
  auto b = Make(store);
  auto c = Make(nullptr);
  const auto turn1 = PatternPrompt(300, 11);
  std::vector<TokenId> turn2 = turn1;
  for (TokenId t : PatternPrompt(220, 12)) turn2.push_back(t);
  const Outcome a1 = Submit(*a, Req(turn1, Greedy(1)));
  ASSERT_EQ(a1.tokens.size(), 1u) << a1.error;
  WaitWrites(*a, 2);
  (void)Submit(*c, Req(turn1, Greedy(1)));
  const uint64_t writes0 = a->GetStats().kv_store_writes;
  const Outcome whole = Submit(*c, Req(turn2, Greedy(8)));
  ASSERT_EQ(whole.tokens.size(), 8u) << whole.error;
  EXPECT_EQ(whole.cached, 256) << "C hits turn 1's blocks and SWA entry";
  const Outcome exported = Export(*a, turn2, Greedy(1));
  ASSERT_TRUE(exported.handoff);
  EXPECT_EQ(exported.cached, 256);
  EXPECT_EQ(exported.handoff->blocks_persisted, 4);
  WaitWrites(*a, writes0 + 4);  // 2 reused + 2 computed
  const Outcome resumed = Resume(*b, turn2, exported, Greedy(1), 7);
  EXPECT_EQ(resumed.tokens, std::vector<TokenId>(whole.tokens.begin() + 1, whole.tokens.end()));
  ExpectBitIdentical(resumed.logprobs, std::vector<float>(whole.logprobs.begin() + 1, whole.logprobs.end()));
  EXPECT_EQ(b->GetStats().handoff_imports, 1u);
}

// The store lost the blocks between export and import: the resume recomputes on the ordinary
// path, counted, and gives what a cold engine gives for prompt + first token; a state that
// does not fit (wrong ring size) falls back the same way.
TEST_F(EngineHandoff, MissingBlocksOrABadStateFallBackToRecompute) {
  testing::TempDir dir("handoff-fallback");
  auto store = Open(dir.path);
  auto a = Make(store);
  const auto prompt = PatternPrompt(300, 31);
  const Outcome exported = Export(*a, prompt, Greedy(1));
  ASSERT_TRUE(exported.handoff);
  a->Shutdown();
  const std::vector<kvcache::ExtraKey> extras = {{kvcache::ExtraTag::kModel, ModelFingerprint(Mc())}};
  const std::vector<kvcache::BlockKey> keys = kvcache::ChainKeys(prompt, extras);
  ASSERT_EQ(keys.size(), 2u);
  auto present = store->MatchSync(keys);
  ASSERT_TRUE(present.ok());
  ASSERT_EQ(*present, 2u) << "the export's blocks are in the store";
  for (const Status& st : store->DeleteSync(keys)) ASSERT_TRUE(st.ok()) << st.ToString();
  present = store->MatchSync(keys);
  ASSERT_TRUE(present.ok());
  ASSERT_EQ(*present, 0u);
  auto b = Make(store);
  auto cold = Make(nullptr);
  std::vector<TokenId> next = prompt;
  next.push_back(exported.tokens[0]);
  const Outcome want = Submit(*cold, Req(next, Greedy(6)));
  ASSERT_EQ(want.tokens.size(), 6u) << want.error;

  const Outcome got = Resume(*b, prompt, exported, Greedy(1), 6);
  EXPECT_EQ(got.tokens, want.tokens);
  ExpectBitIdentical(got.logprobs, want.logprobs);
  Stats s = b->GetStats();
  EXPECT_EQ(s.handoff_fallbacks, 1u);
  EXPECT_EQ(s.handoff_imports, 0u);
  EXPECT_EQ(s.kv_store_fetch_blocks, 0u);
  EXPECT_EQ(s.kv_loading, 0u);

  // A damaged state (the ring cut short): the same fallback, before anything is fetched.
  auto bad = std::make_shared<HandoffState>(*exported.handoff);
  bad->ring.resize(bad->ring.size() / 2);
  Outcome damaged_src = exported;
  damaged_src.handoff = bad;
  auto b2 = Make(nullptr);
  const Outcome got2 = Resume(*b2, prompt, damaged_src, Greedy(1), 6);
  EXPECT_EQ(got2.tokens, want.tokens);
  EXPECT_EQ(b2->GetStats().handoff_fallbacks, 1u);
  EXPECT_EQ(b2->GetStats().handoff_imports, 0u);
}

// A resume cancelled while its blocks load, and one cancelled while decoding, free everything.
TEST_F(EngineHandoff, ACancelledResumeFreesItsBlocks) {
  testing::TempDir dir("handoff-cancel");
  auto store = Open(dir.path);
  auto a = Make(store);
  const auto prompt = PatternPrompt(400, 57);
  const Outcome exported = Export(*a, prompt, Greedy(1));
  ASSERT_TRUE(exported.handoff);
  std::vector<TokenId> next = prompt;
  next.push_back(exported.tokens[0]);

  auto stalling = std::make_shared<testing::StallingStore>(store);
  auto b = Make(stalling);
  auto wait_for = [&](auto pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!pred(b->GetStats()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return pred(b->GetStats());
  };
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  FinishKind kind = FinishKind::kEos;
  std::vector<TokenId> streamed;
  auto sink = [&](const Output& o) {
    std::lock_guard lk(mu);
    for (const auto& ev : o.tokens) streamed.push_back(ev.token);
    if (o.finished) {
      finished = true;
      kind = o.finish;
      cv.notify_all();
    }
  };
  auto wait_finish = [&] {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(60), [&] { return finished; });
  };

  // 1. While loading: the fetch is held by the store.
  SubmitRequest r1 = Req(next, Greedy(50));
  r1.resume = exported.handoff;
  auto id1 = b->Submit(std::move(r1), sink);
  ASSERT_TRUE(id1.ok());
  ASSERT_TRUE(wait_for([](const Stats& s) { return s.kv_loading == 1; }));
  b->Cancel(*id1);
  ASSERT_TRUE(wait_finish());
  EXPECT_EQ(kind, FinishKind::kCancelled);
  EXPECT_TRUE(wait_for([](const Stats& s) { return s.kv_loading == 0 && s.kv_blocks_used == 0 && s.running == 0; }));
  stalling->Release();  // the late completion fills buffers nobody reads

  // 2. While decoding, after its first tokens: it was admitted from the state and holds the
  // full blocks, the partial one and a slot.
  {
    std::lock_guard lk(mu);
    finished = false;
    streamed.clear();
  }
  auto b2 = Make(store);
  SubmitRequest r2 = Req(next, Greedy(2000));
  r2.resume = exported.handoff;
  auto id2 = b2->Submit(std::move(r2), sink);
  ASSERT_TRUE(id2.ok());
  {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      {
        std::lock_guard lk(mu);
        if (streamed.size() >= 2 || finished) break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  EXPECT_EQ(b2->GetStats().handoff_imports, 1u);
  EXPECT_EQ(b2->GetStats().kv_blocks_used, 4u);  // 3 full blocks of 400 tokens + the partial one
  b2->Cancel(*id2);
  ASSERT_TRUE(wait_finish());
  EXPECT_EQ(kind, FinishKind::kCancelled);
  const Stats s = b2->GetStats();
  EXPECT_EQ(s.kv_blocks_used, 0u);
  EXPECT_EQ(s.running, 0u);
}

}  // namespace
}  // namespace ladle::engine
