#include "weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

namespace ladle::engine::model {
namespace {

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

void AddAttn(std::vector<TensorSpec>& v, const std::string& p, int64_t h, int64_t a) {
  float in_scale = 1.0f / std::sqrt(static_cast<float>(h));
  // Output projections start smaller so the residual stream grows slowly with depth.
  float out_scale = 0.5f / std::sqrt(static_cast<float>(a));
  v.push_back({p + "self_attn_norm.weight", {h}, TensorSpec::Init::kOnes});
  v.push_back({p + "self_attn.q_proj.weight", {a, h}, TensorSpec::Init::kNormalish, in_scale});
  v.push_back({p + "self_attn.k_proj.weight", {a, h}, TensorSpec::Init::kNormalish, in_scale});
  v.push_back({p + "self_attn.v_proj.weight", {a, h}, TensorSpec::Init::kNormalish, in_scale});
  v.push_back({p + "self_attn.o_proj.weight", {h, a}, TensorSpec::Init::kNormalish, out_scale});
}

void AddFfn(std::vector<TensorSpec>& v, const std::string& p, int64_t h, int64_t f) {
  float in_scale = 1.0f / std::sqrt(static_cast<float>(h));
  float out_scale = 0.5f / std::sqrt(static_cast<float>(f));
  v.push_back({p + "gate_proj.weight", {f, h}, TensorSpec::Init::kNormalish, in_scale});
  v.push_back({p + "up_proj.weight", {f, h}, TensorSpec::Init::kNormalish, in_scale});
  v.push_back({p + "down_proj.weight", {h, f}, TensorSpec::Init::kNormalish, out_scale});
}

void AddMoe(std::vector<TensorSpec>& v, const std::string& p, const ModelConfig& c) {
  int64_t h = c.hidden;
  v.push_back({p + "mlp_norm.weight", {h}, TensorSpec::Init::kOnes});
  v.push_back({p + "mlp.gate.weight", {c.experts, h}, TensorSpec::Init::kNormalish, 1.0f / std::sqrt(static_cast<float>(h))});
  for (int e = 0; e < c.experts; ++e) AddFfn(v, p + "mlp.experts." + std::to_string(e) + ".", h, c.expert_hidden);
  AddFfn(v, p + "mlp.shared_expert.", h, c.expert_hidden);
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<TensorSpec> ListTensors(const ModelConfig& c) {
  std::vector<TensorSpec> v;
  int64_t h = c.hidden, a = static_cast<int64_t>(c.heads) * c.head_dim;
  float in_scale = 1.0f / std::sqrt(static_cast<float>(h));
  v.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, TensorSpec::Init::kNormalish, 1.0f});
  for (int l = 0; l < c.encoder_layers; ++l) {
    std::string p = "model.encoder.layers." + std::to_string(l) + ".";
    AddAttn(v, p, h, a);
    AddMoe(v, p, c);
  }
  v.push_back({"model.global_kv.norm.weight", {h}, TensorSpec::Init::kOnes});
  v.push_back({"model.global_kv.k_proj.weight", {a, h}, TensorSpec::Init::kNormalish, in_scale});
  v.push_back({"model.global_kv.v_proj.weight", {a, h}, TensorSpec::Init::kNormalish, in_scale});
  for (int l = 0; l < c.decoder_layers; ++l) {
    std::string p = "model.decoder.layers." + std::to_string(l) + ".";
    AddAttn(v, p, h, a);
    v.push_back({p + "global_attn_norm.weight", {h}, TensorSpec::Init::kOnes});
    v.push_back({p + "global_attn.q_proj.weight", {a, h}, TensorSpec::Init::kNormalish, in_scale});
    v.push_back({p + "global_attn.o_proj.weight", {h, a}, TensorSpec::Init::kNormalish,
                 0.5f / std::sqrt(static_cast<float>(a))});
    AddMoe(v, p, c);
  }
  v.push_back({"model.norm.weight", {h}, TensorSpec::Init::kOnes});
  // Logits with a standard deviation of about 2: peaked enough that greedy choices are
  // stable, flat enough that sampling still has a distribution to work with.
  v.push_back({"lm_head.weight", {c.vocab_size, h}, TensorSpec::Init::kNormalish, 2.0f * in_scale});
  return v;
}

int64_t ParamCount(const ModelConfig& c) {
  int64_t n = 0;
  for (const TensorSpec& s : ListTensors(c)) n += s.numel();
  return n;
}

TensorSet TensorSet::Seeded(std::vector<TensorSpec> specs, uint64_t seed) {
  TensorSet set;
  set.specs = std::move(specs);
  for (const TensorSpec& s : set.specs) {
    Floats data(static_cast<size_t>(s.numel()));
    if (s.init == TensorSpec::Init::kOnes) {
      std::fill(data.begin(), data.end(), 1.0f);
    } else {
      // Uniform with the requested standard deviation: cheap, bounded and deterministic.
      uint64_t state = seed ^ Fnv1a(s.name);
      float amp = s.scale * std::sqrt(3.0f);
      for (float& x : data) {
        double u = static_cast<double>(SplitMix(state) >> 11) * 0x1.0p-53;  // [0, 1)
        x = static_cast<float>((2.0 * u - 1.0) * amp);
      }
    }
    set.tensors.push_back(data.data());
    set.owned.push_back(std::move(data));
  }
  return set;
}

Result<TensorSet> TensorSet::Load(std::vector<TensorSpec> specs, const std::string& dir) {
  TensorSet set;
  set.specs = std::move(specs);
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  }
  if (ec) return IoError("cannot list " + dir + ": " + ec.message());
  if (paths.empty()) return NotFound("no *.safetensors in " + dir);
  std::sort(paths.begin(), paths.end());
  std::map<std::string, std::pair<const TensorView*, const std::string*>> index;
  for (const std::string& p : paths) {
    LADLE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
    for (const auto& [name, t] : file->tensors()) {
      if (index.count(name) != 0) return InvalidArgument("tensor '" + name + "' appears in two files (" + p + ")");
      index[name] = {&t, &file->path()};
    }
    set.files.push_back(std::move(file));
  }
  for (const TensorSpec& s : set.specs) {
    auto it = index.find(s.name);
    if (it == index.end()) {
      return NotFound("weights in " + dir + ": missing tensor '" + s.name + "' (shape " + ShapeText(s.shape) + ")");
    }
    const TensorView& t = *it->second.first;
    if (t.shape != s.shape) {
      return InvalidArgument("weights in " + dir + ": tensor '" + s.name + "' has shape " + ShapeText(t.shape) +
                             ", the config expects " + ShapeText(s.shape));
    }
    if (t.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t.data) % 64 == 0) {
      // Zero-copy: the kernels read the mapping directly. Only when 64-byte aligned, so the
      // data looks the same to BLAS as an owned, aligned buffer.
      set.tensors.push_back(reinterpret_cast<const float*>(t.data));
      continue;
    }
    Floats data(static_cast<size_t>(s.numel()));
    ToFloat(t, data.data());
    set.tensors.push_back(data.data());
    set.owned.push_back(std::move(data));
  }
  return set;
}

