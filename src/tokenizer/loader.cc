// Reads tokenizer.json. Anything Ladle cannot reproduce exactly is rejected by name: a
// tokenizer that silently differs from Hugging Face would corrupt every prompt.
#include <fmt/format.h>
#include <simdjson.h>

#include <chrono>
#include <unordered_map>

#include "impl.h"
#include "ladle/core/logging.h"
#include "unicode_classes.h"

namespace ladle::tokenizer {

const std::vector<uint32_t>& ByteToCodePoint() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256, 0);
    std::vector<bool> printable(256, false);
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable[b] ? b : next++;
    return t;
  }();
  return table;
}

int CodePointToByte(uint32_t cp) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    const auto& fwd = ByteToCodePoint();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = b;
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// Maps a vocabulary string in the ByteLevel alphabet to raw bytes.
Result<std::string> FromByteLevel(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* e = p + s.size();
  while (p < e) {
    auto d = unicode::DecodeUtf8(p, e);
    int b = CodePointToByte(d.cp);
    if (b < 0) {
      return Unsupported(fmt::format("vocabulary entry '{}' is not in the ByteLevel alphabet", s));
    }
    out.push_back(static_cast<char>(b));
    p += d.len;
  }
  return out;
}

// Reads an optional field; a missing or mistyped field leaves *out unchanged.
template <typename T>
void Optional(element e, const char* key, T* out) {
  T v;
  if (e[key].get(v) == simdjson::SUCCESS) *out = v;
}

std::string_view TypeOf(element e) {
  std::string_view t;
  if (e.is_object() && e["type"].get(t) == simdjson::SUCCESS) return t;
  return "";
}

Status CheckNormalizer(element n) {
  if (n.is_null()) return Status::Ok();
  std::string_view type = TypeOf(n);
  if (type == "Sequence") {
    simdjson::dom::array list;
    if (n["normalizers"].get(list) == simdjson::SUCCESS && list.size() == 0) return Status::Ok();
  }
  return Unsupported(fmt::format("normalizer '{}' (only none or an empty Sequence)", type));
}

Status ReadPreTokenizer(element pt, std::vector<std::string>* patterns) {
  std::vector<element> stages;
  if (TypeOf(pt) == "Sequence") {
    simdjson::dom::array list;
    if (pt["pretokenizers"].get(list) != simdjson::SUCCESS) {
      return ParseError("pre_tokenizer Sequence without 'pretokenizers'");
    }
    for (element s : list) stages.push_back(s);
  } else {
    stages.push_back(pt);
  }
  bool byte_level = false;
  for (element s : stages) {
    std::string_view type = TypeOf(s);
    if (byte_level) return Unsupported(fmt::format("pre_tokenizer stage '{}' after ByteLevel", type));
    if (type == "Split") {
      std::string_view behavior, regex;
      bool invert = false;
      Optional(s, "behavior", &behavior);
      Optional(s, "invert", &invert);
      if (behavior != "Isolated" || invert) {
        return Unsupported(fmt::format("pre_tokenizer Split with behavior '{}' invert={}", behavior, invert));
      }
      if (s["pattern"]["Regex"].get(regex) != simdjson::SUCCESS) {
        return Unsupported("pre_tokenizer Split with a String pattern (only Regex)");
      }
      patterns->emplace_back(regex);
    } else if (type == "ByteLevel") {
      bool prefix = false, use_regex = true;
      Optional(s, "add_prefix_space", &prefix);
      Optional(s, "use_regex", &use_regex);
      if (prefix) return Unsupported("pre_tokenizer ByteLevel with add_prefix_space=true");
      if (use_regex) return Unsupported("pre_tokenizer ByteLevel with use_regex=true");
      byte_level = true;
    } else {
      return Unsupported(fmt::format("pre_tokenizer type '{}'", type));
    }
  }
  if (!byte_level) return Unsupported("pre_tokenizer without a final ByteLevel stage");
  return Status::Ok();
}

}  // namespace

