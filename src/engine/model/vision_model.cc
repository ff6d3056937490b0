// The vision tower (include/ladle/engine/vision_model.h): a small ViT with a patch-group
// projector, on the same CPU kernels as the text model.
#include "ladle/engine/vision_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels.h"
#include "weights.h"

namespace ladle::engine {
namespace model {
namespace {

std::vector<TensorSpec> ListVisionTensors(const ModelConfig& c) {
  const int64_t d = c.vision_hidden, f = 2 * c.vision_hidden, h = c.hidden;
  const int64_t pin = 3LL * c.vision_patch * c.vision_patch;
  const int64_t gin = static_cast<int64_t>(c.vision_merge) * c.vision_merge * d;
  auto scale = [](int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };
  std::vector<TensorSpec> v;
  v.push_back({"vision.patch_embed.weight", {d, pin}, TensorSpec::Init::kNormalish, scale(pin)});
  for (int l = 0; l < c.vision_layers; ++l) {
    const std::string p = "vision.layers." + std::to_string(l) + ".";
    v.push_back({p + "attn_norm.weight", {d}, TensorSpec::Init::kOnes});
    for (const char* w : {"q_proj", "k_proj", "v_proj"}) {
      v.push_back({p + "attn." + w + ".weight", {d, d}, TensorSpec::Init::kNormalish, scale(d)});
    }
    v.push_back({p + "attn.o_proj.weight", {d, d}, TensorSpec::Init::kNormalish, 0.5f * scale(d)});
    v.push_back({p + "mlp_norm.weight", {d}, TensorSpec::Init::kOnes});
    v.push_back({p + "mlp.gate_proj.weight", {f, d}, TensorSpec::Init::kNormalish, scale(d)});
    v.push_back({p + "mlp.up_proj.weight", {f, d}, TensorSpec::Init::kNormalish, scale(d)});
    v.push_back({p + "mlp.down_proj.weight", {d, f}, TensorSpec::Init::kNormalish, 0.5f * scale(f)});
  }
  v.push_back({"vision.post_norm.weight", {d}, TensorSpec::Init::kOnes});
  v.push_back({"vision.merger.fc1.weight", {h, gin}, TensorSpec::Init::kNormalish, scale(gin)});
  v.push_back({"vision.merger.fc2.weight", {h, h}, TensorSpec::Init::kNormalish, scale(h)});
  v.push_back({"vision.merger.norm.weight", {h}, TensorSpec::Init::kOnes});
  return v;
}

struct VisionLayer {
  const float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *gate, *up, *down;
};

class RefVisionModel final : public VisionModel {
 public:
  RefVisionModel(const ModelConfig& c, TensorSet set) : config_(c), set_(std::move(set)) {
    patch_embed_ = set_.Get("vision.patch_embed.weight");
    for (int l = 0; l < c.vision_layers; ++l) {
      const std::string p = "vision.layers." + std::to_string(l) + ".";
      layers_.push_back({set_.Get(p + "attn_norm.weight"), set_.Get(p + "attn.q_proj.weight"),
                         set_.Get(p + "attn.k_proj.weight"), set_.Get(p + "attn.v_proj.weight"),
                         set_.Get(p + "attn.o_proj.weight"), set_.Get(p + "mlp_norm.weight"),
                         set_.Get(p + "mlp.gate_proj.weight"), set_.Get(p + "mlp.up_proj.weight"),
                         set_.Get(p + "mlp.down_proj.weight")});
    }
    post_norm_ = set_.Get("vision.post_norm.weight");
    fc1_ = set_.Get("vision.merger.fc1.weight");
    fc2_ = set_.Get("vision.merger.fc2.weight");
    out_norm_ = set_.Get("vision.merger.norm.weight");
  }

  const ModelConfig& config() const override { return config_; }
  Status Encode(const float* pixels, int grid_h, int grid_w, std::vector<float>* out) const override;
  Status Save(const std::string& path) const override { return set_.Save(path, DType::kF32); }

 private:
  void Attention(const VisionLayer& w, float* x, int n) const;

