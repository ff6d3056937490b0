// eplb_engine_bench: the reference model's EP ranks on a skewed router (the built-in drifting
// Zipf bias), side by side in one run:
//   no EP        experts in the sequences' own threads (the throughput peer)
//   EP, static   EP ranks, no redundant slots, never re-arranged (a plain EP split)
//   EP + EPLB    EP ranks with redundant slots, re-arranged live every `--interval` steps
// Each runs the same decode-heavy batch for `--steps` forward steps and reports steps/s, token
// moe_lb (mean over layers, worst layer) and wall-time moe_lb (slowest rank's expert time over
// the mean) over the last 100 steps, plus re-arrangements, bytes moved and copy time.
//   eplb_engine_bench [--quick] [--ep 4] [--redundant 4] [--skew 1.0] [--steps 300] ...
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "ladle/engine/model.h"

namespace ladle::engine {
namespace {

struct Opts {
  bool quick = false;
  int ep = 4, redundant = 4, seqs = 32, steps = 300, prompt = 48;
  int interval = 20, window = 20;
  int experts = 32, top_k = 4, hidden = 256, expert_hidden = 256, layers = 2;
  double skew = 1.0;
  uint64_t half_life = 100000;
};

struct Result_ {
  double steps_per_s = 0;
  ExpertParallelStats st;
  bool ep = false;
};

Result<Result_> RunOne(const Opts& o, const ModelConfig& mc, const ExpertParallelConfig* ep) {
  LADLE_ASSIGN_OR_RETURN(auto m, Model::Create(mc, ""));
  if (ep != nullptr) LADLE_RETURN_IF_ERROR(m->ConfigureExpertParallel(*ep));
  const int blocks_per = (o.prompt + o.steps + mc.block_size - 1) / mc.block_size + 1;
  auto kv = m->NewKvStorage(blocks_per * o.seqs, o.seqs);
  if (!kv) return Status(StatusCode::kResourceExhausted, "KV storage");
  std::mt19937_64 rng(7);
  std::vector<std::vector<TokenId>> prompts(static_cast<size_t>(o.seqs));
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(o.seqs));
  for (int i = 0; i < o.seqs; ++i) {
    for (int j = 0; j < o.prompt; ++j) prompts[i].push_back(static_cast<TokenId>(rng() % mc.vocab_size));
    for (int b = 0; b < blocks_per; ++b) tables[i].push_back(i * blocks_per + b);
  }
  std::vector<int64_t> pos(static_cast<size_t>(o.seqs), 0);
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < o.steps; ++t) {
    std::vector<SeqStep> batch;
    std::vector<std::vector<TokenId>> toks(static_cast<size_t>(o.seqs));
    for (int i = 0; i < o.seqs; ++i) {
      SeqStep s;
      if (pos[i] == 0) {
        toks[i] = prompts[i];
        s.prefill = true;
      } else {
        toks[i] = {static_cast<TokenId>((pos[i] * 2654435761u + static_cast<uint64_t>(i)) % mc.vocab_size)};
      }
      s.tokens = toks[i];
      s.start_pos = pos[i];
      s.kv_written = pos[i];
      s.block_table = tables[i];
      s.swa_slot = i;
      batch.push_back(s);
    }
    LADLE_RETURN_IF_ERROR(m->Forward(batch, *kv, &logits));
    for (int i = 0; i < o.seqs; ++i) pos[i] += static_cast<int64_t>(toks[i].size());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result_ r;
  r.steps_per_s = o.steps / s;
  r.ep = m->GetExpertParallelStats(&r.st);
  return r;
}

int Main(int argc, char** argv) {
  Opts o;
  CLI::App app{"EP ranks on the reference model: no EP vs static EP vs EP + live EPLB, skewed router"};
  app.add_flag("--quick", o.quick, "100 steps, 16 sequences");
  app.add_option("--ep", o.ep, "EP ranks")->capture_default_str();
  app.add_option("--redundant", o.redundant, "redundant slots per rank (EP + EPLB)")->capture_default_str();
  app.add_option("--seqs", o.seqs, "sequences in the batch")->capture_default_str();
  app.add_option("--steps", o.steps, "forward steps")->capture_default_str();
  app.add_option("--interval", o.interval, "re-arrange every this many steps")->capture_default_str();
  app.add_option("--window", o.window, "load window in steps")->capture_default_str();
  app.add_option("--experts", o.experts, "routed experts")->capture_default_str();
  app.add_option("--top-k", o.top_k, "experts per token")->capture_default_str();
  app.add_option("--expert-hidden", o.expert_hidden, "expert FFN width")->capture_default_str();
  app.add_option("--skew", o.skew, "router bias Zipf exponent")->capture_default_str();
  app.add_option("--half-life", o.half_life, "router bias hot-set half-life (steps)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.steps = 100;
    o.seqs = 16;
  }
  ModelConfig mc;
  mc.vocab_size = 8192;
  mc.experts = o.experts;
  mc.experts_top_k = o.top_k;
  mc.expert_hidden = o.expert_hidden;
  mc.hidden = o.hidden;
  mc.encoder_layers = o.layers;
  mc.decoder_layers = o.layers;
  ExpertParallelConfig base;
  base.ranks = o.ep;
  base.router_skew = o.skew;
  base.router_skew_half_life = o.half_life;
  base.window_steps = static_cast<uint64_t>(o.window);
  ExpertParallelConfig fixed = base;
  fixed.redundant_per_rank = 0;
  fixed.interval_steps = 0;
  ExpertParallelConfig live = base;
  live.redundant_per_rank = o.redundant;
  live.interval_steps = static_cast<uint64_t>(o.interval);
  // The no-EP peer has no router bias (the bias is part of the EP ranks), so its routing is
  // unskewed: its row is the throughput of the same model without dispatch, not a moe_lb peer.
  fmt::print("eplb_engine_bench: EP{} on {} experts top-{} x {} MoE layers, expert {}x{}, {} sequences, {} steps, "
             "router skew {} (half-life {} steps)\n",
             o.ep, o.experts, o.top_k, 2 * o.layers, o.hidden, o.expert_hidden, o.seqs, o.steps, o.skew, o.half_life);
  auto none = RunOne(o, mc, nullptr);
  auto stat = RunOne(o, mc, &fixed);
  auto eplb = RunOne(o, mc, &live);
  if (!none.ok() || !stat.ok() || !eplb.ok()) {
    fmt::print(stderr, "eplb_engine_bench: {}\n",
               (!none.ok() ? none.status() : !stat.ok() ? stat.status() : eplb.status()).ToString());
    return 1;
  }
  fmt::print("{:<12} {:>8} {:>9} {:>18} {:>10} {:>8} {:>12} {:>10}\n", "run", "steps/s", "vs no EP", "moe_lb (worst)",
             "wall lb", "re-arr", "moved MiB", "copy ms");
  fmt::print("{:<12} {:>8.1f} {:>9.2f} {:>18} {:>10} {:>8} {:>12} {:>10}\n", "no EP (*)", none->steps_per_s, 1.0, "-", "-",
             "-", "-", "-");
  for (auto [name, r] : {std::pair<const char*, const Result_*>{"EP static", &*stat}, {"EP + EPLB", &*eplb}}) {
    fmt::print("{:<12} {:>8.1f} {:>9.2f} {:>18} {:>10.3f} {:>8} {:>12.1f} {:>10.2f}\n", name, r->steps_per_s,
               r->steps_per_s / none->steps_per_s, fmt::format("{:.3f} ({:.3f})", r->st.moe_lb_mean, r->st.moe_lb_max),
               r->st.moe_lb_wall, r->st.rearrangements, static_cast<double>(r->st.bytes_moved) / (1 << 20),
               r->st.last_rearrange_ms);
  }
  fmt::print("\n(*) no router bias: its routing is not skewed;\nmoe_lb and wall lb over the last {} steps; EP + EPLB's 'without EPLB' on its own tokens: {:.3f};\n"
             "wall lb: slowest rank's expert time over the mean (2 shared cores: ranks time-share, so this is noisy);\n"
             "copy ms: plan + copy of the last re-arrangement, off the forward path.\n",
             eplb->st.recent_steps, eplb->st.moe_lb_static);
  return 0;
}

}  // namespace
}  // namespace ladle::engine

int main(int argc, char** argv) { return ladle::engine::Main(argc, argv); }
