// ttft_store_bench: time to first token of one long prompt (default 16K tokens) on the built-in
// model, side by side in one run:
//   cold          a fresh engine, nothing cached
//   pool hit      the same engine again (blocks in the in-memory pool; the SWA entry is at the
//                 prompt's last block boundary, past the hit's L1, so the last window replays)
//   next turn     the same engine, a conversation's second turn (the prompt + 100, then + 256
//                 more): the block hit reaches turn 1's SWA entry in the host pool, so the
//                 whole prefix is skipped exactly, nothing replayed
//   store fs      a fresh engine on a reopened fs: store the prompt was written to (a restart)
//   store ec      the same on ec:10+2 over 12 directories
//   fetcher store a fresh engine on the fs: store owned by a fetcher (kvcache::FetcherServer, as
//                 `ladle kv-fetcher` runs it): blocks read into its shm pool, copied from there
//   fetcher shm   another fresh engine on the same fetcher: the blocks are still in its shm
//                 pool (an shm hit, no store read)
//   store fs, exact replay   the fs case with the whole prefix replayed through the encoder
// Each hit case reports the tokens served from cache and the store fetch time; ratios are
// against cold. The bounded replay re-runs 128 tokens per hit (the SWA ring); exact replay
// re-runs the whole prefix's encoder, so its TTFT shows what the approximation buys.
//   ttft_store_bench [--prompt 16384] [--quick] [--dir /tmp] [--tokenizer PATH]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unistd.h>

#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/kvcache/fetcher.h"
#include "ladle/kvcache/fetcher_store.h"
#include "ladle/kvcache/kv_store.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct Opts {
  int prompt = 16384;
  bool quick = false;
  std::string dir = "/tmp";
  std::string tokenizer = std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  int64_t chunk = 2048;
};

struct Ttft {
  double ms = 0;
  int64_t cached = 0;
  std::vector<TokenId> tokens;
};

// What a case's engine did: tokens replayed, and the swap-in's copy and exposed time.
struct EngineDelta {
  uint64_t replayed = 0;
  double copy_s = 0, exposed_s = 0;
  static EngineDelta Of(const Stats& s) { return {s.replayed_tokens, s.swap_in_copy_seconds_total, s.swap_in_exposed_seconds_total}; }
  EngineDelta Minus(const EngineDelta& o) const { return {replayed - o.replayed, copy_s - o.copy_s, exposed_s - o.exposed_s}; }
};

Result<std::unique_ptr<Engine>> Make(const Opts& o, const tokenizer::Tokenizer& tok,
                                     std::shared_ptr<kvcache::KvStore> store, bool exact) {
  LADLE_ASSIGN_OR_RETURN(auto m, Model::Create(ModelConfig{}, ""));
  EngineConfig c;
  c.num_blocks = o.prompt / 128 + 24;
  c.max_running = 4;
  c.max_model_len = o.prompt + 512;
  c.chunk_policy = "fixed";
  c.chunk_tokens = o.chunk;
  c.kv_store = std::move(store);
  c.exact_replay = exact;
  c.kv_fetch_deadline_base_ms = 10000;  // a measurement: let every read finish
  c.kv_fetch_deadline_max_ms = 10000;
  return CreateEngine(c, std::move(m), tok);
}

Result<Ttft> Run(Engine& e, const std::vector<TokenId>& prompt, int max_tokens = 1) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = 0;
  p.ignore_eos = true;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Ttft t;
  std::optional<Clock::time_point> first;
  std::string error;
  const auto t0 = Clock::now();
  auto id = e.Submit({prompt, p, nullptr}, [&](const Output& o) {
    std::lock_guard lk(mu);
    if (!first && !o.tokens.empty()) first = Clock::now();
    for (const auto& ev : o.tokens) t.tokens.push_back(ev.token);
    if (o.finished) {
      t.cached = o.cached_tokens;
      error = o.error;
      done = true;
      cv.notify_all();
    }
  });
  LADLE_RETURN_IF_ERROR(id.status());
  std::unique_lock lk(mu);
  if (!cv.wait_for(lk, std::chrono::minutes(10), [&] { return done; })) return Internal("no answer in 10 minutes");
  if (!error.empty()) return Internal(error);
  if (!first) return Internal("no token");
  t.ms = std::chrono::duration<double, std::milli>(*first - t0).count();
  return t;
}

