// The DSpark drafter (drafter.h): loading drafter.json + drafter.safetensors, and the drafting
// pass. Every per-sequence product is its own GEMV on 64-byte aligned buffers, run weight by
// weight over the whole batch (each W_k, then the head, stays in cache while every sequence
// uses it): a sequence's bits never depend on which others share its batch, which a GEMM over
// the batch would not promise (its kernels block rows by the batch's shape).
#include "ladle/engine/drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ladle/engine/dspark_fit.h"
#include "ladle/json/json.h"
#include "model/kernels.h"
#include "model/safetensors.h"

namespace ladle::engine {
namespace {

using model::Floats;

constexpr int kMaxDraftTokens = 64;

Floats ToFloats(const std::vector<float>& v) { return Floats(v.begin(), v.end()); }

// Rows padded to 16 floats so each starts 64-byte aligned (as the model's rows do).
int Stride(int n) { return (n + 15) / 16 * 16; }

Status ValidateConfig(const DrafterConfig& c) {
  if (c.hidden <= 0 || c.hidden > 65536) return InvalidArgument("drafter: hidden out of range");
  if (c.target_vocab <= 0 || c.target_vocab > (1 << 24)) return InvalidArgument("drafter: target_vocab out of range");
  if (c.draft_vocab <= 0 || c.draft_vocab > c.target_vocab) {
    return InvalidArgument("drafter: draft_vocab must be in [1, target_vocab]");
  }
  if (c.draft_tokens <= 0 || c.draft_tokens > kMaxDraftTokens) {
    return InvalidArgument("drafter: draft_tokens must be in [1, " + std::to_string(kMaxDraftTokens) + "]");
  }
  if (c.rank <= 0 || c.rank > 4096) return InvalidArgument("drafter: rank must be in [1, 4096]");
  return Status::Ok();
}

Status CheckSize(const char* name, size_t got, size_t want) {
  if (got == want) return Status::Ok();
  return InvalidArgument(std::string("drafter: ") + name + " has " + std::to_string(got) + " values, expected " +
                         std::to_string(want));
}

class DrafterImpl final : public Drafter {
 public:
  explicit DrafterImpl(const DrafterWeights& w) : config_(w.config), d2t_(w.d2t) {
    const int H = config_.hidden, G = config_.draft_tokens, Vd = config_.draft_vocab;
    t2d_.assign(static_cast<size_t>(config_.target_vocab), -1);
    for (int i = 0; i < Vd; ++i) t2d_[d2t_[static_cast<size_t>(i)]] = i;
    embed_ = ToFloats(w.embed);
    head_ = ToFloats(w.head);
    u_ = ToFloats(w.markov_u);
    v_ = ToFloats(w.markov_v);
    const size_t wk = static_cast<size_t>(H) * 2 * H;
    for (int k = 0; k < G; ++k) {
      backbone_.emplace_back(w.backbone_weight.begin() + static_cast<ptrdiff_t>(k * wk),
                             w.backbone_weight.begin() + static_cast<ptrdiff_t>((k + 1) * wk));
    }
    bias_ = w.backbone_bias;
    conf_w_ = w.conf_weight;
    conf_h_ = w.conf_hidden.empty() ? std::vector<float>(static_cast<size_t>(G) * H, 0.0f) : w.conf_hidden;
    conf_b_ = w.conf_bias;
    conf_t_ = w.conf_temperature;
  }

  const DrafterConfig& config() const override { return config_; }

  void DraftPrefix(std::span<const DraftInput> in, int positions, std::vector<DraftOutput>* out) const override {
    Run(in, positions, out, nullptr, nullptr);
  }

