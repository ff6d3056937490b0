// Speculative decoding in the engine (docs/engine.md, "Speculative decoding"; the recipe's
// "DSpark speculative decoding" and "Asynchronous Scheduling").
//
// A decoding sequence brings the drafter's γ drafts after its last token. The scheduler does
// not know how many tokens the sequence's previous step accepted (with async scheduling that
// step has not even run), so a spec decode is scheduled by its bounds: blocks for the longest
// outcome (γ + 1 positions per step in flight) and the step's total token budget B from the
// confidences it has (two steps old under async scheduling). On the device, just before the
// forward, each spec decode's verify length L comes from its CURRENT confidences under that
// budget (SpecPolicy::Lengths: the dynamic top-K of the paper's §5.2), at its current position.
//
// The forward verifies [last, d_1 … d_L] in one span (L + 1 logits rows). Rows are sampled in
// order, each with the ordinary sampler (mask filled after the previous row's Accept,
// penalties counting the previous rows' tokens), and the run stops at the first row whose
// token is not the next draft: that token replaces the draft; if every draft matched, the
// last row's token is a bonus. Each emitted token is therefore exactly the token the
// non-speculative engine would sample there (its row's logits are bit-identical: Linear is
// row-wise for spans this short; same sampler state, same RNG draw), so greedy and seeded
// outputs are token-identical with speculation off, and any sampling keeps its distribution
// (standard speculative sampling with a deterministic drafter: accept d with p(d), else draw
// from p without d).
//
// Rollback. Positions past the accepted ones hold rejected drafts' KV: the next step starts at
// the first of them and overwrites it. The SWA rings keep the window: a span writes at most
// γ + 1 ≤ rollback positions, so the 6 spare slots still hold every position the next step's
// window reads (ContinueFrom treats the ring as ending where the new step starts). Global-KV
// blocks past the accepted positions stay with the sequence and are written by the next steps;
// they are registered in the prefix cache only once their tokens are accepted. The matcher
// and the stop checker only ever see accepted tokens (rows are sampled one after another), so
// nothing in them is undone.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "engine_impl.h"
#include "ladle/core/logging.h"
#include "ladle/core/numbers.h"

