// eplb_engine_bench: the reference model's EP ranks on a skewed router (the built-in drifting
// Zipf bias), side by side in one run:
//   no EP        experts in the sequences' own threads (the throughput peer)
//   EP, static   EP ranks, no redundant slots, never re-arranged (a plain EP split)
//   EP + EPLB    EP ranks with redundant slots, re-arranged live every `--interval` steps
// Each runs the same decode-heavy batch for `--steps` forward steps and reports steps/s, token
// moe_lb (mean over layers, worst layer) and wall-time moe_lb (slowest rank's expert time over
// the mean) over the last 100 steps, plus re-arrangements, bytes moved and copy time.
//   eplb_engine_bench [--quick] [--ep 4] [--redundant 4] [--skew 1.0] [--steps 300] ...
//
// --record-loads FILE records a load trace (include/ladle/eplb/load_trace.h) for eplb_bench
// --loads instead: per step and MoE layer, the tokens the model's router sends to each
// expert. The per-expert counts of a forward are internal to the model (no API returns
// them), so the recorder runs the router directly: the built-in seeded model's own router
// weights, MoE norms and embeddings (sized by --model-config), the engine's router bias for
// --skew / --half-life (checked bit for bit against the bias a real EP forward uses), and the
// model's selection rule (top-k of logits + bias, ties to the lower expert). Its input is
// the RMS-normed token embedding, not the residual stream after the layers below (attention
// and the FFNs are not run). Each step routes --record-tokens uniform random tokens, one per
// decode sequence. docs/eplb.md, "Load traces".
//   eplb_engine_bench --record-loads FILE --model-config bench/eplb/router_v3_tiny.json
//       --record-steps 5000 --record-tokens 8192 --skew 1.0 --half-life 10000
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "expert_parallel.h"
#include "kernels.h"
#include "ladle/engine/model.h"
#include "ladle/eplb/load_trace.h"
#include "ladle/eplb/skewed_load.h"
#include "ref_model.h"
#include "weights.h"