void BuildAddedAndDecodeTables(Tokenizer::Impl* impl, const std::vector<std::string_view>& vocab_bytes) {
  impl->added = std::make_unique<AddedVocab>(impl->added_tokens);
  // Added tokens decode to their content, overriding a vocabulary string with the same id.
  std::vector<std::string_view> bytes_of(impl->vocab_size);
  impl->valid.assign(impl->vocab_size, 0);
  impl->is_added.assign(impl->vocab_size, 0);
  for (size_t id = 0; id < vocab_bytes.size() && id < impl->vocab_size; ++id) {
    bytes_of[id] = vocab_bytes[id];
    impl->valid[id] = !vocab_bytes[id].empty();
  }
  for (const auto& t : impl->added_tokens) {
    bytes_of[t.id] = t.content;
    impl->valid[t.id] = 1;
    impl->is_added[t.id] = 1;
  }
  std::string arena;
  std::vector<uint32_t> off(impl->vocab_size + 1);
  for (size_t i = 0; i < impl->vocab_size; ++i) {
    off[i] = static_cast<uint32_t>(arena.size());
    arena.append(bytes_of[i]);
  }
  off[impl->vocab_size] = static_cast<uint32_t>(arena.size());
  impl->dec_arena = std::move(arena);
  impl->dec_off = std::move(off);
}

