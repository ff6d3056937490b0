#include "ladle/engine/spec_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string_view>

#include "ladle/core/numbers.h"
#include "ladle/engine/model.h"

namespace ladle::engine {
namespace {

// One verify candidate: draft k of request i, worth π[i][k] expected tokens.
struct Candidate {
  double pi;
  int k;
  int i;
};

// π descending; ties by lower k, then lower i. (k, i) is unique, so this is a strict total order
// and every sort (or selection) of the same candidates gives the same sequence, and a request's
// candidates, whose π never increases with k, stay in prefix order.
bool Before(const Candidate& a, const Candidate& b) {
  if (a.pi != b.pi) return a.pi > b.pi;
  if (a.k != b.k) return a.k < b.k;
  return a.i < b.i;
}

std::vector<Candidate> Candidates(std::span<const std::vector<float>> confidences) {
  std::vector<Candidate> out;
  size_t total = 0;
  for (const auto& c : confidences) total += c.size();
  out.reserve(total);
  for (size_t i = 0; i < confidences.size(); ++i) {
    const std::vector<double> pi = AcceptanceProducts(confidences[i]);
    for (size_t k = 0; k < pi.size(); ++k) out.push_back({pi[k], static_cast<int>(k), static_cast<int>(i)});
  }
  return out;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

constexpr std::string_view kSpsMagic = "ladle-sps/v1";
// Context every profiled sequence already holds: a verify step attends over the request's
// global KV, so a step at position 0 would under-charge it. Shrunk when the pool is tiny.
constexpr int64_t kProfileContext = 256;

}  // namespace

double SpsTable::At(int64_t b) const {
  const size_t n = std::min(tokens.size(), sps.size());
  if (n == 0) return 0.0;
  if (b <= tokens[0]) return sps[0];
  auto it = std::lower_bound(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n), b);
  if (it != tokens.begin() + static_cast<std::ptrdiff_t>(n)) {
    const size_t hi = static_cast<size_t>(it - tokens.begin());
    if (*it == b) return sps[hi];
    const size_t lo = hi - 1;
    const double f = static_cast<double>(b - tokens[lo]) / static_cast<double>(tokens[hi] - tokens[lo]);
    return sps[lo] + f * (sps[hi] - sps[lo]);
  }
  if (n == 1) return sps[0];
  // Past the table: time per step grows linearly along the last segment's slope. A table whose
  // last segment got faster (noise in a hand-written file) extrapolates flat: more tokens never
  // make a step faster.
  const double t1 = 1.0 / sps[n - 2], t2 = 1.0 / sps[n - 1];
  const double slope = std::max(0.0, (t2 - t1) / static_cast<double>(tokens[n - 1] - tokens[n - 2]));
  return 1.0 / (t2 + slope * static_cast<double>(b - tokens[n - 1]));
}

Status SpsTable::Validate() const {
  if (tokens.empty()) return InvalidArgument("SPS table is empty");
  if (tokens.size() != sps.size())
    return InvalidArgument(fmt::format("SPS table has {} token counts but {} rates", tokens.size(), sps.size()));
  if (tokens[0] < 1) return InvalidArgument(fmt::format("SPS table starts at {} tokens (must be >= 1)", tokens[0]));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && tokens[i] <= tokens[i - 1])
      return InvalidArgument(fmt::format("SPS table tokens not strictly increasing at {} after {}", tokens[i],
                                         tokens[i - 1]));
    if (!std::isfinite(sps[i]) || sps[i] <= 0)
      return InvalidArgument(fmt::format("SPS table rate at {} tokens is {} (must be finite and > 0)", tokens[i],
                                         sps[i]));
  }
  return Status::Ok();
}

Status SpsTable::Save(const std::string& path) const {
  LADLE_RETURN_IF_ERROR(Validate().WithContext("saving " + path));
  std::ofstream f(path, std::ios::trunc);
  if (!f) return IoError(fmt::format("cannot write SPS table {}", path));
  f << kSpsMagic << '\n';
  for (size_t i = 0; i < tokens.size(); ++i) f << fmt::format("{} {:.17g}\n", tokens[i], sps[i]);
  return f.good() ? Status::Ok() : IoError(fmt::format("cannot write SPS table {}", path));
}