namespace ladle::engine {
namespace {

struct Opts {
  bool quick = false;
  int ep = 4, redundant = 4, seqs = 32, steps = 300, prompt = 48;
  int interval = 20, window = 20;
  int experts = 32, top_k = 4, hidden = 256, expert_hidden = 256, layers = 2;
  double skew = 1.0;
  uint64_t half_life = 100000;
  std::string model_config;  // a config.json sizing the built-in model (replaces the shape flags)
  // --record-loads
  std::string record_path;
  uint64_t record_steps = 5000;
  uint32_t record_tokens = 8192;
  uint64_t token_seed = 1;
  int threads = 2;
  int record_check = 0;  // decode steps of the real-forward check (0: none)
};

struct Result_ {
  double steps_per_s = 0;
  ExpertParallelStats st;
  bool ep = false;
};

// Sequence i's decode token at position pos (RunOne's batch; RecordLoads' check replays it).
TokenId DecodeToken(int64_t pos, int i, int vocab) {
  return static_cast<TokenId>((pos * 2654435761u + static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
}

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
        toks[i] = {DecodeToken(pos[i], i, mc.vocab_size)};
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

// The engine's router bias for `ep` (expert_parallel.cc builds it the same way): checked
// against a real EP forward in RecordLoads.
eplb::SkewConfig EngineSkew(const ModelConfig& mc, uint32_t moe_layers, const ExpertParallelConfig& ep) {
  eplb::SkewConfig sc;
  sc.layers = moe_layers;
  sc.experts = static_cast<uint32_t>(mc.experts);
  sc.top_k = static_cast<uint32_t>(mc.experts_top_k);
  sc.zipf_s = ep.router_skew;
  sc.half_life_steps = std::max<uint64_t>(1, ep.router_skew_half_life);
  sc.drift_every_steps = std::max<uint64_t>(1, sc.half_life_steps / 100);
  sc.seed = ep.router_skew_seed;
  return sc;
}

uint64_t Mix(uint64_t x) {  // SplitMix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The model's selection rule (RefModel::Moe): the K largest of logits + bias, ties to the
// lower expert, written in descending order.
void TopK(const float* logits, std::span<const float> bias, int E, int K, uint16_t* out) {
  float val[64];
  int idx[64];
  int n = 0;
  for (int e = 0; e < E; ++e) {
    const float v = bias.empty() ? logits[e] : logits[e] + bias[static_cast<size_t>(e)];
    if (n == K && !(v > val[K - 1])) continue;  // equal: the lower expert already there wins
    int j = n < K ? n++ : K - 1;
    while (j > 0 && v > val[j - 1]) {
      val[j] = val[j - 1];
      idx[j] = idx[j - 1];
      --j;
    }
    val[j] = v;
    idx[j] = e;
  }
  for (int j = 0; j < K; ++j) out[j] = static_cast<uint16_t>(idx[j]);
}

// The recorder's routing against a real forward: the engine runs RunOne's batch (o.seqs
// sequences, a prefill step, then o.record_check decode steps) on EP ranks with no redundant
// slots that never re-arrange, under the same router bias, and reports moe_lb over its last
// recent_steps steps (all decode). The recorder routes the same decode tokens of the same
// steps through its embedding-only router, and both are measured the same way: per layer on
// the engine's placement (EPLB from uniform loads) and on the contiguous layout. Equal values
// would mean the residual stream the recorder leaves out does not change the load.
Status CheckAgainstEngine(const Opts& o, const ModelConfig& mc, const model::Floats& logits, uint32_t L,
                          const eplb::SkewConfig& skew) {
  const int E = mc.experts, K = mc.experts_top_k, V = mc.vocab_size;
  Opts run = o;
  run.steps = o.record_check + 1;
  ExpertParallelConfig ep;
  ep.ranks = o.ep;
  ep.redundant_per_rank = 0;
  ep.interval_steps = 0;
  ep.window_steps = static_cast<uint64_t>(o.window);
  ep.router_skew = o.skew;
  ep.router_skew_half_life = o.half_life;
  const auto t0 = std::chrono::steady_clock::now();
  LADLE_ASSIGN_OR_RETURN(Result_ engine, RunOne(run, mc, &ep));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t recent = engine.st.recent_steps, last = static_cast<uint64_t>(run.steps);
  if (recent + 1 > last) {
    return InvalidArgument("--record-check: needs at least 100 decode steps (the engine's ring of recent steps)");
  }
  // The recorder's counts over the same steps for sequences first .. first + seqs - 1 (first 0:
  // the engine's own tokens; first = seqs: other tokens, the sampling-noise floor).
  auto route = [&](int first) -> Result<eplb::ExpertLoads> {
    LADLE_ASSIGN_OR_RETURN(auto gen, eplb::SkewedLoadGenerator::Create(skew));
    eplb::ExpertLoads sums(L, static_cast<uint32_t>(E));
    std::vector<uint16_t> top(static_cast<size_t>(K));
    for (uint64_t step = last - recent + 1; step <= last; ++step) {  // engine steps, 1-based; 1 is the prefill
      const int64_t pos = o.prompt + static_cast<int64_t>(step) - 2;
      for (uint32_t l = 0; l < L; ++l) {
        const std::vector<float> bias = o.skew > 0 ? gen.RouterBias(step, l) : std::vector<float>();
        for (int i = first; i < first + o.seqs; ++i) {
          const TokenId v = DecodeToken(pos, i, V);
          TopK(logits.data() + (size_t{l} * V + static_cast<size_t>(v)) * E, bias, E, K, top.data());
          for (int k = 0; k < K; ++k) sums.At(l, top[static_cast<size_t>(k)]) += 1;
        }
      }
    }
    return sums;
  };
  LADLE_ASSIGN_OR_RETURN(eplb::ExpertLoads same, route(0));
  LADLE_ASSIGN_OR_RETURN(eplb::ExpertLoads other, route(o.seqs));
  eplb::ExpertLoads uniform(L, static_cast<uint32_t>(E));
  for (uint32_t l = 0; l < L; ++l) std::fill(uniform.Row(l).begin(), uniform.Row(l).end(), 1.0);
  const eplb::PlacementConfig cfg{eplb::PhysicalExpertCount(static_cast<uint32_t>(E), 0, static_cast<uint32_t>(o.ep)),
                                  1, 1, static_cast<uint32_t>(o.ep)};
  LADLE_ASSIGN_OR_RETURN(eplb::Placement placement, eplb::RebalanceExperts(uniform, cfg));
  const eplb::MoeLbSummary ours = eplb::MeasureMoeLb(placement, same), noise = eplb::MeasureMoeLb(placement, other);
  const double ours_static = eplb::MeasureMoeLbWithoutEplb(same, static_cast<uint32_t>(o.ep)).mean;
  // Agreement across layers: mean absolute difference and Pearson correlation.
  auto agree = [L](const std::vector<double>& a, const std::vector<double>& b) {
    double mad = 0, ma = 0, mb = 0;
    for (uint32_t l = 0; l < L; ++l) {
      mad += std::abs(a[l] - b[l]) / L;
      ma += a[l] / L;
      mb += b[l] / L;
    }
    double cov = 0, va = 0, vb = 0;
    for (uint32_t l = 0; l < L; ++l) {
      cov += (a[l] - ma) * (b[l] - mb);
      va += (a[l] - ma) * (a[l] - ma);
      vb += (b[l] - mb) * (b[l] - mb);
    }
    return std::pair<double, double>(mad, va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 0.0);
  };
  const std::vector<double>& theirs = engine.st.moe_lb_per_layer;
  const auto [mad, corr] = agree(ours.per_layer, theirs);
  const auto [mad_noise, corr_noise] = agree(ours.per_layer, noise.per_layer);
  fmt::print("check against a real forward ({} sequences, steps {}..{}, EP{} without redundant slots, {:.1f} s):\n"
             "  moe_lb mean over layers (worst): engine {:.4f} ({:.4f}), recorder {:.4f} ({:.4f})\n"
             "  contiguous layout: engine {:.4f}, recorder {:.4f}\n"
             "  per layer, recorder vs engine: mean |difference| {:.4f}, correlation {:.3f}\n"
             "  per layer, recorder vs recorder on {} other sequences (the sampling noise): mean |difference| {:.4f}, "
             "correlation {:.3f}\n",
             o.seqs, last - recent + 1, last, o.ep, secs, engine.st.moe_lb_mean, engine.st.moe_lb_max, ours.mean,
             ours.max, engine.st.moe_lb_static, ours_static, mad, corr, o.seqs, mad_noise, corr_noise);
  return Status::Ok();
}

Status RecordLoads(const Opts& o, const ModelConfig& mc) {
  const auto t_start = std::chrono::steady_clock::now();
  const int E = mc.experts, K = mc.experts_top_k, H = mc.hidden, V = mc.vocab_size;
  if (K > 64 || E > 65536) return InvalidArgument("--record-loads: at most 64 experts per token and 65,536 experts");
  if (o.record_steps == 0 || o.record_tokens == 0) return InvalidArgument("--record-loads: steps and tokens must be >= 1");
  const uint64_t table_bytes =
      uint64_t{static_cast<uint32_t>(mc.encoder_layers + mc.decoder_layers)} * V * E * sizeof(float);
  if (table_bytes > (uint64_t{2} << 30)) {
    return InvalidArgument(fmt::format("--record-loads: the logit table (layers x vocab x experts) would take {} MiB; "
                                       "use a smaller vocab_size",
                                       table_bytes >> 20));
  }
  LADLE_ASSIGN_OR_RETURN(auto m, Model::Create(mc, ""));
  auto* ref = dynamic_cast<model::RefModel*>(m.get());
  if (ref == nullptr) return Internal("--record-loads: the built-in model is not the reference model");
  const model::ModelWeights& w = ref->weights();
  std::vector<const model::MoeWeights*> moe;  // forward order, as the EP ranks number them
  for (const model::LayerWeights& lw : w.encoder) moe.push_back(&lw.moe);
  for (const model::LayerWeights& lw : w.decoder) moe.push_back(&lw.moe);
  const uint32_t L = static_cast<uint32_t>(moe.size());

  ExpertParallelConfig ep;
  ep.ranks = 1;
  ep.interval_steps = 0;
  ep.router_skew = o.skew;
  ep.router_skew_half_life = o.half_life;
  const eplb::SkewConfig skew = EngineSkew(mc, L, ep);
  if (o.skew > 0) {
    // One real EP forward (step 1), then its bias against ours for step 1.
    LADLE_RETURN_IF_ERROR(m->ConfigureExpertParallel(ep));
    auto kv = m->NewKvStorage(1, 1);
    if (!kv) return ResourceExhausted("KV storage");
    const std::vector<TokenId> tok{1};
    const std::vector<int32_t> table{0};
    SeqStep st;
    st.tokens = tok;
    st.block_table = table;
    st.swa_slot = 0;
    st.prefill = true;
    std::vector<float> logits;
    LADLE_RETURN_IF_ERROR(m->Forward(std::span<const SeqStep>(&st, 1), *kv, &logits));
    LADLE_ASSIGN_OR_RETURN(auto gen, eplb::SkewedLoadGenerator::Create(skew));
    for (uint32_t l = 0; l < L; ++l) {
      const std::span<const float> engine = ref->expert_parallel()->RouterBias(static_cast<int>(l));
      const std::vector<float> ours = gen.RouterBias(1, l);
      if (engine.size() != ours.size() || std::memcmp(engine.data(), ours.data(), ours.size() * sizeof(float)) != 0) {
        return Internal(fmt::format("--record-loads: layer {}'s router bias differs from the engine's", l));
      }
    }
    ExpertParallelConfig off;
    LADLE_RETURN_IF_ERROR(m->ConfigureExpertParallel(off));  // frees the EP copies
  }

  // logits[l][v][e]: the router of MoE layer l on token v's RMS-normed embedding.
  model::Floats logits(static_cast<size_t>(L) * V * E), normed(static_cast<size_t>(V) * H);
  for (uint32_t l = 0; l < L; ++l) {
    model::RmsNorm(w.embed, V, H, moe[l]->norm, mc.rms_eps, normed.data());
    model::Linear(normed.data(), V, H, moe[l]->router, E, logits.data() + size_t{l} * V * E);
  }

  std::ofstream f(o.record_path, std::ios::binary);
  if (!f) return IoError("cannot create " + o.record_path);
  eplb::LoadTraceHeader header{
      .layers = L, .experts = static_cast<uint32_t>(E), .top_k = static_cast<uint32_t>(K),
      .source = fmt::format(
          "eplb_engine_bench --record-loads: the reference model's router (built-in seeded weights, {}), on the "
          "RMS-normed embeddings of {} uniform random tokens per step (token seed {}), router bias skew {} "
          "half-life {} steps (epochs {}) seed {}",
          ModelFingerprint(mc), o.record_tokens, o.token_seed, o.skew, skew.half_life_steps, skew.drift_every_steps,
          skew.seed)};
  LADLE_ASSIGN_OR_RETURN(eplb::LoadTraceWriter writer, eplb::LoadTraceWriter::Create(&f, header));

  // Steps go in chunks: the main thread draws each step's tokens, the workers route them (each
  // its own layers, with its own generator: the generator is not thread-safe), then the main
  // thread writes the chunk.
  const uint64_t chunk = 50;
  const int T = std::max(1, o.threads);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> hist(chunk);  // per step: (token, count)
  std::vector<uint64_t> counts(chunk * L * E);
  std::vector<std::vector<float>> bias(L);
  std::vector<std::vector<uint16_t>> route(L, std::vector<uint16_t>(static_cast<size_t>(V) * K));
  std::vector<uint64_t> totals(size_t{L} * E, 0);  // over the whole trace, for the summary
  std::vector<uint32_t> seen(static_cast<size_t>(V), 0);
  std::atomic<uint64_t> reroutes{0};
  std::vector<eplb::SkewedLoadGenerator> gens;
  for (int t = 0; t < T; ++t) {
    LADLE_ASSIGN_OR_RETURN(auto g, eplb::SkewedLoadGenerator::Create(skew));
    gens.push_back(std::move(g));
  }
  for (uint64_t first = 1; first <= o.record_steps; first += chunk) {
    const uint64_t n = std::min(chunk, o.record_steps - first + 1);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t step = first + i;
      hist[i].clear();
      std::fill(seen.begin(), seen.end(), 0);
      for (uint32_t j = 0; j < o.record_tokens; ++j) {
        ++seen[Mix(Mix(o.token_seed ^ (step << 20)) + j) % static_cast<uint64_t>(V)];
      }
      for (int v = 0; v < V; ++v) {
        if (seen[static_cast<size_t>(v)] > 0) hist[i].emplace_back(static_cast<uint32_t>(v), seen[static_cast<size_t>(v)]);
      }
    }
    std::fill(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(n * L * E), 0);
    auto work = [&](int t) {
      for (uint32_t l = static_cast<uint32_t>(t); l < L; l += static_cast<uint32_t>(T)) {
        const float* lg = logits.data() + size_t{l} * V * E;
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t step = first + i;
          std::vector<float> b = o.skew > 0 ? gens[static_cast<size_t>(t)].RouterBias(step, l) : std::vector<float>();
          if (step == 1 || b != bias[l]) {  // a new drift epoch: re-route every token
            bias[l] = std::move(b);
            for (int v = 0; v < V; ++v) {
              TopK(lg + static_cast<size_t>(v) * E, bias[l], E, K, route[l].data() + static_cast<size_t>(v) * K);
            }
            reroutes.fetch_add(1, std::memory_order_relaxed);
          }
          uint64_t* c = counts.data() + (i * L + l) * E;
          const uint16_t* r = route[l].data();
          for (auto [v, cnt] : hist[i]) {
            for (int k = 0; k < K; ++k) c[r[static_cast<size_t>(v) * K + static_cast<size_t>(k)]] += cnt;
          }
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < T; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
    for (uint64_t i = 0; i < n; ++i) {
      const std::span<const uint64_t> step_counts(counts.data() + i * L * E, size_t{L} * E);
      for (size_t x = 0; x < step_counts.size(); ++x) totals[x] += step_counts[x];
      LADLE_RETURN_IF_ERROR(writer.Append(first + i, step_counts));
    }
  }
  f.flush();
  if (!f) return IoError("cannot write " + o.record_path);
  // The realised skew: the hottest expert's share of a layer's tokens over the whole trace,
  // relative to the mean share, averaged over layers.
  double hot = 0;
  for (uint32_t l = 0; l < L; ++l) {
    const auto row = std::span<const uint64_t>(totals).subspan(size_t{l} * E, static_cast<size_t>(E));
    const double sum = static_cast<double>(std::accumulate(row.begin(), row.end(), uint64_t{0}));
    hot += static_cast<double>(*std::max_element(row.begin(), row.end())) * E / sum / L;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  fmt::print("eplb_engine_bench: recorded {} steps x {} MoE layers x {} experts ({} tokens/step, top-{}) to {} in "
             "{:.1f} s ({} re-routings of a layer's vocabulary); the hottest expert over the trace takes {:.2f}x the "
             "mean share (mean over layers)\n",
             o.record_steps, L, E, o.record_tokens, K, o.record_path, secs, reroutes.load(), hot);
  if (o.record_check > 0) LADLE_RETURN_IF_ERROR(CheckAgainstEngine(o, mc, logits, L, skew));
  return Status::Ok();
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
  app.add_option("--model-config", o.model_config,
                 "config.json sizing the built-in seeded model (replaces --experts, --top-k, --expert-hidden)");
  app.add_option("--record-loads", o.record_path,
                 "record a load trace from the model's router to this file instead of the comparison");
  app.add_option("--record-steps", o.record_steps, "steps recorded")->capture_default_str();
  app.add_option("--record-tokens", o.record_tokens, "tokens per recorded step (decode sequences)")->capture_default_str();
  app.add_option("--token-seed", o.token_seed, "seed of the recorded steps' tokens")->capture_default_str();
  app.add_option("--threads", o.threads, "recording threads (MoE layers are split between them)")->capture_default_str();
  app.add_option("--record-check", o.record_check,
                 "then compare the recorder's routing with a real forward of --seqs sequences on --ep ranks over this "
                 "many decode steps (>= 100; 0: no check)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.steps = 100;
    o.seqs = 16;
  }
  ModelConfig mc;
  if (!o.model_config.empty()) {
    auto c = ModelConfig::FromFile(o.model_config);
    if (!c.ok()) {
      fmt::print(stderr, "eplb_engine_bench: {}\n", c.status().ToString());
      return 1;
    }
    mc = *c;
  } else {
    mc.vocab_size = 8192;
    mc.experts = o.experts;
    mc.experts_top_k = o.top_k;
    mc.expert_hidden = o.expert_hidden;
    mc.hidden = o.hidden;
    mc.encoder_layers = o.layers;
    mc.decoder_layers = o.layers;
  }
  if (!o.record_path.empty()) {
    if (Status s = RecordLoads(o, mc); !s.ok()) {
      fmt::print(stderr, "eplb_engine_bench: {}\n", s.ToString());
      return 1;
    }
    return 0;
  }
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
             o.ep, mc.experts, mc.experts_top_k, mc.encoder_layers + mc.decoder_layers, mc.hidden, mc.expert_hidden, o.seqs,
             o.steps, o.skew, o.half_life);
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