Result<std::shared_ptr<kvcache::KvStore>> Open(const std::string& uri) {
  LADLE_ASSIGN_OR_RETURN(auto s, kvcache::KvStore::Open(uri));
  return std::shared_ptr<kvcache::KvStore>(std::move(s));
}

// Writes `prompt` into the store at `uri` through a fresh engine, and waits for every block.
Status Prime(const Opts& o, const tokenizer::Tokenizer& tok, const std::string& uri, const std::vector<TokenId>& prompt) {
  LADLE_ASSIGN_OR_RETURN(auto store, Open(uri));
  LADLE_ASSIGN_OR_RETURN(auto e, Make(o, tok, store, false));
  LADLE_RETURN_IF_ERROR(Run(*e, prompt).status());
  const uint64_t want = prompt.size() / 128;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (e->GetStats().kv_store_writes < want && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (e->GetStats().kv_store_writes < want) return Internal("the store did not take every block in 60 s");
  e->Shutdown();
  return Status::Ok();
}

int Main(int argc, char** argv) {
  Opts o;
  CLI::App app{"time to first token: cold, pool hit, store hit (fs, ec:10+2), exact replay"};
  app.add_option("--prompt", o.prompt, "prompt tokens")->capture_default_str();
  app.add_flag("--quick", o.quick, "a 4K-token prompt");
  app.add_option("--dir", o.dir, "where the stores go")->capture_default_str();
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.json")->capture_default_str();
  app.add_option("--chunk", o.chunk, "prefill chunk tokens")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.quick) o.prompt = 4096;
  auto tok = tokenizer::Tokenizer::FromFile(o.tokenizer);
  if (!tok.ok()) {
    fmt::print(stderr, "ttft_store_bench: {}\n", tok.status().ToString());
    return 1;
  }
  std::vector<TokenId> prompt(static_cast<size_t>(o.prompt));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(100 + (i * 7919 + 13) % 100000);
  const std::string base = fmt::format("{}/ladle-ttft-{}", o.dir, ::getpid());
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/fs");
  std::string ec_uri = "ec:10+2:";
  for (int i = 0; i < 12; ++i) {
    std::filesystem::create_directories(fmt::format("{}/ec/d{}", base, i));
    ec_uri += fmt::format("{}{}/ec/d{}", i ? "," : "", base, i);
  }
  const std::string fs_uri = "fs:" + base + "/fs";
  auto fail = [&](const Status& s) {
    fmt::print(stderr, "ttft_store_bench: {}\n", s.ToString());
    std::filesystem::remove_all(base);
    return 1;
  };
  fmt::print("ttft_store_bench: {}-token prompt, built-in model, fixed chunks of {}, stores under {}\n", o.prompt,
             o.chunk, base);
  struct Row {
    std::string name;
    Ttft t;
    double fetch_ms = 0;
    EngineDelta d;
  };
  std::vector<Row> rows;
  double next_cold_ms = 0;
  {
    auto e = Make(o, *tok, nullptr, false);
    if (!e.ok()) return fail(e.status());
    auto cold = Run(**e, prompt);
    if (!cold.ok()) return fail(cold.status());
    rows.push_back({"cold", *cold, 0, {}});
    EngineDelta d0 = EngineDelta::Of((*e)->GetStats());
    auto pool = Run(**e, prompt);
    if (!pool.ok()) return fail(pool.status());
    EngineDelta d1 = EngineDelta::Of((*e)->GetStats());
    rows.push_back({"pool hit", *pool, 0, d1.Minus(d0)});
    // A conversation: turn 1 is the prompt plus 100 tokens (its SWA entry lands at the last
    // boundary before its end); turn 2 adds 256 more, and its block hit ends at that entry.
    std::vector<TokenId> turn1 = prompt;
    for (int i = 0; i < 100; ++i) turn1.push_back(static_cast<TokenId>(300 + (i * 37) % 50000));
    if (auto t1 = Run(**e, turn1); !t1.ok()) return fail(t1.status());
    d1 = EngineDelta::Of((*e)->GetStats());
    std::vector<TokenId> next = turn1;
    for (int i = 0; i < 256; ++i) next.push_back(static_cast<TokenId>(200 + (i * 31) % 50000));
    auto turn = Run(**e, next);
    if (!turn.ok()) return fail(turn.status());
    rows.push_back({"next turn (SWA hit)", *turn, 0, EngineDelta::Of((*e)->GetStats()).Minus(d1)});
    // The next turn's own cold TTFT (a longer prompt), for its ratio.
    auto e2 = Make(o, *tok, nullptr, false);
    if (!e2.ok()) return fail(e2.status());
    auto next_cold = Run(**e2, next);
    if (!next_cold.ok()) return fail(next_cold.status());
    next_cold_ms = next_cold->ms;
  }
  for (auto [name, uri, exact] : {std::tuple<const char*, std::string, bool>{"store fs", fs_uri, false},
                                  {"store ec:10+2", ec_uri, false},
                                  {"store fs, exact replay", fs_uri, true}}) {
    if (!exact) {
      if (Status s = Prime(o, *tok, uri, prompt); !s.ok()) return fail(s);
    }
    auto store = Open(uri);
    if (!store.ok()) return fail(store.status());
    auto e = Make(o, *tok, *store, exact);
    if (!e.ok()) return fail(e.status());
    auto t = Run(**e, prompt);
    if (!t.ok()) return fail(t.status());
    rows.push_back({name, *t, (*e)->GetStats().kv_store_fetch_seconds_total * 1000, EngineDelta::Of((*e)->GetStats())});
    (*e)->Shutdown();
  }
  {
    // The fs store, now owned by a fetcher (the store admits one opener at a time).
    auto probe = Model::Create(ModelConfig{}, "");
    if (!probe.ok()) return fail(probe.status());
    kvcache::FetcherOptions fo;
    fo.store_uri = fs_uri;
    fo.socket_path = base + "/fetcher.sock";
    fo.block_bytes = (*probe)->NewKvStorage(1, 1)->block_bytes();
    fo.shm_bytes = (static_cast<size_t>(o.prompt) / 128 + 8) * fo.block_bytes;
    auto srv = kvcache::FetcherServer::Start(fo);
    if (!srv.ok()) return fail(srv.status());
    for (const char* name : {"fetcher: store read", "fetcher: shm hit"}) {
      auto store = kvcache::FetcherStore::Create(
          [sock = fo.socket_path] { return kvcache::FetcherClient::Connect(sock, std::chrono::seconds(5)); });
      if (!store.ok()) return fail(store.status());
      auto e = Make(o, *tok, *store, false);
      if (!e.ok()) return fail(e.status());
      const auto before = (*srv)->Stats();
      auto t = Run(**e, prompt);
      if (!t.ok()) return fail(t.status());
      const auto after = (*srv)->Stats();
      rows.push_back({fmt::format("{} ({} shm)", name, after.shm_hits - before.shm_hits), *t,
                      (*e)->GetStats().kv_store_fetch_seconds_total * 1000, EngineDelta::Of((*e)->GetStats())});
      (*e)->Shutdown();
    }
  }
  fmt::print("{:<30} {:>10} {:>9} {:>11} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "case", "TTFT ms", "vs cold", "cached tok",
             "replayed", "fetch ms", "copy ms", "hidden", "token");
  for (const Row& r : rows) {
    const double cold = r.name.rfind("next turn", 0) == 0 ? next_cold_ms : rows[0].t.ms;
    const bool copied = r.d.copy_s > 0;
    fmt::print("{:<30} {:>10.1f} {:>8.2f}x {:>11} {:>9} {:>9} {:>9} {:>8} {:>8}\n", r.name, r.t.ms, cold / r.t.ms, r.t.cached,
               r.d.replayed, r.fetch_ms > 0 ? fmt::format("{:.1f}", r.fetch_ms) : "-",
               copied ? fmt::format("{:.1f}", r.d.copy_s * 1000) : "-",
               copied ? fmt::format("{:.0f}%", 100.0 * (1.0 - r.d.exposed_s / r.d.copy_s)) : "-",
               r.t.tokens.empty() ? -1 : r.t.tokens[0]);
  }
  fmt::print("\nvs cold: cold TTFT / this TTFT (higher is faster; the next turn against its own prompt's cold TTFT, "
             "{:.1f} ms). cached tok: prompt tokens not recomputed (exact replay: whose KV was reused). replayed: tokens "
             "recomputed only to rebuild the SWA ring.\ncopy ms: swap-in copies into the KV storage (fetched blocks, SWA "
             "entries); hidden: the part of it that ran behind the forward's compute.\ntoken: the first greedy token (exact "
             "replay must equal cold's).\n", next_cold_ms);
  std::filesystem::remove_all(base);
  return 0;
}

}  // namespace
}  // namespace ladle::engine

int main(int argc, char** argv) { return ladle::engine::Main(argc, argv); }