Result<SpsTable> SpsTable::Load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return IoError(fmt::format("cannot read SPS table {}", path));
  std::string line;
  if (!std::getline(f, line) || Fields(line).size() != 1 || Fields(line)[0] != kSpsMagic)
    return InvalidArgument(fmt::format("{}: not an SPS table (first line must be \"{}\")", path, kSpsMagic));
  SpsTable t;
  int line_no = 1;
  while (std::getline(f, line)) {
    ++line_no;
    const auto fields = Fields(line);
    if (fields.empty()) continue;  // blank lines (a trailing newline, hand edits) are harmless
    // Whole fields only (no trailing junk, unlike operator>>, which reads "12.5" as 12).
    const std::optional<int64_t> tok = fields.size() == 2 ? ParseI64(fields[0]) : std::nullopt;
    const std::optional<double> rate = fields.size() == 2 ? ParseDouble(fields[1]) : std::nullopt;
    if (!tok || !rate)
      return InvalidArgument(fmt::format("{}:{}: expected \"tokens sps\", got \"{}\"", path, line_no, line));
    t.tokens.push_back(*tok);
    t.sps.push_back(*rate);
  }
  if (f.bad()) return IoError(fmt::format("cannot read SPS table {}", path));
  LADLE_RETURN_IF_ERROR(t.Validate().WithContext(path));
  return t;
}

Result<SpsTable> ProfileSps(Model& model, KvStorage& kv, int64_t max_tokens, int span, int repeats) {
  if (max_tokens < 1) return InvalidArgument(fmt::format("SPS profile: max_tokens {} must be >= 1", max_tokens));
  if (span < 1) return InvalidArgument(fmt::format("SPS profile: span {} must be >= 1", span));
  const int64_t bs = model.config().block_size;
  if (bs < 1 || kv.num_slots() < 1 || kv.num_blocks() < 1)
    return InvalidArgument("SPS profile needs at least one KV slot and block");
  // Each sequence gets its own blocks for context + span, so no two steps of a batch write (or
  // read what another writes in) the same block, as in a real batch.
  int64_t ctx = kProfileContext;
  auto blocks_for = [&](int64_t c) { return (c + span + bs - 1) / bs; };
  if (blocks_for(ctx) > kv.num_blocks()) ctx = std::max<int64_t>(0, kv.num_blocks() * bs - span);
  const int64_t per_seq = blocks_for(ctx);
  if (per_seq > kv.num_blocks())
    return InvalidArgument(fmt::format("SPS profile: a span of {} tokens needs {} KV blocks, the pool has {}", span,
                                       per_seq, kv.num_blocks()));
  // The grid stops where slots or blocks run out; a caller sees that as a table ending below
  // max_tokens (At extrapolates past it).
  const int64_t max_seqs =
      std::min<int64_t>({kv.num_slots(), kv.num_blocks() / per_seq, (max_tokens + span - 1) / span});
  const int64_t cap = std::min<int64_t>(max_tokens, max_seqs * span);

  // Powers of two and the 1.5x points between them: a GPU's curve is flat up to a knee and then
  // rises, and the doubling grid alone would place the knee only within a factor of 2.
  std::vector<int64_t> grid;
  for (int64_t b = 1; b <= cap; b *= 2) {
    grid.push_back(b);
    if (b >= 2 && b + b / 2 <= cap) grid.push_back(b + b / 2);
  }
  grid.push_back(cap);
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());

  // Distinct ordinary ids per sequence (timing does not depend on which, but a batch of
  // identical sequences would route every token to the same experts).
  const int64_t len = ctx + span;
  const int64_t vocab_span = std::max<int64_t>(1, std::min<int64_t>(20000, model.config().vocab_size - 3));
  std::vector<std::vector<TokenId>> toks(static_cast<size_t>(max_seqs), std::vector<TokenId>(static_cast<size_t>(len)));
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(max_seqs));
  for (int64_t s = 0; s < max_seqs; ++s) {
    for (int64_t j = 0; j < len; ++j)
      toks[s][j] = static_cast<TokenId>(3 + ((s * 1000003 + j) * 7919) % vocab_span);
    for (int64_t b = 0; b < per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s * per_seq + b));
  }
  std::vector<float> logits;
  if (ctx > 0) {  // lay down every sequence's context (untimed), all in one batch
    std::vector<SeqStep> pre(static_cast<size_t>(max_seqs));
    for (int64_t s = 0; s < max_seqs; ++s) {
      SeqStep& st = pre[s];
      st.tokens = std::span<const TokenId>(toks[s].data(), static_cast<size_t>(ctx));
      st.start_pos = 0;
      st.block_table = tables[s];
      st.swa_slot = static_cast<int32_t>(s);
      st.prefill = true;
      st.want_logits = false;
    }
    LADLE_RETURN_IF_ERROR(model.Forward(pre, kv, &logits).WithContext("SPS profile context"));
  }

  // A verify step of B tokens: full spans over as many sequences as needed, the last one
  // partial, each asking for logits of all its tokens. Re-running it at the same position is a
  // rollback of at most `span` tokens, which is what a rejected verify does anyway.
  auto time_one = [&](int64_t b, double* ns) -> Status {
    const int64_t seqs = (b + span - 1) / span;
    std::vector<SeqStep> batch(static_cast<size_t>(seqs));
    for (int64_t s = 0; s < seqs; ++s) {
      const int64_t n = std::min<int64_t>(span, b - s * span);
      SeqStep& st = batch[s];
      st.tokens = std::span<const TokenId>(toks[s].data() + ctx, static_cast<size_t>(n));
      st.start_pos = ctx;
      st.block_table = tables[s];
      st.swa_slot = static_cast<int32_t>(s);
      st.prefill = false;
      st.want_logits = true;
      st.logits_count = static_cast<int>(n);
    }
    const auto t0 = std::chrono::steady_clock::now();
    LADLE_RETURN_IF_ERROR(model.Forward(batch, kv, &logits));
    *ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  };
  SpsTable table;
  double slowest = 1.0;  // ns; never 0, so every rate is finite
  for (int64_t b : grid) {
    // Median of `repeats` after one warm-up: a descheduled thread on a shared machine inflates
    // single timings. A point whose timings already add up to kPointBudgetNs stops early: a
    // scheduler blip is small next to steps that long, and the large points (the whole LM head
    // once per token on a CPU) would otherwise make start-up profiling take tens of seconds.
    constexpr double kPointBudgetNs = 200e6;
    double warm = 0;
    LADLE_RETURN_IF_ERROR(time_one(b, &warm).WithContext(fmt::format("SPS profile at {} tokens", b)));
    std::vector<double> t;
    double spent = 0;
    while (static_cast<int>(t.size()) < std::max(1, repeats) && (t.empty() || spent < kPointBudgetNs)) {
      double v = 0;
      LADLE_RETURN_IF_ERROR(time_one(b, &v).WithContext(fmt::format("SPS profile at {} tokens", b)));
      t.push_back(v);
      spent += v;
    }
    // The lower median: of two timings the faster, which is the one less disturbed.
    const size_t mid = (t.size() - 1) / 2;
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(mid), t.end());
    // Running max: a real curve is noisy, and a step that got faster with more tokens would
    // make PlanVerify chase the noise.
    slowest = std::max(slowest, t[mid]);
    table.tokens.push_back(b);
    table.sps.push_back(1e9 / slowest);
  }
  LADLE_RETURN_IF_ERROR(table.Validate().WithContext("SPS profile"));
  return table;
}