const float* TensorSet::Get(const std::string& name) const {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return tensors[i];
  }
  return nullptr;
}

Status TensorSet::Save(const std::string& path, DType dtype) const {
  std::vector<TensorToWrite> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    out.push_back({specs[i].name, specs[i].shape, {tensors[i], static_cast<size_t>(specs[i].numel())}});
  }
  return WriteSafetensors(path, out, dtype);
}

std::unique_ptr<ModelWeights> ModelWeights::Seeded(const ModelConfig& c) {
  std::unique_ptr<ModelWeights> w(new ModelWeights(c));
  w->set_ = TensorSet::Seeded(ListTensors(c), c.seed);
  w->Bind();
  return w;
}

Result<std::unique_ptr<ModelWeights>> ModelWeights::Load(const ModelConfig& c, const std::string& dir) {
  std::unique_ptr<ModelWeights> w(new ModelWeights(c));
  LADLE_ASSIGN_OR_RETURN(w->set_, TensorSet::Load(ListTensors(c), dir));
  w->Bind();
  return w;
}

const float* ModelWeights::Get(const std::string& name) const { return set_.Get(name); }

void ModelWeights::Bind() {
  std::map<std::string, const float*> by;
  for (size_t i = 0; i < set_.specs.size(); ++i) by[set_.specs[i].name] = set_.tensors[i];
  auto ffn = [&](const std::string& p) { return FfnWeights{by[p + "gate_proj.weight"], by[p + "up_proj.weight"], by[p + "down_proj.weight"]}; };
  auto layer = [&](const std::string& p, bool decoder) {
    LayerWeights l;
    l.swa = {by[p + "self_attn_norm.weight"], by[p + "self_attn.q_proj.weight"], by[p + "self_attn.k_proj.weight"],
             by[p + "self_attn.v_proj.weight"], by[p + "self_attn.o_proj.weight"]};
    if (decoder) {
      l.global = {by[p + "global_attn_norm.weight"], by[p + "global_attn.q_proj.weight"], by[p + "global_attn.o_proj.weight"]};
    }
    l.moe.norm = by[p + "mlp_norm.weight"];
    l.moe.router = by[p + "mlp.gate.weight"];
    for (int e = 0; e < config_.experts; ++e) l.moe.experts.push_back(ffn(p + "mlp.experts." + std::to_string(e) + "."));
    l.moe.shared = ffn(p + "mlp.shared_expert.");
    return l;
  };
  embed = by["model.embed_tokens.weight"];
  encoder.clear();
  decoder.clear();
  for (int l = 0; l < config_.encoder_layers; ++l) encoder.push_back(layer("model.encoder.layers." + std::to_string(l) + ".", false));
  for (int l = 0; l < config_.decoder_layers; ++l) decoder.push_back(layer("model.decoder.layers." + std::to_string(l) + ".", true));
  gkv_norm = by["model.global_kv.norm.weight"];
  gkv_k = by["model.global_kv.k_proj.weight"];
  gkv_v = by["model.global_kv.v_proj.weight"];
  final_norm = by["model.norm.weight"];
  lm_head = by["lm_head.weight"];
}

Status ModelWeights::Save(const std::string& dir, DType dtype) const {
  LADLE_RETURN_IF_ERROR(WriteConfig(config_, dir + "/config.json"));
  return set_.Save(dir + "/model.safetensors", dtype);
}

}  // namespace ladle::engine::model
