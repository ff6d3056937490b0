#include "ladle/structured/mask_provider.h"

#include <algorithm>
#include <cstring>

#include "ladle/core/logging.h"

namespace ladle::structured {

namespace {
// Spare tokens left when the provider stops trusting the byte-level check and forces the
// shortest completion: re-tokenising a completion after one token can cost a token more
// than the token saved, so the check keeps this much room for that.
constexpr uint32_t kCommitSlack = 3;
// While max_tokens leaves at least this many tokens beyond the completion's byte count
// (which bounds its tokens), no token count is computed.
constexpr uint32_t kPlanSlack = 16;
}  // namespace

MaskOptions MaskOptionsFor(frontend::ModelVersion version, const tokenizer::Tokenizer& version_tok,
                           bool ends_in_thinking, int n, uint32_t max_tokens, bool budget_aware) {
  MaskOptions o;
  o.n = std::max(1, n);
  o.max_tokens = max_tokens;
  o.budget_aware = budget_aware;
  o.starts_in_reasoning = ends_in_thinking;
  o.trigger_id = frontend::SpecialTokensFor(version).end_think;
  if (!o.trigger_id) {
    // R1 (and V3): "</think>" is ordinary text to this tokenizer.
    o.trigger_tokens = version_tok.EncodePlain(o.trigger_text);
  } else {
    o.trigger_tokens = {*o.trigger_id};
  }
  return o;
}

struct StructuredMaskProvider::Sample {
  explicit Sample(std::shared_ptr<const grammar::CompiledGrammar> g, const grammar::MatcherOptions& mo)
      : matcher(std::move(g), mo) {}
  grammar::GrammarMatcher matcher;
  bool waiting_trigger = false;  // lazy: free until a tool-call trigger
  bool reasoning = false;
  uint32_t generated = 0;
  std::string tail;          // R1: the last output bytes, to find "</think>" across tokens
  size_t trigger_pos = 0;    // how many trigger_tokens the budget has forced so far
  bool forced = false;
  bool reported_reject = false;
  // The completion the budget committed to (ApplyTokenBudget), forced token by token.
  std::vector<engine::TokenId> plan;
  size_t plan_pos = 0;
};

StructuredMaskProvider::StructuredMaskProvider(std::shared_ptr<const CompiledConstraint> constraint, MaskOptions opts)
    : constraint_(std::move(constraint)), opts_(std::move(opts)) {
  grammar::MatcherOptions mo;
  mo.budget_aware = opts_.budget_aware;
  mo.margin = opts_.margin;
  matcher_opts_ = mo;
  for (size_t k = 0; k < constraint_->triggers.size(); ++k) {
    max_trigger_text_ = std::max(max_trigger_text_, constraint_->triggers[k].text.size());
  }
  for (int i = 0; i < std::max(1, opts_.n); ++i) {
    auto s = std::make_unique<Sample>(constraint_->grammar, mo);
    s->waiting_trigger = !constraint_->triggers.empty();
    s->reasoning = opts_.starts_in_reasoning && !s->waiting_trigger;
    samples_.push_back(std::move(s));
  }
  failures_.resize(samples_.size());
  const Sample& first = *samples_.front();
  if (!first.waiting_trigger) {
    if (auto plan = first.matcher.ShortestCompletion()) {
      const size_t marker = first.reasoning ? opts_.trigger_tokens.size() : 0;
      min_tokens_ = static_cast<uint32_t>(plan->size() + marker + 1);
    }
  }
}

StructuredMaskProvider::~StructuredMaskProvider() = default;

size_t StructuredMaskProvider::Clamp(int index) const {
  // The engine only asks for indices below n; clamp rather than crash on a stray one.
  return std::min(static_cast<size_t>(std::max(0, index)), samples_.size() - 1);
}

StructuredMaskProvider::Sample& StructuredMaskProvider::At(int index) { return *samples_[Clamp(index)]; }

bool StructuredMaskProvider::forced(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= samples_.size()) return false;
  return samples_[static_cast<size_t>(index)]->forced;
}

bool StructuredMaskProvider::constrained(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= samples_.size()) return false;
  const Sample& s = *samples_[static_cast<size_t>(index)];
  return !s.reasoning && !s.waiting_trigger;
}