Result<std::shared_ptr<Tokenizer::Impl>> LoadTokenizerJson(std::string_view json) {
  const auto t0 = std::chrono::steady_clock::now();
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root)) {
    return ParseError(fmt::format("tokenizer.json is not valid JSON: {}", simdjson::error_message(err)));
  }
  // normalizer / pre_tokenizer / decoder
  element n;
  if (root["normalizer"].get(n) == simdjson::SUCCESS) LADLE_RETURN_IF_ERROR(CheckNormalizer(n));
  element pt;
  if (root["pre_tokenizer"].get(pt) != simdjson::SUCCESS || pt.is_null()) {
    return Unsupported("tokenizer.json without a pre_tokenizer (ByteLevel is required)");
  }
  std::vector<std::string> patterns;
  LADLE_RETURN_IF_ERROR(ReadPreTokenizer(pt, &patterns));
  LADLE_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(patterns));
  element dec;
  if (root["decoder"].get(dec) == simdjson::SUCCESS && !dec.is_null() && TypeOf(dec) != "ByteLevel") {
    return Unsupported(fmt::format("decoder '{}' (only ByteLevel)", TypeOf(dec)));
  }

  // model
  element model;
  if (root["model"].get(model) != simdjson::SUCCESS) return ParseError("tokenizer.json without 'model'");
  if (TypeOf(model) != "BPE") return Unsupported(fmt::format("model type '{}' (only BPE)", TypeOf(model)));
  {
    bool byte_fallback = false;
    Optional(model, "byte_fallback", &byte_fallback);
    if (byte_fallback) return Unsupported("model.byte_fallback=true");
    element d;
    if (model["dropout"].get(d) == simdjson::SUCCESS && !d.is_null()) {
      return Unsupported("model.dropout (BPE dropout is not deterministic)");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      std::string_view v;
      if (model[key].get(v) == simdjson::SUCCESS && !v.empty()) {
        return Unsupported(fmt::format("model.{}='{}'", key, v));
      }
    }
  }
  object vocab_obj;
  if (model["vocab"].get(vocab_obj) != simdjson::SUCCESS) return ParseError("model.vocab missing");
  std::vector<std::pair<std::string, TokenId>> vocab, outside_alphabet;
  vocab.reserve(vocab_obj.size());
  std::unordered_map<std::string_view, TokenId> by_string;  // byte-level string → id, for merges
  by_string.reserve(vocab_obj.size());
  TokenId max_id = 0;
  for (auto field : vocab_obj) {
    uint64_t id = 0;
    if (field.value.get(id) != simdjson::SUCCESS || id > 0xFFFFFFF) {
      return ParseError(fmt::format("model.vocab['{}'] is not a token id", field.key));
    }
    by_string.emplace(field.key, static_cast<TokenId>(id));
    auto bytes = FromByteLevel(field.key);
    if (!bytes.ok()) {
      // Outside the ByteLevel alphabet (DeepSeek lists its special tokens here too): BPE can
      // never produce it, and HF's ByteLevel decoder emits such a string's own UTF-8.
      outside_alphabet.emplace_back(std::string(field.key), static_cast<TokenId>(id));
      max_id = std::max<TokenId>(max_id, static_cast<TokenId>(id));
      continue;
    }
    vocab.emplace_back(std::move(bytes).value(), static_cast<TokenId>(id));
    max_id = std::max<TokenId>(max_id, static_cast<TokenId>(id));
  }
  simdjson::dom::array merges_arr;
  if (model["merges"].get(merges_arr) != simdjson::SUCCESS) return ParseError("model.merges missing");
  std::vector<std::pair<TokenId, TokenId>> merges;
  merges.reserve(merges_arr.size());
  for (element m : merges_arr) {
    std::string_view a, b;
    if (m.is_string()) {  // "left right"
      std::string_view s = m.get_string().value();
      size_t sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        return ParseError(fmt::format("model.merges entry '{}' is not two tokens", s));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {  // ["left", "right"]
      simdjson::dom::array pair;
      if (m.get(pair) != simdjson::SUCCESS || pair.size() != 2 || pair.at(0).get(a) ||
          pair.at(1).get(b)) {
        return ParseError("model.merges entry is neither \"a b\" nor [a, b]");
      }
    }
    auto ia = by_string.find(a), ib = by_string.find(b);
    if (ia == by_string.end() || ib == by_string.end()) {
      return InvalidArgument(fmt::format("model.merges entry '{} {}' names a token not in model.vocab", a, b));
    }
    merges.emplace_back(ia->second, ib->second);
  }
  LADLE_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Build(vocab, merges));
  auto impl = std::make_shared<Tokenizer::Impl>(std::make_shared<const BpeModel>(std::move(bpe)));
  impl->pre = std::move(pre);

  // added_tokens
  simdjson::dom::array added_arr;
  if (root["added_tokens"].get(added_arr) == simdjson::SUCCESS) {
    for (element a : added_arr) {
      AddedToken t;
      uint64_t id = 0;
      std::string_view content;
      if (a["id"].get(id) || a["content"].get(content) || id > 0xFFFFFFF) {
        return ParseError("added_tokens entry without id/content");
      }
      t.id = static_cast<TokenId>(id);
      t.content = std::string(content);
      Optional(a, "special", &t.special);
      Optional(a, "normalized", &t.normalized);
      Optional(a, "lstrip", &t.lstrip);
      Optional(a, "rstrip", &t.rstrip);
      Optional(a, "single_word", &t.single_word);
      if (t.content.empty()) return ParseError(fmt::format("added token {} has empty content", t.id));
      max_id = std::max(max_id, t.id);
      impl->added_tokens.push_back(std::move(t));
    }
  }
  impl->vocab_size = max_id + 1;
  std::vector<std::string_view> bytes_of(impl->vocab_size);
  for (const auto* list : {&vocab, &outside_alphabet}) {
    for (const auto& [bytes, id] : *list) bytes_of[id] = bytes;
  }
  BuildAddedAndDecodeTables(impl.get(), bytes_of);

  [[maybe_unused]] const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  LADLE_LOG_DEBUG("tokenizer.loaded vocab={} merges={} added={} fast_pretokenizer={} unreachable_entries={} ms={:.1f}",
                  vocab.size(), merges.size(), impl->added_tokens.size(), impl->pre.fast_path(),
                  impl->bpe.unreachable_entries(), ms);
  return impl;
}

}  // namespace ladle::tokenizer