namespace ladle::engine {

void EngineImpl::PlanSpecCapacity(Batch* b) {
  std::vector<std::vector<float>> confs;
  for (const Entry& e : b->entries)
    if (e.spec) confs.push_back(e.seq->spec_conf);
  b->spec_capacity = confs.empty() ? 0 : spec_->Capacity(confs);
}

void EngineImpl::PrepareSpecSteps(Batch* b) {
  std::vector<Entry*> es;
  std::vector<std::vector<float>> confs;
  for (Entry& e : b->entries) {
    if (!e.spec) continue;
    DevSeq& d = *e.dev;
    const int64_t remaining = static_cast<int64_t>(d.params.max_tokens) - d.emitted;
    if (remaining <= 0) {  // every token of this sample is already out: nothing to verify
      e.verify = -1;
      continue;
    }
    const size_t most = static_cast<size_t>(std::min<int64_t>({static_cast<int64_t>(d.drafts.size()), remaining - 1,
                                                              static_cast<int64_t>(gamma_)}));
    es.push_back(&e);
    confs.emplace_back(d.conf.begin(), d.conf.begin() + static_cast<std::ptrdiff_t>(std::min(most, d.conf.size())));
  }
  if (es.empty()) return;
  const std::vector<int> lengths = spec_->Lengths(confs, b->spec_capacity);
  LADLE_CHECK(lengths.size() == es.size());
  const size_t H = static_cast<size_t>(model_->config().hidden);
  for (size_t i = 0; i < es.size(); ++i) {
    Entry& e = *es[i];
    DevSeq& d = *e.dev;
    const int L = std::clamp(lengths[i], 0, static_cast<int>(confs[i].size()));
    e.verify = L;
    e.start_pos = d.pos;
    e.tokens.assign(1, d.last_token);
    e.tokens.insert(e.tokens.end(), d.drafts.begin(), d.drafts.begin() + L);
    e.hidden.assign(static_cast<size_t>(L + 1) * H, 0.0f);
    // The scheduler's blocks cover the longest outcome of every step in flight.
    LADLE_CHECK(static_cast<int64_t>(e.table.size()) * block_size_ >= d.pos + L + 1);
  }
}

// The decode copy area (kv_hit_policy.h) for a spec decode, whose position only the device
// knows: the copier says which block boundary the accepted tokens crossed, and the window
// ending there is read from the ring after the step. A span lands at most γ past the boundary,
// so the ring's spare slots still hold that window; the positions from d.pos on hold rejected
// drafts, all above the boundary.
void EngineImpl::SpecSwaCopy(Entry& e) {
  if (!swa_pool_ || kv_->swa_bytes() == 0) return;
  DevSeq& d = *e.dev;
  if (!d.swa_copier) d.swa_copier.emplace(swa_, e.start_pos);  // decoding started at this step
  Result<std::optional<SwaDecodeCopier::Copy>> c = d.swa_copier->OnStep(d.pos);
  // A step emits at most γ + 1 ≤ the ring's spare slots, so OnStep cannot refuse it.
  LADLE_CHECK(c.ok());
  if (!c->has_value()) return;
  auto cap = std::make_shared<SwaCapture>();
  cap->anchor = (*c)->anchor;
  cap->bytes.resize(kv_->swa_bytes());
  cap->ok = kv_->ReadSwa(e.slot, cap->anchor, cap->bytes);
  e.swa_capture = std::move(cap);
}

void EngineImpl::SampleSpec(Batch* b, Entry& e, size_t* row) {
  DevSeq& d = *e.dev;
  const int L = e.verify;
  const auto& p = d.params;
  int accepted = 0;
  for (int r = 0; r <= L; ++r) {
    if (d.mask && r > 0) {
      // Row r's mask follows the previous row's Accept: filled here, in order.
      d.mask_bits.assign((vocab_ + 63) / 64, 0);
      d.mask->FillMask(d.index, d.mask_bits.data(), vocab_);
    }
    Sampled res = SampleRow(d, std::span<float>(b->logits.data() + (*row + static_cast<size_t>(r)) * vocab_, vocab_));
    const TokenId tok = res.token;
    const bool dead = std::isinf(res.logprob) && res.logprob < 0;
    e.results.push_back(std::move(res));
    const bool ends = dead || (tok == config_.eos_id && !p.ignore_eos) ||
                      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
    if (r == L || tok != d.drafts[static_cast<size_t>(r)]) break;
    ++accepted;
    if (ends) break;  // the sample ends here: later rows are never needed
  }
  *row += static_cast<size_t>(L + 1);
  d.pos = e.start_pos + static_cast<int64_t>(e.results.size());
  SpecSwaCopy(e);
  d.emitted += static_cast<int64_t>(e.results.size());
  stat_spec_drafts_ += static_cast<uint64_t>(L);
  stat_spec_accepted_ += static_cast<uint64_t>(accepted);
  stat_spec_verify_ += static_cast<uint64_t>(L + 1);
  ++stat_spec_lengths_[static_cast<size_t>(std::min<int>(L, static_cast<int>(stat_spec_lengths_.size()) - 1))];
}

// Which requests to draft for, and how far: each by its own last first-draft confidence π_1
// (π_1 bounds every product of its drafts). A request whose π_1 could not win a candidate at
// this load, with the drafter's measured cost folded into the step rate (SpecPolicy::
// SetDraftCost), is not drafted: its drafts would buy nothing and cost the drafter's time, which
// on a CPU can match a target step. Without a π_1 of its own yet, a request drafts the first
// position only (π_1 is all the bound reads); so does a *refresh* of a request not drafted for
// a while, after 16 skipped steps, then 32, 64, … up to 1024 while refreshes keep finding
// nothing useful (back to 16 once a draft pays). fixed:N drafts N whatever π is.
void EngineImpl::DraftAfterSample(Batch* b) {
  const size_t H = static_cast<size_t>(model_->config().hidden);
  struct Want {
    Entry* e;
    std::span<const float> hidden;  // the row that produced last_token
    int positions;
  };
  std::vector<Want> es;
  for (Entry& e : b->entries) {
    if (!e.sample || (e.spec && e.results.empty())) continue;
    DevSeq& d = *e.dev;
    if (!d.conf.empty()) d.pi1 = d.conf[0];  // the confidence of the drafts just verified
    d.drafts.clear();
    d.conf.clear();
    if (d.emitted >= d.params.max_tokens) continue;  // no further step: nothing to draft for
    const size_t r = e.spec ? e.results.size() - 1 : 0;  // the row that produced last_token
    if (e.hidden.size() < (r + 1) * H) continue;
    es.push_back({&e, std::span<const float>(e.hidden.data() + r * H, H), 0});
  }
  if (es.empty()) return;
  const int64_t requests = static_cast<int64_t>(es.size());
  const bool reads_pi = spec_->UsefulDrafts(requests, 0.0) == 0;
  const int certain = std::min(gamma_, spec_->UsefulDrafts(requests, 1.0));
  const int learn = std::min(1, certain);
  std::vector<Want> wants;
  for (Want& w : es) {
    DevSeq& d = *w.e->dev;
    int positions = 0;
    if (!reads_pi) {
      positions = certain;
    } else if (d.pi1 < 0) {
      positions = learn;
    } else {
      positions = std::min(gamma_, spec_->UsefulDrafts(requests, d.pi1));
      if (positions > 0) {
        d.refresh_every = 16;  // useful again: refresh soon after the next lull
        d.skipped = 0;
      } else if (++d.skipped >= d.refresh_every) {
        d.skipped = 0;
        d.refresh_every = std::min<uint32_t>(d.refresh_every * 2, 1024);
        positions = learn;
      }
    }
    if (positions > 0) wants.push_back({w.e, w.hidden, positions});
  }
  if (wants.empty()) return;
  // One drafter pass per distinct depth (a prefix pass is bit for bit the full pass's prefix),
  // each timed: seconds per drafted position, smoothed, is the cost the policy weighs.
  std::stable_sort(wants.begin(), wants.end(), [](const Want& x, const Want& y) { return x.positions < y.positions; });
  for (size_t lo = 0; lo < wants.size();) {
    size_t hi = lo;
    while (hi < wants.size() && wants[hi].positions == wants[lo].positions) ++hi;
    std::vector<DraftInput> in;
    for (size_t i = lo; i < hi; ++i) in.push_back({wants[i].hidden, wants[i].e->dev->last_token});
    std::vector<DraftOutput> out;
    const auto t0 = std::chrono::steady_clock::now();
    drafter_->DraftPrefix(in, wants[lo].positions, &out);
    const double per_position = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                static_cast<double>(in.size() * static_cast<size_t>(wants[lo].positions));
    spec_draft_cost_ = spec_draft_cost_ < 0 ? per_position : 0.8 * spec_draft_cost_ + 0.2 * per_position;
    LADLE_CHECK(out.size() == in.size());
    for (size_t i = lo; i < hi; ++i) {
      Entry& e = *wants[i].e;
      DevSeq& d = *e.dev;
      const DraftOutput& o = out[i - lo];
      const size_t g = std::min<size_t>({o.tokens.size(), o.confidences.size(), static_cast<size_t>(gamma_)});
      d.drafts.assign(o.tokens.begin(), o.tokens.begin() + static_cast<std::ptrdiff_t>(g));
      d.conf.assign(o.confidences.begin(), o.confidences.begin() + static_cast<std::ptrdiff_t>(g));
      e.conf = d.conf;
    }
    lo = hi;
  }
  spec_->SetDraftCost(spec_draft_cost_);
}

void EngineImpl::PostProcessSpec(Seq* s, Entry& e) {
  for (const Sampled& r : e.results) {
    // Finished (EOS, stop, length): the rest is dropped. A preempted sequence (waiting) keeps
    // them, as the unspeculated path does: they are re-prefilled with the rest.
    if (s->state == Seq::State::kFinished) break;
    AcceptToken(s, r);
  }
  if (s->state == Seq::State::kRunning && s->decoding) {
    // Bounds for the steps still in flight: each may emit between 1 and γ + 1 tokens.
    s->computed = static_cast<int64_t>(s->tokens.size()) - 1 + static_cast<int64_t>(gamma_ + 1) * s->inflight;
    s->sampled = s->generated + s->inflight;
  }
}

Result<std::unique_ptr<SpecPolicy>> MakeEngineSpecPolicy(const EngineConfig& config, Model& model, KvStorage& kv) {
  const std::string& mode = config.speculative;
  if (mode.empty() || mode == "off") return std::unique_ptr<SpecPolicy>();
  if (!config.drafter) return InvalidArgument("speculative decoding '" + mode + "' needs a drafter (--draft DIR)");
  const ModelConfig& mc = model.config();
  const DrafterConfig& dc = config.drafter->config();
  if (dc.hidden != mc.hidden || dc.target_vocab != mc.vocab_size) {
    return InvalidArgument(fmt::format("the drafter was made for hidden {} and vocabulary {}, the model has {} and {}",
                                       dc.hidden, dc.target_vocab, mc.hidden, mc.vocab_size));
  }
  // A verify span writes γ + 1 positions past the accepted ones at most; the SWA ring's spare
  // slots must cover it (the window the next step reads is then intact).
  const int rollback = mc.swa_ring - mc.window;
  const int gamma = config.draft_tokens;
  if (gamma < 1 || gamma + 1 > rollback || gamma > dc.draft_tokens) {
    return InvalidArgument(fmt::format("draft tokens must be in [1, {}] (the SWA ring's {} spare slots) and at most the "
                                       "drafter's {}; got {}",
                                       rollback - 1, rollback, dc.draft_tokens, config.draft_tokens));
  }
  if (mode.rfind("fixed:", 0) == 0) {
    const std::optional<int64_t> parsed = ParseI64(std::string_view(mode).substr(6));
    const int64_t n = parsed.value_or(0);
    if (n < 1 || n > gamma) return InvalidArgument(fmt::format("'{}': N must be in [1, {}] (the draft tokens)", mode, gamma));
    return MakeFixedSpecPolicy(static_cast<int>(n));
  }
  if (mode != "dspark") return InvalidArgument("unknown speculative mode '" + mode + "' (off, fixed:N or dspark)");
  SpsTable sps;
  if (config.spec_sps) {
    sps = *config.spec_sps;
  } else if (!config.spec_sps_path.empty() && std::ifstream(config.spec_sps_path).good()) {
    LADLE_ASSIGN_OR_RETURN(sps, SpsTable::Load(config.spec_sps_path));
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    LADLE_ASSIGN_OR_RETURN(sps, ProfileSps(model, kv, config.spec_max_step_tokens, gamma + 1, config.profile_repeats));
    LADLE_LOG_INFO("engine.sps_profile points={} sps_1={:.1f} sps_max={:.1f} ms={:.0f}", sps.tokens.size(), sps.At(1),
                   sps.At(sps.tokens.back()),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!config.spec_sps_path.empty()) LADLE_RETURN_IF_ERROR(sps.Save(config.spec_sps_path));
  }
  LADLE_RETURN_IF_ERROR(sps.Validate());
  return MakeDsparkSpecPolicy(gamma, std::move(sps), config.spec_max_step_tokens);
}

}  // namespace ladle::engine