void StructuredMaskProvider::FillMask(int index, uint64_t* bits, size_t vocab_size) {
  Sample& s = At(index);
  const size_t words = (vocab_size + 63) / 64;
  const uint32_t remaining = opts_.max_tokens > s.generated ? opts_.max_tokens - s.generated : 0;
  if (s.waiting_trigger) {
    std::fill(bits, bits + words, ~uint64_t{0});
    if (vocab_size % 64) bits[words - 1] = (uint64_t{1} << (vocab_size % 64)) - 1;
    return;
  }
  if (s.reasoning) {
    const size_t left = opts_.trigger_tokens.size() - std::min(s.trigger_pos, opts_.trigger_tokens.size());
    // The marker, the shortest answer, EOS and the margin must still fit.
    uint64_t need = uint64_t{s.matcher.ShortestCompletionTokens()} + left + 1 + opts_.margin;
    if (opts_.budget_aware && left > 0 && remaining <= need) {
      // That count is in bytes, a loose upper bound for markup: count the answer's tokens
      // before cutting the reasoning short.
      if (auto plan = s.matcher.ShortestCompletion()) need = plan->size() + left + 1 + opts_.margin;
    }
    if (opts_.budget_aware && left > 0 && remaining <= need) {
      // Out of room for reasoning: close it now so the answer still fits.
      std::memset(bits, 0, words * sizeof(uint64_t));
      const engine::TokenId t = opts_.trigger_tokens[s.trigger_pos];
      if (t < vocab_size) bits[t >> 6] |= uint64_t{1} << (t & 63);
      s.forced = true;
      forced_.store(true, std::memory_order_relaxed);
      return;
    }
    std::fill(bits, bits + words, ~uint64_t{0});
    if (vocab_size % 64) bits[words - 1] = (uint64_t{1} << (vocab_size % 64)) - 1;
    return;
  }
  if (opts_.budget_aware && ApplyTokenBudget(s, remaining, bits, words, vocab_size)) return;
  const size_t gwords = (constraint_->grammar->vocab().vocab_size() + 63) / 64;
  if (gwords == words) {
    s.matcher.FillNextTokenMask(bits);
  } else {
    // The model has a different number of logit columns than the grammar's vocabulary:
    // ids only one side knows are never allowed.
    std::vector<uint64_t> tmp(gwords, 0);
    s.matcher.FillNextTokenMask(tmp.data());
    std::memset(bits, 0, words * sizeof(uint64_t));
    std::memcpy(bits, tmp.data(), std::min(words, gwords) * sizeof(uint64_t));
    if (vocab_size % 64 && words <= gwords) bits[words - 1] &= (uint64_t{1} << (vocab_size % 64)) - 1;
  }
  if (!s.forced && s.matcher.ForcedByBudget()) {
    s.forced = true;
    forced_.store(true, std::memory_order_relaxed);
  }
  if (!s.matcher.status().ok()) {
    std::lock_guard lk(failure_mu_);
    std::string& f = failures_[Clamp(index)];
    if (f.empty()) f = s.matcher.status().ToString();
  }
}

bool StructuredMaskProvider::ApplyTokenBudget(Sample& s, uint32_t remaining, uint64_t* bits, size_t words,
                                              size_t vocab_size) {
  auto force = [&](engine::TokenId t) {
    std::memset(bits, 0, words * sizeof(uint64_t));
    if (t < vocab_size) bits[t >> 6] |= uint64_t{1} << (t & 63);
    s.forced = true;
    forced_.store(true, std::memory_order_relaxed);
    return true;
  };
  if (s.plan_pos < s.plan.size()) return force(s.plan[s.plan_pos]);
  // One token is kept back for EOS: the budget covers the document, and a document that
  // closes on the very last token would still finish as "length".
  const uint32_t doc = remaining > 0 ? remaining - 1 : 0;
  const uint32_t bytes = s.matcher.ShortestCompletionTokens();
  if (bytes == 0 || bytes == UINT32_MAX || uint64_t{doc} >= uint64_t{bytes} + kPlanSlack) {
    // Far from the end: the byte-level check alone is safe (a completion of B bytes is at
    // most B tokens) and costs nothing until it bites.
    s.matcher.SetRemainingTokens(doc);
    return false;
  }
  std::optional<std::vector<engine::TokenId>> plan = s.matcher.ShortestCompletion();
  if (!plan || plan->empty()) {
    s.matcher.SetRemainingTokens(doc);
    return false;
  }
  const auto need = static_cast<uint32_t>(plan->size());
  if (uint64_t{doc} <= uint64_t{need} + kCommitSlack) {
    // Out of slack: write the shortest completion. If even it does not fit (a budget the
    // server should have refused), this still gets as far as it can.
    s.plan = std::move(*plan);
    s.plan_pos = 0;
    return force(s.plan[0]);
  }
  // `slack` spare tokens: allow only tokens that grow the byte completion by less than the
  // slack less the commit reserve (each added byte costs at most one token), so the next
  // step still has room to commit.
  const uint32_t slack = doc - need;
  s.matcher.SetRemainingTokens(bytes + slack - kCommitSlack);
  return false;
}