std::vector<double> AcceptanceProducts(std::span<const float> confidences) {
  std::vector<double> out;
  out.reserve(confidences.size());
  double p = 1.0;
  for (float c : confidences) {
    // NaN (a broken drafter) counts as "never accepted" rather than poisoning the sort.
    const double x = std::isnan(c) ? 0.0 : std::clamp(static_cast<double>(c), 0.0, 1.0);
    p *= x;
    out.push_back(p);
  }
  return out;
}

double StepRate(const SpsTable& sps, int64_t b, int64_t n, double draft_cost) {
  const double rate = sps.At(b);
  if (!(draft_cost > 0.0) || b <= n) return rate;
  return 1.0 / (1.0 / rate + static_cast<double>(b - n) * draft_cost);
}

VerifyPlan PlanVerify(std::span<const std::vector<float>> confidences, const SpsTable& sps, int64_t max_tokens,
                      double draft_cost) {
  VerifyPlan plan;
  const int64_t n = static_cast<int64_t>(confidences.size());
  plan.lengths.assign(confidences.size(), 0);
  if (n == 0) return plan;
  // Every request's own token is verified whatever the cap: a cap below N adds no drafts but
  // drops no request.
  plan.tokens = n;
  plan.expected = static_cast<double>(n);
  plan.theta = plan.expected * StepRate(sps, plan.tokens, n, draft_cost);
  std::vector<Candidate> cands = Candidates(confidences);
  std::sort(cands.begin(), cands.end(), Before);
  for (const Candidate& c : cands) {
    if (max_tokens > 0 && plan.tokens + 1 > max_tokens) break;
    const double tau = plan.expected + c.pi;
    const double theta = tau * StepRate(sps, plan.tokens + 1, n, draft_cost);
    // The paper's early break. A later candidate alone could not pass either (its π is no larger
    // and it would be priced at the same SPS(B + 1)); what the break gives up is a later group
    // that pays off together past a drop in SPS. That is Algorithm 1 as published, kept exactly.
    if (!(theta > plan.theta)) break;
    ++plan.lengths[c.i];
    ++plan.tokens;
    plan.expected = tau;
    plan.theta = theta;
  }
  return plan;
}

