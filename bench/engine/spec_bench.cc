// spec_bench: speculative decoding on the reference model (issue 17's benchmark). At each
// concurrency, in one run, the same held-out prompts (a seed the drafter was not fitted on)
// go through three engines: off, fixed:N and dspark. Printed per (concurrency, mode):
// tokens/s, per-user tokens/s, mean accepted length (tokens emitted per verify step of a
// request), verify tokens per forward step, and the mean verify budget L per request; then
// the ratios dspark / fixed and dspark / off. --svg plots the verify budget per request
// against concurrency (the paper's Fig. 8 shape: long when the load is light, shrinking as it
// rises) and throughput of the three modes.
//
//   spec_bench --draft DIR [--concurrency 1,4,16,64] [--max-tokens 64] [--svg out.svg]
//
// Without --draft it fits one first (`ladle dspark fit`'s defaults, a few minutes) into
// --fit-dir and reuses it on later runs.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <optional>
#include <mutex>
#include <random>

#include "ladle/engine/dspark_fit.h"
#include "ladle/engine/engine_config.h"
#include "ladle/engine/model.h"
#include "ladle/tokenizer/tokenizer.h"

using namespace ladle;
using namespace ladle::engine;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  int conc = 0;
  std::string mode;
  double wall_s = 0, tok_s = 0, user_tok_s = 0;
  double accept_len = 0, verify_per_step = 0, mean_l = 0;
  uint64_t tokens = 0;
};

// Held-out prompts: ordinary ids from a seed of their own.
std::vector<std::vector<TokenId>> Prompts(int n, int len, uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> id(3, static_cast<TokenId>(std::min(100000, vocab - 1)));
  std::vector<std::vector<TokenId>> out(static_cast<size_t>(n));
  for (auto& p : out)
    for (int i = 0; i < len; ++i) p.push_back(id(rng));
  return out;
}

Result<Row> RunOne(Engine& eng, const std::vector<std::vector<TokenId>>& prompts, int max_tokens, std::atomic<uint64_t>* steps) {
  const Stats before = eng.GetStats();
  const uint64_t steps_before = steps->load();
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<Clock::time_point> end(prompts.size());
  std::vector<uint64_t> count(prompts.size(), 0);
  std::string error;
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = eng.Submit({prompts[i], p, nullptr}, [&, i](const Output& o) {
      std::lock_guard lk(mu);
      count[i] += o.tokens.size();
      if (o.finished) {
        if (!o.error.empty()) error = o.error;
        end[i] = Clock::now();
        ++done;
        cv.notify_all();
      }
    });
    if (!id.ok()) return id.status();
  }
  {
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, std::chrono::minutes(20), [&] { return done == prompts.size(); }))
      return Internal("requests did not finish in 20 minutes");
  }
  if (!error.empty()) return Internal(error);
  Row r;
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  double user = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    r.tokens += count[i];
    user += static_cast<double>(count[i]) / std::chrono::duration<double>(end[i] - t0).count();
  }
  r.tok_s = static_cast<double>(r.tokens) / r.wall_s;
  r.user_tok_s = user / static_cast<double>(prompts.size());
  const Stats after = eng.GetStats();
  uint64_t req_steps = 0;
  for (size_t l = 0; l < after.spec_verify_lengths.size(); ++l)
    req_steps += after.spec_verify_lengths[l] - (l < before.spec_verify_lengths.size() ? before.spec_verify_lengths[l] : 0);
  const uint64_t drafts = after.spec_draft_tokens - before.spec_draft_tokens;
  const uint64_t acc = after.spec_accepted_tokens - before.spec_accepted_tokens;
  const uint64_t ver = after.spec_verify_tokens - before.spec_verify_tokens;
  const uint64_t fwd = steps->load() - steps_before;
  r.accept_len = req_steps ? static_cast<double>(req_steps + acc) / static_cast<double>(req_steps) : 1.0;
  r.mean_l = req_steps ? static_cast<double>(drafts) / static_cast<double>(req_steps) : 0.0;
  r.verify_per_step = fwd ? static_cast<double>(req_steps ? ver : r.tokens) / static_cast<double>(fwd) : 0.0;
  return r;
}

