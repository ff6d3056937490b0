// engine_bench: the engine's figures for issue 5.
//   1. Budget tracking: chunked prefill under the time budget; for each step whose prefill
//      was cut to fit, |measured step time − budget| / budget, p50 and p95.
//   2. Async scheduling: device idle fraction and tokens/s, async on vs off, at batch ≥ 8.
// Runs the reference model (default, built-in weights) or, with --fake, a stand-in whose
// step time is simulated (for a quick check of the scheduler alone).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "ladle/engine/cost_model.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/tokenizer/tokenizer.h"

using namespace ladle;
using namespace ladle::engine;

namespace {

// Simulated model: busy-waits a fixed + per-token time; logits are a cheap hash.
class SimModel : public Model {
 public:
  SimModel(double step_ns, double token_ns, double ctx_ns) : step_(step_ns), tok_(token_ns), ctx_(ctx_ns) {
    cfg_.vocab_size = 32000;
  }
  const ModelConfig& config() const override { return cfg_; }
  class Kv : public KvStorage {
   public:
    Kv(int b, int s) : b_(b), s_(s) {}
    int num_blocks() const override { return b_; }
    int num_slots() const override { return s_; }
    void CopySlot(int, int) override {}
    size_t bytes() const override { return 0; }
    int b_, s_;
  };
  std::unique_ptr<KvStorage> NewKvStorage(int b, int s) const override { return std::make_unique<Kv>(b, s); }
  Status Forward(std::span<const SeqStep> batch, KvStorage&, std::vector<float>* logits) override {
    const auto t0 = std::chrono::steady_clock::now();
    double ns = step_;
    logits->clear();
    for (const auto& s : batch) {
      ns += tok_ * s.tokens.size() + ctx_ * s.tokens.size() * s.start_pos;
      if (!s.want_logits) continue;
      const size_t at = logits->size();
      logits->resize(at + cfg_.vocab_size);
      uint64_t x = s.start_pos * 0x9E3779B97F4A7C15ull + s.tokens.back();
      for (int v = 0; v < cfg_.vocab_size; ++v) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        (*logits)[at + v] = static_cast<float>(x >> 40) * 1e-6f;
      }
    }
    while (std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() < ns) {
    }
    return Status::Ok();
  }

 private:
  double step_, tok_, ctx_;
  ModelConfig cfg_;
};

struct RunResult {
  double wall_s = 0;
  uint64_t tokens = 0;
  double idle = 0;
  std::vector<StepRecord> steps;
};

Result<std::unique_ptr<Model>> NewModel(bool fake) {
  if (fake) return std::unique_ptr<Model>(new SimModel(2e6, 20e3, 5.0));
  return Model::Create(ModelConfig{}, "");
}