std::vector<int> TopKLengths(std::span<const std::vector<float>> confidences, int64_t capacity) {
  std::vector<int> lengths(confidences.size(), 0);
  const int64_t k = capacity - static_cast<int64_t>(confidences.size());
  if (k <= 0) return lengths;
  std::vector<Candidate> cands = Candidates(confidences);
  if (k < static_cast<int64_t>(cands.size())) {
    // Before is a strict total order, so the selected set is exactly the first k of the sort.
    std::nth_element(cands.begin(), cands.begin() + k, cands.end(), Before);
    cands.resize(static_cast<size_t>(k));
  }
  for (const Candidate& c : cands) ++lengths[c.i];
  return lengths;
}

namespace {

class FixedSpecPolicy final : public SpecPolicy {
 public:
  explicit FixedSpecPolicy(int n) : n_(std::max(0, n)) {}
  std::string name() const override { return fmt::format("fixed:{}", n_); }
  int draft_tokens() const override { return n_; }
  int64_t Capacity(std::span<const std::vector<float>> confidences) const override {
    int64_t b = 0;
    for (const auto& c : confidences) b += std::min<int64_t>(n_, static_cast<int64_t>(c.size())) + 1;
    return b;
  }
  // Fixed length by definition: neither the confidences nor the capacity change it.
  std::vector<int> Lengths(std::span<const std::vector<float>> confidences, int64_t /*capacity*/) const override {
    std::vector<int> out;
    out.reserve(confidences.size());
    for (const auto& c : confidences) out.push_back(std::min(n_, static_cast<int>(c.size())));
    return out;
  }

 private:
  int n_;
};

class DsparkSpecPolicy final : public SpecPolicy {
 public:
  DsparkSpecPolicy(int draft_tokens, SpsTable sps, int64_t max_tokens)
      : draft_tokens_(std::max(0, draft_tokens)), sps_(std::move(sps)), max_tokens_(max_tokens) {}
  std::string name() const override { return "dspark"; }
  int draft_tokens() const override { return draft_tokens_; }
  int64_t Capacity(std::span<const std::vector<float>> confidences) const override {
    return PlanVerify(confidences, sps_, max_tokens_, draft_cost_.load(std::memory_order_relaxed)).tokens;
  }
  std::vector<int> Lengths(std::span<const std::vector<float>> confidences, int64_t capacity) const override {
    return TopKLengths(confidences, capacity);
  }
  int UsefulDrafts(int64_t requests, double max_pi) const override {
    return DsparkCandidateBound(sps_, requests, max_tokens_, draft_tokens_, max_pi,
                                draft_cost_.load(std::memory_order_relaxed));
  }
  // Set on the device thread, read by the scheduler's Capacity too.
  void SetDraftCost(double seconds_per_position) override {
    draft_cost_.store(std::max(0.0, seconds_per_position), std::memory_order_relaxed);
  }

 private:
  int draft_tokens_;
  SpsTable sps_;
  int64_t max_tokens_;
  std::atomic<double> draft_cost_{0.0};
};

}  // namespace

int DsparkCandidateBound(const SpsTable& sps, int64_t requests, int64_t max_tokens, int limit, double max_pi,
                         double draft_cost) {
  if (requests <= 0) return 0;
  int m = 0;
  for (int64_t b = requests; m < limit; ++b, ++m) {
    if (max_tokens > 0 && b + 1 > max_tokens) break;
    const double ratio = StepRate(sps, b, requests, draft_cost) / StepRate(sps, b + 1, requests, draft_cost);
    if (static_cast<double>(requests) * (ratio - 1.0) >= std::min(1.0, max_pi)) break;
  }
  return m;
}

std::unique_ptr<SpecPolicy> MakeFixedSpecPolicy(int n) { return std::make_unique<FixedSpecPolicy>(n); }

std::unique_ptr<SpecPolicy> MakeDsparkSpecPolicy(int draft_tokens, SpsTable sps, int64_t max_tokens) {
  return std::make_unique<DsparkSpecPolicy>(draft_tokens, std::move(sps), max_tokens);
}

}  // namespace ladle::engine