std::string StructuredMaskProvider::Failure(int index) {
  std::lock_guard lk(failure_mu_);
  if (index < 0 || static_cast<size_t>(index) >= failures_.size()) return {};
  return failures_[static_cast<size_t>(index)];
}

void StructuredMaskProvider::Accept(int index, engine::TokenId token) {
  Sample& s = At(index);
  ++s.generated;
  if (s.waiting_trigger) {
    WatchTriggers(s, token);
    return;
  }
  if (s.reasoning) {
    if (s.trigger_pos < opts_.trigger_tokens.size() && opts_.trigger_tokens[s.trigger_pos] == token) {
      ++s.trigger_pos;
    } else {
      s.trigger_pos = 0;
    }
    if (opts_.trigger_id) {
      if (token == *opts_.trigger_id) s.reasoning = false;
      return;
    }
    s.tail += constraint_->grammar->vocab().TokenBytes(token);
    const size_t at = s.tail.find(opts_.trigger_text);
    if (at == std::string::npos) {
      const size_t keep = opts_.trigger_text.size() - 1;
      if (s.tail.size() > keep) s.tail.erase(0, s.tail.size() - keep);
      return;
    }
    s.reasoning = false;
    std::string_view rest = std::string_view(s.tail).substr(at + opts_.trigger_text.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\n' || rest.front() == '\r' || rest.front() == '\t')) {
      rest.remove_prefix(1);
    }
    // Text the model wrote in the same token as the marker starts the answer, if it fits.
    if (!rest.empty()) (void)s.matcher.AcceptString(rest);
    s.tail.clear();
    return;
  }
  if (s.plan_pos < s.plan.size()) {
    if (s.plan[s.plan_pos] == token) {
      ++s.plan_pos;
    } else {
      s.plan.clear();  // sampled outside the mask: re-plan from wherever the matcher is
      s.plan_pos = 0;
    }
  }
  if (s.matcher.IsTerminated()) return;
  if (!s.matcher.AcceptToken(token) && !s.reported_reject) {
    // Only possible if the engine sampled outside the mask (e.g. everything was masked and
    // it finished with an error); keep the matcher where it is.
    s.reported_reject = true;
    LADLE_LOG_WARN("grammar.token_rejected sample={} token={}", index, token);
  }
}

void StructuredMaskProvider::WatchTriggers(Sample& s, engine::TokenId token) {
  const auto& triggers = constraint_->triggers;
  for (const auto& t : triggers) {
    if (t.token_id && *t.token_id == token) {
      s.matcher = grammar::GrammarMatcher(t.after, matcher_opts_);
      s.waiting_trigger = false;
      s.tail.clear();
      return;
    }
  }
  if (max_trigger_text_ == 0) return;
  s.tail += constraint_->grammar->vocab().TokenBytes(token);
  // The earliest text trigger in the tail wins (a token may complete one and start another).
  size_t best = std::string::npos;
  const CompiledTrigger* hit = nullptr;
  for (const auto& t : triggers) {
    if (t.token_id || t.text.empty()) continue;
    const size_t at = s.tail.find(t.text);
    if (at != std::string::npos && at < best) best = at, hit = &t;
  }
  if (hit == nullptr) {
    const size_t keep = max_trigger_text_ - 1;
    if (s.tail.size() > keep) s.tail.erase(0, s.tail.size() - keep);
    return;
  }
  s.matcher = grammar::GrammarMatcher(hit->after, matcher_opts_);
  s.waiting_trigger = false;
  const std::string_view rest = std::string_view(s.tail).substr(best + hit->text.size());
  if (!rest.empty() && !s.matcher.AcceptString(rest)) {
    LADLE_LOG_WARN("grammar.trigger_rest_rejected bytes={}", rest.size());
  }
  s.tail.clear();
}

}  // namespace ladle::structured