  ModelConfig config_;
  TensorSet set_;
  const float *patch_embed_ = nullptr, *post_norm_ = nullptr, *fc1_ = nullptr, *fc2_ = nullptr, *out_norm_ = nullptr;
  std::vector<VisionLayer> layers_;
};

// Full (bidirectional) attention over the image's patches, head by head and in chunks of query
// rows, so the score matrix stays chunk × n however large the image.
void RefVisionModel::Attention(const VisionLayer& w, float* x, int n) const {
  const int d = config_.vision_hidden, heads = config_.vision_heads, dh = d / heads;
  const size_t nd = static_cast<size_t>(n) * d;
  Floats h(nd), q(nd), k(nd), v(nd), o(nd);
  RmsNorm(x, n, d, w.attn_norm, config_.rms_eps, h.data());
  Linear(h.data(), n, d, w.wq, d, q.data());
  Linear(h.data(), n, d, w.wk, d, k.data());
  Linear(h.data(), n, d, w.wv, d, v.data());
  constexpr int kChunk = 64;
  Floats kh(static_cast<size_t>(n) * dh), vt(static_cast<size_t>(dh) * n), qh(static_cast<size_t>(kChunk) * dh);
  Floats scores(static_cast<size_t>(kChunk) * n), oh(static_cast<size_t>(kChunk) * dh);
  const float inv = 1.0f / std::sqrt(static_cast<float>(dh));
  for (int hd = 0; hd < heads; ++hd) {
    // This head's keys as rows and values transposed: both products are then Linear calls.
    for (int j = 0; j < n; ++j) {
      const float* kr = k.data() + static_cast<size_t>(j) * d + hd * dh;
      const float* vr = v.data() + static_cast<size_t>(j) * d + hd * dh;
      std::memcpy(kh.data() + static_cast<size_t>(j) * dh, kr, sizeof(float) * dh);
      for (int e = 0; e < dh; ++e) vt[static_cast<size_t>(e) * n + j] = vr[e];
    }
    for (int r0 = 0; r0 < n; r0 += kChunk) {
      const int rows = std::min(kChunk, n - r0);
      for (int i = 0; i < rows; ++i) {
        std::memcpy(qh.data() + static_cast<size_t>(i) * dh, q.data() + static_cast<size_t>(r0 + i) * d + hd * dh,
                    sizeof(float) * dh);
      }
      Linear(qh.data(), rows, dh, kh.data(), n, scores.data());
      for (int i = 0; i < rows; ++i) {
        float* srow = scores.data() + static_cast<size_t>(i) * n;
        float mx = -INFINITY;
        for (int j = 0; j < n; ++j) mx = std::max(mx, srow[j] * inv);
        double sum = 0;
        for (int j = 0; j < n; ++j) {
          srow[j] = std::exp(srow[j] * inv - mx);
          sum += srow[j];
        }
        const float norm = static_cast<float>(1.0 / sum);
        for (int j = 0; j < n; ++j) srow[j] *= norm;
      }
      Linear(scores.data(), rows, n, vt.data(), dh, oh.data());
      for (int i = 0; i < rows; ++i) {
        std::memcpy(o.data() + static_cast<size_t>(r0 + i) * d + hd * dh, oh.data() + static_cast<size_t>(i) * dh,
                    sizeof(float) * dh);
      }
    }
  }
  Linear(o.data(), n, d, w.wo, d, h.data());
  for (size_t i = 0; i < nd; ++i) x[i] += h[i];
}

Status RefVisionModel::Encode(const float* pixels, int grid_h, int grid_w, std::vector<float>* out) const {
  const int p = config_.vision_patch, m = config_.vision_merge, d = config_.vision_hidden, H = config_.hidden;
  const int max_grid = config_.vision_max_side / p;
  if (grid_h < m || grid_w < m || grid_h % m != 0 || grid_w % m != 0 || grid_h > max_grid || grid_w > max_grid) {
    return InvalidArgument("vision encoder: a " + std::to_string(grid_h) + "×" + std::to_string(grid_w) +
                           " patch grid is not a positive multiple of " + std::to_string(m) + " within " +
                           std::to_string(max_grid));
  }
  const int n = grid_h * grid_w;
  const int width_px = grid_w * p, plane = grid_h * p * width_px;
  const int pin = 3 * p * p;

  // Patches as rows (channel, then row, then column within the patch), embedded.
  Floats patches(static_cast<size_t>(n) * pin);
  for (int gy = 0; gy < grid_h; ++gy) {
    for (int gx = 0; gx < grid_w; ++gx) {
      float* row = patches.data() + static_cast<size_t>(gy * grid_w + gx) * pin;
      for (int ch = 0; ch < 3; ++ch) {
        for (int y = 0; y < p; ++y) {
          const float* src = pixels + static_cast<size_t>(ch) * plane + static_cast<size_t>(gy * p + y) * width_px + gx * p;
          std::memcpy(row + (ch * p + y) * p, src, sizeof(float) * p);
        }
      }
    }
  }
  Floats x(static_cast<size_t>(n) * d);
  Linear(patches.data(), n, pin, patch_embed_, d, x.data());
  // 2-D sinusoidal position: the first half of the width encodes the row, the second the
  // column, so any grid size works without a learned table.
  const int half = d / 2;
  for (int i = 0; i < n; ++i) {
    const int gy = i / grid_w, gx = i % grid_w;
    float* xr = x.data() + static_cast<size_t>(i) * d;
    for (int e = 0; e < half; e += 2) {
      const double freq = std::pow(10000.0, -static_cast<double>(e) / half);
      xr[e] += static_cast<float>(std::sin(gy * freq));
      xr[e + 1] += static_cast<float>(std::cos(gy * freq));
      if (half + e + 1 < d) {
        xr[half + e] += static_cast<float>(std::sin(gx * freq));
        xr[half + e + 1] += static_cast<float>(std::cos(gx * freq));
      }
    }
  }

  const int f = 2 * d;
  Floats hbuf(static_cast<size_t>(n) * d), mlp_out(static_cast<size_t>(n) * d), g, u;
  for (const VisionLayer& w : layers_) {
    Attention(w, x.data(), n);
    RmsNorm(x.data(), n, d, w.mlp_norm, config_.rms_eps, hbuf.data());
    SwiGluFfn(w.gate, w.up, w.down, d, f, hbuf.data(), n, mlp_out.data(), g, u);
    for (size_t i = 0; i < x.size(); ++i) x[i] += mlp_out[i];
  }
  RmsNorm(x.data(), n, d, post_norm_, config_.rms_eps, hbuf.data());

  // Patch groups: the m × m neighbours concatenated row by row, projected to the model width.
  const int gh = grid_h / m, gw = grid_w / m, groups = gh * gw, gin = m * m * d;
  Floats cat(static_cast<size_t>(groups) * gin), mid(static_cast<size_t>(groups) * H), proj(static_cast<size_t>(groups) * H);
  for (int r = 0; r < gh; ++r) {
    for (int c = 0; c < gw; ++c) {
      float* dst = cat.data() + static_cast<size_t>(r * gw + c) * gin;
      for (int dy = 0; dy < m; ++dy) {
        for (int dx = 0; dx < m; ++dx) {
          const int patch = (r * m + dy) * grid_w + (c * m + dx);
          std::memcpy(dst + (dy * m + dx) * d, hbuf.data() + static_cast<size_t>(patch) * d, sizeof(float) * d);
        }
      }
    }
  }
  Linear(cat.data(), groups, gin, fc1_, H, mid.data());
  for (float& v : mid) v = v / (1.0f + std::exp(-v));  // SiLU
  Linear(mid.data(), groups, H, fc2_, H, proj.data());
  out->resize(static_cast<size_t>(groups) * H);
  // RMS-normalised to the scale of a token embedding row, so an image sits in the encoder's
  // input as text does.
  RmsNorm(proj.data(), groups, H, out_norm_, config_.rms_eps, out->data());
  return Status::Ok();
}

}  // namespace
}  // namespace model

Result<std::unique_ptr<VisionModel>> VisionModel::Create(const ModelConfig& config, const std::string& weights_dir) {
  if (!VisionEnabled(config)) {
    return Status(StatusCode::kFailedPrecondition,
                  "the model has no vision tower (vision_layers is 0 or image_token_id is outside the vocabulary)");
  }
  LADLE_RETURN_IF_ERROR(model::InitBlas());
  model::TensorSet set;
  if (weights_dir.empty()) {
    // Its own seed stream: the tower's values do not move when the text model's list changes.
    set = model::TensorSet::Seeded(model::ListVisionTensors(config), config.seed ^ 0x76697369'6f6e0000ull);
  } else {
    LADLE_ASSIGN_OR_RETURN(set, model::TensorSet::Load(model::ListVisionTensors(config), weights_dir));
  }
  return std::unique_ptr<VisionModel>(new model::RefVisionModel(config, std::move(set)));
}

}  // namespace ladle::engine
