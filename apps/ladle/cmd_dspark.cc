// `ladle dspark fit`: distils a DSpark drafter (drafter.h) from the target model and saves it.
//   ladle dspark fit --out DIR [--model DIR] [--prompts N] [--gen-tokens T] [--draft-tokens 5]
//                    [--draft-vocab 0 (auto)] [--rank 32] [--seed S] [--heldout-fraction F]
//                    [--markov-epochs 2] [--eval-positions 6144]
// Prints progress lines, then the held-out acceptance of the full drafter, the backbone alone
// and the Markov head alone, and the calibration table. docs/engine.md, "Speculative decoding:
// the DSpark drafter".
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "ladle/engine/dspark_fit.h"
#include "ladle/engine/model.h"

namespace ladle::app {

namespace {

struct DsparkFitOpts {
  std::string out;
  std::string model;
  std::string model_config;  // sizes the built-in seeded model (as `ladle serve --model-config`)
  engine::FitOptions fit;
};

std::string Prefix(const std::vector<double>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += fmt::format("{}{:.3f}", k ? " " : "", v[k]);
  return s;
}

int RunFit(const DsparkFitOpts& o) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "ladle dspark fit: {}\n", s.ToString());
    return 1;
  };
  engine::ModelConfig mc;
  if (!o.model.empty() || !o.model_config.empty()) {
    auto c = engine::ModelConfig::FromFile(o.model.empty() ? o.model_config : o.model + "/config.json");
    if (!c.ok()) return fail(c.status());
    mc = *c;
  }
  auto model = engine::Model::Create(mc, o.model);
  if (!model.ok()) return fail(model.status());
  fmt::print("target: {}\n", o.model.empty() ? "built-in seeded model" : o.model);
  std::string last_phase;
  int last_bucket = -1;
  auto progress = [&](std::string_view phase, double f) {
    const int pct = static_cast<int>(f * 100);
    // One line per phase per 10%: readable in a log, not a flood.
    if (phase == last_phase && pct / 10 == last_bucket) return;
    last_phase = std::string(phase);
    last_bucket = pct / 10;
    fmt::print("  {:<10} {:3d}%\n", phase, pct);
    std::fflush(stdout);
  };
  auto rep = engine::FitDrafter(**model, o.fit, progress);
  if (!rep.ok()) return fail(rep.status());
  if (Status s = engine::SaveDrafter(rep->weights, o.out); !s.ok()) return fail(s);
  const auto& c = rep->weights.config;
  fmt::print("saved {}/drafter.json and {}/drafter.safetensors\n", o.out, o.out);
  fmt::print("draft vocab {} (covers {:.1f}% of generated tokens), gamma {}, rank {}\n", c.draft_vocab,
             100 * rep->vocab_coverage, c.draft_tokens, c.rank);
  fmt::print("sequences: {} train ({} positions), {} held out ({} positions)\n", rep->train_sequences,
             rep->train_positions, rep->heldout_sequences, rep->heldout_positions);
  fmt::print("held-out next tokens inside the draft vocab: {:.1f}% (the first draft's ceiling)\n",
             100 * rep->heldout_vocab_coverage);
  fmt::print("held-out mean acceptance length (1 + leading correct drafts, max {}; {} positions):\n",
             c.draft_tokens + 1, rep->evaluated_positions);
  fmt::print("  both           {:.3f}   prefix acceptance per k: {}\n", rep->both.acceptance_length,
             Prefix(rep->both.prefix_accept));
  fmt::print("  backbone only  {:.3f}   prefix acceptance per k: {}\n", rep->backbone_only.acceptance_length,
             Prefix(rep->backbone_only.prefix_accept));
  fmt::print("  markov only    {:.3f}   prefix acceptance per k: {}\n", rep->markov_only.acceptance_length,
             Prefix(rep->markov_only.prefix_accept));
  fmt::print("calibration ({} positions the confidence head did not see):\n", rep->calibration_positions);
  fmt::print("  k  predicted pi  observed  temperature  state ridge  validation NLL: features  chosen\n");
  for (size_t k = 0; k < rep->predicted_pi.size(); ++k) {
    const engine::ConfidenceChoice& ch = rep->confidence[k];
    fmt::print("  {}  {:12.3f}  {:8.3f}  {:11.3f}  {:>11}  {:24.4f}  {:6.4f}\n", k + 1, rep->predicted_pi[k],
               rep->observed_pi[k], rep->weights.conf_temperature[k],
               ch.lambda > 0 ? fmt::format("{:g}", ch.lambda) : std::string("unused"), ch.loss_features,
               ch.loss_chosen);
  }
  fmt::print("time: {:.1f} s (generate {:.1f} s, fit {:.1f} s, evaluate {:.1f} s)\n", rep->seconds_total,
             rep->seconds_generate, rep->seconds_fit, rep->seconds_total - rep->seconds_generate - rep->seconds_fit);
  return 0;
}

void RegisterDspark(CLI::App& app, RunFn* run) {
  auto* cmd = app.add_subcommand("dspark", "DSpark speculative decoding: the drafter");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<DsparkFitOpts>();
  auto* fit = cmd->add_subcommand("fit", "Distil a drafter from the target model (drafter.json + drafter.safetensors)");
  fit->add_option("--out", opts->out, "output folder")->required();
  fit->add_option("--model", opts->model, "target weights folder (config.json + *.safetensors); empty: built-in")
      ->capture_default_str();
  fit->add_option("--model-config", opts->model_config,
                  "config.json sizing the built-in seeded model (as `ladle serve --model-config`)");
  fit->add_option("--prompts", opts->fit.prompts, "synthetic prompts (sequences)")
      ->capture_default_str()
      ->check(CLI::Range(3, 1 << 20));
  fit->add_option("--gen-tokens", opts->fit.gen_tokens, "greedy tokens generated per prompt")->capture_default_str();
  fit->add_option("--draft-tokens", opts->fit.draft_tokens, "gamma: tokens drafted per pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  fit->add_option("--draft-vocab", opts->fit.draft_vocab,
                  "draft vocabulary size (at most); 0: the fewest frequent ids covering --draft-vocab-coverage of "
                  "the generated tokens, at most --draft-vocab-max")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  fit->add_option("--draft-vocab-coverage", opts->fit.draft_vocab_coverage, "with --draft-vocab 0")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  fit->add_option("--draft-vocab-max", opts->fit.draft_vocab_max, "with --draft-vocab 0")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  fit->add_option("--markov-epochs", opts->fit.markov_epochs, "Adam epochs of the Markov head")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  fit->add_option("--eval-positions", opts->fit.eval_positions,
                  "held-out positions the variants are compared on (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  fit->add_option("--rank", opts->fit.rank, "rank of the Markov head")->capture_default_str();
  fit->add_option("--seed", opts->fit.seed, "seed of the prompts and the Markov fit")->capture_default_str();
  fit->add_option("--heldout-fraction", opts->fit.heldout_fraction, "sequences held out for confidence and evaluation")
      ->capture_default_str();
  fit->callback([run, opts] { *run = [opts] { return RunFit(*opts); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterDspark);

}  // namespace ladle::app