std::string Svg(const std::vector<Row>& rows, const std::vector<int>& concs) {
  const int W = 760, H = 330, pad = 60, pw = 300, ph = 220;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H);
  auto x_of = [&](size_t i, int x0) { return x0 + static_cast<double>(i) * pw / std::max<size_t>(1, concs.size() - 1); };
  const std::map<std::string, std::string> color = {{"off", "#888"}, {"fixed", "#1f77b4"}, {"dspark", "#d62728"}};
  auto panel = [&](int x0, const std::string& title, auto value, double ymax, std::vector<std::string> modes) {
    s += fmt::format("<text x=\"{}\" y=\"20\" font-weight=\"bold\">{}</text>\n", x0, title);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>", x0, 30 + ph, x0 + pw, 30 + ph);
    s += fmt::format("<line x1=\"{}\" y1=\"30\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", x0, x0, 30 + ph);
    for (size_t i = 0; i < concs.size(); ++i)
      s += fmt::format("<text x=\"{:.0f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", x_of(i, x0), 48 + ph, concs[i]);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">concurrency</text>\n", x0 + pw / 2, 64 + ph);
    for (int t = 0; t <= 4; ++t)
      s += fmt::format("<text x=\"{}\" y=\"{:.0f}\" text-anchor=\"end\">{:.3g}</text>", x0 - 4, 34 + ph - t * ph / 4.0,
                       ymax * t / 4);
    int li = 0;
    for (const auto& m : modes) {
      std::string pts;
      for (size_t i = 0; i < concs.size(); ++i)
        for (const Row& r : rows)
          if (r.conc == concs[i] && r.mode.rfind(m, 0) == 0)
            pts += fmt::format("{:.1f},{:.1f} ", x_of(i, x0), 30 + ph - value(r) / ymax * ph);
      const std::string c = color.at(m);
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts, c);
      s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", x0 + pw - 60, 44 + 14 * li++, c, m);
    }
  };
  double lmax = 1, tmax = 1;
  for (const Row& r : rows) lmax = std::max(lmax, r.mean_l), tmax = std::max(tmax, r.tok_s);
  panel(pad, "verify budget L per request (drafts)", [](const Row& r) { return r.mean_l; }, std::ceil(lmax),
        {"fixed", "dspark"});
  panel(pad + pw + 80, "throughput (tokens/s)", [](const Row& r) { return r.tok_s; }, tmax * 1.1,
        {"off", "fixed", "dspark"});
  return s + "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"speculative decoding: off vs fixed:N vs dspark on the reference model"};
  std::string draft, fit_dir = std::string(LADLE_BENCH_CACHE_DIR) + "/dspark-drafter", svg, sps_path;
  std::string tokenizer_path = std::string(LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  std::vector<int> concs = {1, 4, 16, 64};
  int max_tokens = 64, prompt_len = 64, fixed_n = 5, repeats = 1;
  uint64_t seed = 20261206;
  bool async = true;
  std::string model_config;
  app.add_option("--model-config", model_config, "config.json sizing the built-in seeded model (default: ModelConfig{})");
  app.add_option("--draft", draft, "drafter folder (default: fit one into --fit-dir when missing)");
  app.add_option("--fit-dir", fit_dir, "where a fitted drafter is cached")->capture_default_str();
  app.add_option("--concurrency", concs, "concurrent requests per run")->delimiter(',')->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "tokens generated per request")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens")->capture_default_str();
  app.add_option("--fixed", fixed_n, "N of the fixed:N mode")->capture_default_str();
  app.add_option("--seed", seed, "held-out prompt seed (not the fit's)")->capture_default_str();
  app.add_option("--repeats", repeats, "runs per point (the fastest kept)")->capture_default_str();
  app.add_option("--sps", sps_path, "SPS table file (profiled and saved when missing)");
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json")->capture_default_str();
  app.add_option("--svg", svg, "write the plot here");
  app.add_flag("!--no-async", async, "async scheduling off");
  CLI11_PARSE(app, argc, argv);

  ModelConfig mc;
  if (!model_config.empty()) {
    auto c = ModelConfig::FromFile(model_config);
    if (!c.ok()) return fmt::print(stderr, "{}\n", c.status().ToString()), 1;
    mc = *c;
  }
  auto tok = tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) return fmt::print(stderr, "tokenizer: {}\n", tok.status().ToString()), 1;
  if (draft.empty()) {
    draft = fit_dir;
    if (!std::filesystem::exists(fit_dir + "/drafter.safetensors")) {
      auto target = Model::Create(mc, "");
      if (!target.ok()) return fmt::print(stderr, "{}\n", target.status().ToString()), 1;
      fmt::print("fitting a drafter into {} (once) ...\n", fit_dir);
      auto rep = FitDrafter(**target, FitOptions{}, [](std::string_view phase, double f) {
        static std::string last;
        const std::string key = fmt::format("{} {:.0f}", phase, f * 10);
        if (key != last) fmt::print(stderr, "  {} {:.0f}%\n", phase, f * 100), last = key;
      });
      if (!rep.ok()) return fmt::print(stderr, "fit: {}\n", rep.status().ToString()), 1;
      if (Status st = SaveDrafter(rep->weights, fit_dir); !st.ok()) return fmt::print(stderr, "{}\n", st.ToString()), 1;
      fmt::print("drafter fitted: acceptance length {:.2f} (held-out)\n", rep->both.acceptance_length);
    }
  }
  auto drafter = Drafter::Load(draft);
  if (!drafter.ok()) return fmt::print(stderr, "drafter: {}\n", drafter.status().ToString()), 1;
  std::shared_ptr<const Drafter> d = std::move(drafter).value();

  const std::vector<std::string> modes = {"off", fmt::format("fixed:{}", fixed_n), "dspark"};
  std::vector<Row> rows;
  std::atomic<uint64_t> steps{0};
  // All three engines live at once and take turns at each point (mode order rotating with the
  // repeat), so drift on a shared machine hits them alike: the ratios are side by side.
  std::vector<std::unique_ptr<Engine>> engines;
  for (const std::string& mode : modes) {
    auto model = Model::Create(mc, "");
    if (!model.ok()) return fmt::print(stderr, "{}\n", model.status().ToString()), 1;
    EngineConfig c;
    c.max_running = std::max(64, *std::max_element(concs.begin(), concs.end()));
    c.num_blocks = c.max_running * ((prompt_len + max_tokens + 8) / 128 + 2);
    c.async_scheduling = async;
    c.speculative = mode;
    c.drafter = d;
    c.draft_tokens = d->config().draft_tokens;
    c.spec_sps_path = sps_path;
    c.prefix_cache = false;
    c.chunk_policy = "fixed";  // prompts are short: no cost-model profile per engine
    c.on_step = [&](const StepRecord& r) {
      if (r.decodes > 0) steps += 1;
    };
    auto eng = CreateEngine(c, std::move(model).value(), *tok);
    if (!eng.ok()) return fmt::print(stderr, "{}: {}\n", mode, eng.status().ToString()), 1;
    // Warm-up at the largest concurrency (threads, caches, first touch of the KV pool).
    (void)RunOne(**eng, Prompts(*std::max_element(concs.begin(), concs.end()), prompt_len, seed + 99, mc.vocab_size),
                 8, &steps);
    engines.push_back(std::move(eng).value());
  }
  for (int conc : concs) {
    std::vector<std::optional<Row>> best(modes.size());
    for (int rep = 0; rep < repeats; ++rep) {
      for (size_t j = 0; j < modes.size(); ++j) {
        const size_t m = (j + static_cast<size_t>(rep)) % modes.size();
        auto r = RunOne(*engines[m], Prompts(conc, prompt_len, seed + static_cast<uint64_t>(conc), mc.vocab_size),
                        max_tokens, &steps);
        if (!r.ok()) return fmt::print(stderr, "{} c={}: {}\n", modes[m], conc, r.status().ToString()), 1;
        if (!best[m] || r->tok_s > best[m]->tok_s) best[m] = *r;
      }
    }
    for (size_t m = 0; m < modes.size(); ++m) {
      best[m]->conc = conc;
      best[m]->mode = modes[m];
      rows.push_back(*best[m]);
      fmt::print(stderr, "  {:>8} c={:<3} {:8.1f} tok/s\n", modes[m], conc, best[m]->tok_s);
    }
  }
  fmt::print("\n{:>5} {:>8} {:>10} {:>12} {:>11} {:>14} {:>9}\n", "conc", "mode", "tokens/s", "user tok/s",
             "accept len", "verify/step", "mean L");
  for (int conc : concs)
    for (const Row& r : rows)
      if (r.conc == conc)
        fmt::print("{:>5} {:>8} {:>10.1f} {:>12.2f} {:>11.2f} {:>14.1f} {:>9.2f}\n", r.conc, r.mode, r.tok_s,
                   r.user_tok_s, r.accept_len, r.verify_per_step, r.mean_l);
  fmt::print("\n{:>5} {:>16} {:>16}\n", "conc", "dspark/fixed", "dspark/off");
  for (int conc : concs) {
    double off = 0, fixed = 0, ds = 0;
    for (const Row& r : rows) {
      if (r.conc != conc) continue;
      if (r.mode == "off") off = r.tok_s;
      if (r.mode.rfind("fixed", 0) == 0) fixed = r.tok_s;
      if (r.mode == "dspark") ds = r.tok_s;
    }
    fmt::print("{:>5} {:>16.3f} {:>16.3f}\n", conc, fixed > 0 ? ds / fixed : 0, off > 0 ? ds / off : 0);
  }
  if (!svg.empty()) {
    std::ofstream f(svg, std::ios::trunc);
    f << Svg(rows, concs);
    if (!f.good()) return fmt::print(stderr, "cannot write {}\n", svg), 1;
    fmt::print("\nwrote {}\n", svg);
  }
  return 0;
}