  void Run(std::span<const DraftInput> in, int positions, std::vector<DraftOutput>* out, std::vector<float>* features,
           std::vector<float>* hidden) const {
    // Position k depends on positions < k only (the backbone is per position, the Markov bias
    // on the previous draft), so a prefix of the positions is the prefix of a full pass.
    const int H = config_.hidden, G = std::clamp(positions, 0, config_.draft_tokens), Vd = config_.draft_vocab,
              R = config_.rank;
    const size_t n = in.size();
    out->assign(n, DraftOutput{});
    if (n == 0) return;
    const int xs = Stride(2 * H), gs = Stride(H), zs = Stride(Vd);
    // x = [h ; E[last]] per sequence.
    Floats x(n * static_cast<size_t>(xs), 0.0f);
    for (size_t i = 0; i < n; ++i) {
      float* xi = x.data() + i * xs;
      const size_t m = std::min(in[i].hidden.size(), static_cast<size_t>(H));  // short input: zero-padded
      std::memcpy(xi, in[i].hidden.data(), sizeof(float) * m);
      const int d = DraftId(in[i].last);
      if (d >= 0) std::memcpy(xi + H, embed_.data() + static_cast<size_t>(d) * H, sizeof(float) * H);
    }
    // Backbone, then head: each weight once over the batch.
    Floats g(n * G * static_cast<size_t>(gs));
    for (int k = 0; k < G; ++k) {
      for (size_t i = 0; i < n; ++i) {
        float* gi = g.data() + (i * G + k) * gs;
        model::Sgemv(H, 2 * H, backbone_[static_cast<size_t>(k)].data(), x.data() + i * xs, gi);
        for (int j = 0; j < H; ++j) gi[j] += bias_[static_cast<size_t>(k) * H + j];
      }
    }
    Floats z(n * G * static_cast<size_t>(zs));
    for (size_t r = 0; r < n * G; ++r) model::Sgemv(Vd, H, head_.data(), g.data() + r * gs, z.data() + r * zs);
    // The serial part: each position's Markov bias depends on the previous draft.
    Floats u(static_cast<size_t>(Stride(R))), bias(static_cast<size_t>(zs));
    if (features) features->reserve(features->size() + n * G * kDraftFeatures);
    for (size_t i = 0; i < n; ++i) {
      DraftOutput& o = (*out)[i];
      o.tokens.resize(static_cast<size_t>(G));
      o.confidences.resize(static_cast<size_t>(G));
      int prev = DraftId(in[i].last);
      for (int k = 0; k < G; ++k) {
        float* zk = z.data() + (i * G + k) * zs;
        if (prev >= 0) {
          std::memcpy(u.data(), u_.data() + static_cast<size_t>(prev) * R, sizeof(float) * R);
          model::Sgemv(Vd, R, v_.data(), u.data(), bias.data());
          for (int v = 0; v < Vd; ++v) zk[v] += bias[v];
        }
        int best = 0;
        for (int v = 1; v < Vd; ++v) {
          if (zk[v] > zk[best]) best = v;  // strict: ties go to the lower id
        }
        float f[kDraftFeatures];
        Features(zk, Vd, best, f);
        double a = conf_b_[static_cast<size_t>(k)];
        for (int j = 0; j < kDraftFeatures; ++j)
          a += static_cast<double>(conf_w_[static_cast<size_t>(k) * kDraftFeatures + j]) * f[j];
        // The backbone state's term, in index order (deterministic, batch-invariant).
        const float* gk = g.data() + (i * G + k) * gs;
        const float* qk = conf_h_.data() + static_cast<size_t>(k) * H;
        for (int j = 0; j < H; ++j) a += static_cast<double>(qk[j]) * gk[j];
        a /= conf_t_[static_cast<size_t>(k)];
        double c = 1.0 / (1.0 + std::exp(-a));
        // Weights that overflow (finite, but huge) give non-finite logits and a NaN here: such a
        // draft cannot be scored, so it gets the lowest confidence (found by spec_load_fuzz).
        if (std::isnan(c)) c = 0.0;
        // Strictly inside (0, 1): a policy takes logs and products of these.
        c = std::clamp(c, 1e-6, 1.0 - 1e-6);
        o.tokens[static_cast<size_t>(k)] = d2t_[static_cast<size_t>(best)];
        o.confidences[static_cast<size_t>(k)] = static_cast<float>(c);
        if (features) features->insert(features->end(), f, f + kDraftFeatures);
        if (hidden) hidden->insert(hidden->end(), gk, gk + H);
        prev = best;
      }
    }
  }

