// config.json for the reference model: the fields of ModelConfig by name.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "ladle/json/json.h"
#include "weights.h"

namespace ladle::engine {
namespace model {
namespace {

struct IntField {
  const char* name;
  int ModelConfig::*field;
};
constexpr IntField kIntFields[] = {
    {"vocab_size", &ModelConfig::vocab_size},   {"hidden", &ModelConfig::hidden},
    {"encoder_layers", &ModelConfig::encoder_layers}, {"decoder_layers", &ModelConfig::decoder_layers},
    {"heads", &ModelConfig::heads},             {"head_dim", &ModelConfig::head_dim},
    {"experts", &ModelConfig::experts},         {"experts_top_k", &ModelConfig::experts_top_k},
    {"expert_hidden", &ModelConfig::expert_hidden}, {"window", &ModelConfig::window},
    {"block_size", &ModelConfig::block_size},   {"swa_ring", &ModelConfig::swa_ring},
};
// The vision tower's sizes: zero allowed (vision_layers = 0 turns it off), checked only when on.
constexpr IntField kVisionFields[] = {
    {"vision_layers", &ModelConfig::vision_layers}, {"vision_hidden", &ModelConfig::vision_hidden},
    {"vision_heads", &ModelConfig::vision_heads},   {"vision_patch", &ModelConfig::vision_patch},
    {"vision_merge", &ModelConfig::vision_merge},   {"vision_max_side", &ModelConfig::vision_max_side},
    {"image_token_id", &ModelConfig::image_token_id},
};

}  // namespace

Status ValidateConfig(const ModelConfig& c) {
  for (const IntField& f : kIntFields) {
    if (c.*f.field <= 0) return InvalidArgument(std::string("model config: ") + f.name + " must be positive");
  }
  if (c.head_dim % 2 != 0) return InvalidArgument("model config: head_dim must be even (RoPE pairs)");
  if (c.experts_top_k > c.experts) return InvalidArgument("model config: experts_top_k exceeds experts");
  if (c.swa_ring < c.window) return InvalidArgument("model config: swa_ring must hold the window");
  if (!(c.rope_theta > 0.0f) || !(c.rms_eps > 0.0f)) {
    return InvalidArgument("model config: rope_theta and rms_eps must be positive");
  }
  // Caps that keep a typo from allocating terabytes.
  if (c.hidden > 65536 || c.heads * c.head_dim > 65536 || c.expert_hidden > 262144 || c.experts > 4096 ||
      c.vocab_size > (1 << 22) || c.encoder_layers > 1024 || c.decoder_layers > 1024) {
    return InvalidArgument("model config: sizes out of range");
  }
  for (const IntField& f : kVisionFields) {
    if (c.*f.field < 0) return InvalidArgument(std::string("model config: ") + f.name + " must not be negative");
  }
  if (c.vision_layers > 0) {
    if (c.vision_hidden <= 0 || c.vision_heads <= 0 || c.vision_hidden % c.vision_heads != 0) {
      return InvalidArgument("model config: vision_hidden must be a positive multiple of vision_heads");
    }
    if (c.vision_patch <= 0 || c.vision_merge <= 0 || c.vision_max_side < c.vision_patch * c.vision_merge) {
      return InvalidArgument("model config: vision_max_side must hold one vision_patch × vision_merge group");
    }
    if (c.vision_layers > 64 || c.vision_hidden > 8192 || c.vision_patch > 64 || c.vision_merge > 8 ||
        c.vision_max_side > 8192) {
      return InvalidArgument("model config: vision sizes out of range");
    }
  }
  return Status::Ok();
}

Result<ModelConfig> ReadConfig(const std::string& path, const ModelConfig& base) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("model config not found: " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = json::Parse(ss.str());
  if (!doc.ok()) return doc.status().WithContext(path);
  if (!doc->is_object()) return ParseError(path + ": expected a JSON object");
  ModelConfig c = base;
  std::vector<IntField> fields(std::begin(kIntFields), std::end(kIntFields));
  fields.insert(fields.end(), std::begin(kVisionFields), std::end(kVisionFields));
  for (const IntField& f : fields) {
    const json::Value* v = doc->Find(f.name);
    if (v == nullptr) continue;
    auto i = v->as_int64();
    if (!v->is_number() || !i.ok() || *i < INT32_MIN || *i > INT32_MAX) {
      return InvalidArgument(path + ": " + f.name + " must be an integer");
    }
    c.*f.field = static_cast<int>(*i);
  }
  for (auto [name, field] : {std::pair{"rope_theta", &ModelConfig::rope_theta}, std::pair{"rms_eps", &ModelConfig::rms_eps}}) {
    const json::Value* v = doc->Find(name);
    if (v == nullptr) continue;
    if (!v->is_number()) return InvalidArgument(path + ": " + name + " must be a number");
    c.*field = static_cast<float>(v->as_double());
  }
  if (const json::Value* v = doc->Find("seed")) {
    // uint64: larger than int64 allows, so parse the digits ourselves.
    char* end = nullptr;
    const std::string& t = v->as_string();
    unsigned long long s = std::strtoull(t.c_str(), &end, 10);
    if (!v->is_integer() || t.empty() || t[0] == '-' || end != t.c_str() + t.size()) {
      return InvalidArgument(path + ": seed must be a non-negative integer");
    }
    c.seed = s;
  }
  LADLE_RETURN_IF_ERROR(ValidateConfig(c).WithContext(path));
  return c;
}

Status WriteConfig(const ModelConfig& c, const std::string& path) {
  json::Value o = json::Value::MakeObject();
  for (const IntField& f : kIntFields) o.Set(f.name, json::Value::Int(c.*f.field));
  for (const IntField& f : kVisionFields) o.Set(f.name, json::Value::Int(c.*f.field));
  o.Set("rope_theta", json::Value::Double(c.rope_theta));
  o.Set("rms_eps", json::Value::Double(c.rms_eps));
  o.Set("seed", json::Value::NumberText(std::to_string(c.seed)));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << json::Dump(o, json::Style::kPython) << "\n";
  out.flush();
  if (!out) return IoError("cannot write " + path);
  return Status::Ok();
}

}  // namespace model

std::string ModelFingerprint(const ModelConfig& c) {
  std::ostringstream out;
  out << "ladle-ref/v1";
  for (const model::IntField& f : model::kIntFields) out << ' ' << f.name << '=' << c.*(f.field);
  out.precision(9);
  out << " rope_theta=" << c.rope_theta << " rms_eps=" << c.rms_eps << " seed=" << c.seed;
  // The vision tower shapes image embeddings, so it is part of what a cached block depends on
  // (only when on: a text-only model keeps its keys).
  if (VisionEnabled(c)) {
    for (const model::IntField& f : model::kVisionFields) out << ' ' << f.name << '=' << c.*(f.field);
  }
  return out.str();
}

bool VisionEnabled(const ModelConfig& c) {
  return c.vision_layers > 0 && c.image_token_id >= 0 && c.image_token_id < c.vocab_size;
}

Result<ModelConfig> ModelConfig::FromFile(const std::string& path) { return model::ReadConfig(path, ModelConfig{}); }

}  // namespace ladle::engine