// `host_us`: busy time the sink spends per Output, standing in for the server's share of
// post-processing (detokenised text to protocol events, socket writes).
Result<RunResult> RunWorkload(EngineConfig cfg, bool fake, const tokenizer::Tokenizer& tok, int requests,
                              int prompt_len, int max_tokens, double host_us = 0) {
  RunResult rr;
  std::mutex mu;
  cfg.on_step = [&](const StepRecord& r) {
    std::lock_guard lk(mu);
    rr.steps.push_back(r);
  };
  LADLE_ASSIGN_OR_RETURN(auto model, NewModel(fake));
  LADLE_ASSIGN_OR_RETURN(auto engine, CreateEngine(cfg, std::move(model), tok));
  std::condition_variable cv;
  int done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < requests; ++r) {
    SubmitRequest req;
    for (int i = 0; i < prompt_len; ++i) req.prompt.push_back(static_cast<TokenId>(100 + (i * 37 + r * 1009) % 30000));
    req.sampling.temperature = 0.7f;
    req.sampling.seed = r;
    req.sampling.max_tokens = max_tokens;
    req.sampling.ignore_eos = true;
    auto id = engine->Submit(std::move(req), [&](const Output& o) {
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < host_us) {
      }
      if (!o.finished) return;
      std::lock_guard lk(mu);
      ++done;
      cv.notify_all();
    });
    if (!id.ok()) return id.status();
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done == requests; });
  }
  rr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = engine->GetStats();
  rr.tokens = st.generated_tokens;
  rr.idle = st.device_idle_fraction;
  engine->Shutdown();
  std::lock_guard lk(mu);
  return rr;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine_bench: budget tracking, device idle (async on/off), tokens/s"};
  bool fake = false;
  int batch = 8, decode_tokens = 32, prefill_requests = 4, prefill_len = 2048;
  double budget_ms = 0, host_us = 0;
  std::string tokenizer_path = std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  std::string cost_path;
  app.add_flag("--fake", fake, "simulated model instead of the reference model");
  app.add_option("--batch", batch, "concurrent decode requests (async on/off runs)");
  app.add_option("--decode-tokens", decode_tokens, "tokens generated per request");
  app.add_option("--prefill-requests", prefill_requests, "requests in the budget run");
  app.add_option("--prefill-len", prefill_len, "prompt length in the budget run");
  app.add_option("--budget-ms", budget_ms, "step budget (default: twice a batch decode step)");
  app.add_option("--host-us", host_us, "simulated host work per output (µs) in the async runs");
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json");
  app.add_option("--cost-model", cost_path, "cost model file (load if present, else profile and save)");
  CLI11_PARSE(app, argc, argv);

  auto tok = tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  EngineConfig base;
  base.num_blocks = 512;
  base.max_running = std::max(batch, prefill_requests);
  base.cost_model_path = cost_path;

  // Async on/off at batch ≥ 8 (decode-heavy: short prompts, `decode_tokens` each).
  std::printf("%-10s %8s %8s %10s %12s %10s\n", "async", "batch", "host_us", "tokens", "tokens/s", "idle");
  double first_step_ms = 0;
  for (bool async : {false, true}) {
    EngineConfig c = base;
    c.chunk_policy = "fixed";
    c.chunk_tokens = 512;
    c.async_scheduling = async;
    auto r = RunWorkload(c, fake, *tok, batch, 32, decode_tokens, host_us);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    std::vector<double> decode_ms;
    for (const auto& s : r->steps)
      if (s.prefills == 0 && s.decodes == batch) decode_ms.push_back(s.forward_ns / 1e6);
    first_step_ms = std::max(first_step_ms, Percentile(decode_ms, 0.5));
    std::printf("%-10s %8d %8.0f %10llu %12.1f %9.3f%%\n", async ? "on" : "off", batch, host_us,
                static_cast<unsigned long long>(r->tokens), r->tokens / r->wall_s, 100.0 * r->idle);
  }

  // Budget tracking: long prompts chunked under the time budget.
  EngineConfig c = base;
  c.chunk_policy = "time";
  c.chunk_tokens = 1 << 20;  // the budget alone decides
  c.step_budget_ns = static_cast<int64_t>((budget_ms > 0 ? budget_ms : std::max(5.0, 2 * first_step_ms)) * 1e6);
  auto r = RunWorkload(c, fake, *tok, prefill_requests, prefill_len, 4);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 1;
  }
  std::vector<double> err, pred_err;
  for (const auto& s : r->steps) {
    if (!s.budget_bound) continue;
    err.push_back(std::abs(s.forward_ns - s.budget_ns) / s.budget_ns);
    pred_err.push_back(std::abs(s.forward_ns - s.predicted_ns) / s.predicted_ns);
  }
  std::printf("\nbudget %.1f ms, %zu budget-bound steps of %zu\n", c.step_budget_ns / 1e6, err.size(), r->steps.size());
  std::printf("|step − budget| / budget:     p50 %.1f%%  p95 %.1f%%\n", 100 * Percentile(err, 0.5),
              100 * Percentile(err, 0.95));
  std::printf("|step − predicted| / predicted: p50 %.1f%%  p95 %.1f%%\n", 100 * Percentile(pred_err, 0.5),
              100 * Percentile(pred_err, 0.95));
  return 0;
}