 private:
  int DraftId(TokenId t) const { return t < t2d_.size() ? t2d_[t] : -1; }

  // Top probability, margin and entropy of softmax(z), in double and in index order.
  static void Features(const float* z, int n, int best, float* f) {
    const double mx = z[best];
    double second = -INFINITY;
    for (int v = 0; v < n; ++v) {
      if (v != best && z[v] > second) second = z[v];
    }
    // H = −Σ p·log p = log S − Σ e·(z − max) / S with e = exp(z − max), S = Σ e: one exp a logit.
    double sum = 0.0, moment = 0.0;
    for (int v = 0; v < n; ++v) {
      const double d = static_cast<double>(z[v]) - mx, e = std::exp(d);
      sum += e;
      moment += e * d;
    }
    const double entropy = std::max(0.0, std::log(sum) - moment / sum);
    const double p1 = 1.0 / sum;
    const double p2 = n > 1 ? std::exp(second - mx) / sum : 0.0;
    f[0] = static_cast<float>(p1);
    f[1] = static_cast<float>(p1 - p2);
    f[2] = static_cast<float>(entropy);
  }

  DrafterConfig config_;
  std::vector<TokenId> d2t_;
  std::vector<int32_t> t2d_;
  Floats embed_, head_, u_, v_;
  std::vector<Floats> backbone_;  // one aligned [H, 2H] per position
  std::vector<float> bias_, conf_w_, conf_h_, conf_b_, conf_t_;
};

Status ValidateWeights(const DrafterWeights& w) {
  const DrafterConfig& c = w.config;
  LADLE_RETURN_IF_ERROR(ValidateConfig(c));
  const size_t H = c.hidden, G = c.draft_tokens, Vd = c.draft_vocab, R = c.rank;
  LADLE_RETURN_IF_ERROR(CheckSize("d2t", w.d2t.size(), Vd));
  LADLE_RETURN_IF_ERROR(CheckSize("embed", w.embed.size(), Vd * H));
  LADLE_RETURN_IF_ERROR(CheckSize("backbone.weight", w.backbone_weight.size(), G * H * 2 * H));
  LADLE_RETURN_IF_ERROR(CheckSize("backbone.bias", w.backbone_bias.size(), G * H));
  LADLE_RETURN_IF_ERROR(CheckSize("head", w.head.size(), Vd * H));
  LADLE_RETURN_IF_ERROR(CheckSize("markov.u", w.markov_u.size(), Vd * R));
  LADLE_RETURN_IF_ERROR(CheckSize("markov.v", w.markov_v.size(), Vd * R));
  LADLE_RETURN_IF_ERROR(CheckSize("confidence.weight", w.conf_weight.size(), G * kDraftFeatures));
  if (!w.conf_hidden.empty()) LADLE_RETURN_IF_ERROR(CheckSize("confidence.hidden", w.conf_hidden.size(), G * H));
  LADLE_RETURN_IF_ERROR(CheckSize("confidence.bias", w.conf_bias.size(), G));
  LADLE_RETURN_IF_ERROR(CheckSize("confidence.temperature", w.conf_temperature.size(), G));
  std::vector<bool> seen(static_cast<size_t>(c.target_vocab), false);
  for (TokenId t : w.d2t) {
    if (t >= static_cast<TokenId>(c.target_vocab)) {
      return InvalidArgument("drafter: d2t id " + std::to_string(t) + " outside the target vocabulary");
    }
    if (seen[t]) return InvalidArgument("drafter: d2t repeats target id " + std::to_string(t));
    seen[t] = true;
  }
  for (float t : w.conf_temperature) {
    if (!(t > 0.0f) || !std::isfinite(t)) return InvalidArgument("drafter: confidence.temperature must be positive");
  }
  return Status::Ok();
}

Result<DrafterConfig> ReadDrafterJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("drafter config not found: " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = json::Parse(ss.str());
  if (!doc.ok()) return doc.status().WithContext(path);
  if (!doc->is_object()) return ParseError(path + ": expected a JSON object");
  DrafterConfig c;
  const std::pair<const char*, int DrafterConfig::*> fields[] = {{"hidden", &DrafterConfig::hidden},
                                                                 {"target_vocab", &DrafterConfig::target_vocab},
                                                                 {"draft_vocab", &DrafterConfig::draft_vocab},
                                                                 {"draft_tokens", &DrafterConfig::draft_tokens},
                                                                 {"rank", &DrafterConfig::rank}};
  for (const auto& [name, field] : fields) {
    const json::Value* v = doc->Find(name);
    // Every size is required: a default would silently disagree with the tensors.
    if (v == nullptr) return InvalidArgument(path + ": missing \"" + name + "\"");
    auto i = v->as_int64();
    if (!v->is_integer() || !i.ok() || *i < INT32_MIN || *i > INT32_MAX) {
      return InvalidArgument(path + ": " + name + " must be an integer");
    }
    c.*field = static_cast<int>(*i);
  }
  if (const json::Value* v = doc->Find("target")) {
    if (!v->is_string()) return InvalidArgument(path + ": target must be a string");
    c.target = v->as_string();
  }
  LADLE_RETURN_IF_ERROR(ValidateConfig(c).WithContext(path));
  return c;
}

}  // namespace

Result<std::unique_ptr<Drafter>> MakeDrafter(const DrafterWeights& w) {
  LADLE_RETURN_IF_ERROR(ValidateWeights(w));
  LADLE_RETURN_IF_ERROR(model::InitBlas());
  return std::unique_ptr<Drafter>(new DrafterImpl(w));
}

Status DraftWithFeatures(const Drafter& d, std::span<const DraftInput> in, std::vector<DraftOutput>* out,
                         std::vector<float>* features, std::vector<float>* hidden) {
  const auto* impl = dynamic_cast<const DrafterImpl*>(&d);
  if (impl == nullptr) return InvalidArgument("DraftWithFeatures: not a DSpark drafter");
  impl->Run(in, impl->config().draft_tokens, out, features, hidden);
  return Status::Ok();
}

Status SaveDrafter(const DrafterWeights& w, const std::string& dir) {
  LADLE_RETURN_IF_ERROR(ValidateWeights(w));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  const DrafterConfig& c = w.config;
  json::Value o = json::Value::MakeObject();
  o.Set("hidden", json::Value::Int(c.hidden));
  o.Set("target_vocab", json::Value::Int(c.target_vocab));
  o.Set("draft_vocab", json::Value::Int(c.draft_vocab));
  o.Set("draft_tokens", json::Value::Int(c.draft_tokens));
  o.Set("rank", json::Value::Int(c.rank));
  o.Set("target", json::Value::String(c.target));
  {
    const std::string path = dir + "/drafter.json";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << json::Dump(o, json::Style::kPython) << "\n";
    out.flush();
    if (!out) return IoError("cannot write " + path);
  }
  // Ids as F32: exact below 2^24, which ValidateConfig caps target_vocab at.
  std::vector<float> d2t(w.d2t.begin(), w.d2t.end());
  const int64_t H = c.hidden, G = c.draft_tokens, Vd = c.draft_vocab, R = c.rank;
  const std::vector<float> conf_hidden =
      w.conf_hidden.empty() ? std::vector<float>(static_cast<size_t>(G * H), 0.0f) : w.conf_hidden;
  const model::TensorToWrite tensors[] = {
      {"d2t", {Vd}, d2t},
      {"embed", {Vd, H}, w.embed},
      {"backbone.weight", {G, H, 2 * H}, w.backbone_weight},
      {"backbone.bias", {G, H}, w.backbone_bias},
      {"head", {Vd, H}, w.head},
      {"markov.u", {Vd, R}, w.markov_u},
      {"markov.v", {Vd, R}, w.markov_v},
      {"confidence.weight", {G, kDraftFeatures}, w.conf_weight},
      {"confidence.hidden", {G, H}, conf_hidden},
      {"confidence.bias", {G}, w.conf_bias},
      {"confidence.temperature", {G}, w.conf_temperature},
  };
  return model::WriteSafetensors(dir + "/drafter.safetensors", tensors, model::DType::kF32);
}

Result<std::unique_ptr<Drafter>> Drafter::Load(const std::string& dir) {
  LADLE_ASSIGN_OR_RETURN(DrafterConfig c, ReadDrafterJson(dir + "/drafter.json"));
  const std::string path = dir + "/drafter.safetensors";
  LADLE_ASSIGN_OR_RETURN(auto file, model::SafetensorsFile::Open(path));
  const auto& tensors = file->tensors();
  const int64_t H = c.hidden, G = c.draft_tokens, Vd = c.draft_vocab, R = c.rank;
  DrafterWeights w;
  w.config = c;
  auto read = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float>* out) -> Status {
    auto it = tensors.find(name);
    if (it == tensors.end()) return InvalidArgument(path + ": missing tensor " + name);
    if (it->second.shape != shape) {
      auto dims = [](const std::vector<int64_t>& s) {
        std::string t = "[";
        for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
        return t + "]";
      };
      return InvalidArgument(path + ": tensor " + name + " has shape " + dims(it->second.shape) + ", expected " +
                             dims(shape));
    }
    out->resize(static_cast<size_t>(it->second.numel()));
    model::ToFloat(it->second, out->data());
    for (float x : *out) {
      if (!std::isfinite(x)) return InvalidArgument(path + ": tensor " + name + " holds a non-finite value");
    }
    return Status::Ok();
  };
  std::vector<float> d2t;
  LADLE_RETURN_IF_ERROR(read("d2t", {Vd}, &d2t));
  // BF16/F16 would round large ids to other valid-looking ids: only F32 keeps them exact.
  if (tensors.at("d2t").dtype != model::DType::kF32) return InvalidArgument(path + ": d2t must be F32");
  w.d2t.reserve(d2t.size());
  for (float f : d2t) {
    if (f < 0.0f || f != std::floor(f) || f >= static_cast<float>(c.target_vocab)) {
      return InvalidArgument(path + ": d2t holds " + std::to_string(f) + ", not a target token id");
    }
    w.d2t.push_back(static_cast<TokenId>(f));
  }
  LADLE_RETURN_IF_ERROR(read("embed", {Vd, H}, &w.embed));
  LADLE_RETURN_IF_ERROR(read("backbone.weight", {G, H, 2 * H}, &w.backbone_weight));
  LADLE_RETURN_IF_ERROR(read("backbone.bias", {G, H}, &w.backbone_bias));
  LADLE_RETURN_IF_ERROR(read("head", {Vd, H}, &w.head));
  LADLE_RETURN_IF_ERROR(read("markov.u", {Vd, R}, &w.markov_u));
  LADLE_RETURN_IF_ERROR(read("markov.v", {Vd, R}, &w.markov_v));
  LADLE_RETURN_IF_ERROR(read("confidence.weight", {G, kDraftFeatures}, &w.conf_weight));
  // Optional: a drafter saved before the confidence head read the backbone state has none (zeros).
  if (tensors.count("confidence.hidden")) LADLE_RETURN_IF_ERROR(read("confidence.hidden", {G, H}, &w.conf_hidden));
  LADLE_RETURN_IF_ERROR(read("confidence.bias", {G}, &w.conf_bias));
  LADLE_RETURN_IF_ERROR(read("confidence.temperature", {G}, &w.conf_temperature));
  auto d = MakeDrafter(w);
  if (!d.ok()) return d.status().WithContext(dir);
  return d;
}

}  // namespace ladle::engine
