// Finding and unpacking the MaskBench data (../shared/jsonschemabench/maskbench-dev.tar.zst)
// and choosing schema files: shared by maskbench_bench.cc and generate_bench.cc. Header-only
// because bench/grammar builds one binary per *_bench.cc.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/json/json.h"

#ifndef LADLE_BENCH_CACHE_DIR
#define LADLE_BENCH_CACHE_DIR ".cache"
#endif
#ifndef LADLE_BENCH_SHARED_DIR
#define LADLE_BENCH_SHARED_DIR "../shared"
#endif

namespace ladle::bench {

namespace fs = std::filesystem;

inline std::string EnvOr(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

inline std::string DefaultArchive() {
  return EnvOr("LADLE_SHARED", LADLE_BENCH_SHARED_DIR) + "/jsonschemabench/maskbench-dev.tar.zst";
}
inline std::string DefaultUnpackDir() { return EnvOr("LADLE_CACHE", LADLE_BENCH_CACHE_DIR) + "/maskbench-dev"; }
// $LADLE_TOKENIZER, else the set-up cache, else ../shared (as tests/unit/test_data.h).
inline std::string DefaultTokenizer() {
  std::string t = EnvOr("LADLE_TOKENIZER", "");
  if (!t.empty()) return t;
  std::string cached = EnvOr("LADLE_CACHE", LADLE_BENCH_CACHE_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
  if (fs::exists(cached)) return cached;
  return EnvOr("LADLE_SHARED", LADLE_BENCH_SHARED_DIR) + "/tokenizers/deepseek-v3/tokenizer.json";
}

inline bool ReadFile(const fs::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Unpacks the archive once per content (a size + mtime stamp) with the zstd and tar CLIs
// (Debian ships libarchive here without headers). The stamp is written last, so a
// half-finished unpack never looks finished. Sets *data_dir to .../maskbench/data.
inline bool EnsureUnpacked(const std::string& archive, const std::string& unpack_dir, std::string* data_dir) {
  std::error_code ec;
  auto size = fs::file_size(archive, ec);
  if (ec) {
    std::fprintf(stderr, "maskbench: cannot read %s\n", archive.c_str());
    return false;
  }
  auto mtime = fs::last_write_time(archive, ec).time_since_epoch().count();
  const std::string stamp_text = fmt::format("{} {} {}\n", archive, size, mtime);
  const fs::path stamp = fs::path(unpack_dir) / ".unpacked";
  *data_dir = (fs::path(unpack_dir) / "maskbench" / "data").string();
  std::string have;
  if (ReadFile(stamp, &have) && have == stamp_text && fs::is_directory(*data_dir)) return true;
  fs::remove_all(unpack_dir, ec);
  fs::create_directories(unpack_dir, ec);
  std::fprintf(stderr, "maskbench: unpacking %s into %s\n", archive.c_str(), unpack_dir.c_str());
  const std::string cmd = fmt::format("zstd -dc '{}' | tar -x -C '{}'", archive, unpack_dir);
  if (std::system(cmd.c_str()) != 0 || !fs::is_directory(*data_dir)) {
    std::fprintf(stderr, "maskbench: unpack failed (%s)\n", cmd.c_str());
    return false;
  }
  std::ofstream(stamp) << stamp_text;
  return true;
}

// "Github_easy---o123.json" -> Github_easy; "BFCL_parallel_multiple_12.json" -> BFCL_parallel_multiple.
inline std::string SubsetOf(std::string_view file) {
  if (file.size() > 5 && file.substr(file.size() - 5) == ".json") file.remove_suffix(5);
  if (size_t dash = file.find("---"); dash != std::string_view::npos) return std::string(file.substr(0, dash));
  size_t end = file.size();
  while (end > 0 && std::isdigit(static_cast<unsigned char>(file[end - 1]))) --end;
  if (end > 0 && end < file.size() && file[end - 1] == '_') --end;
  return std::string(file.substr(0, end));
}

// FNV-1a and a finaliser, so that neighbouring names spread: the sample order.
inline uint64_t NameHash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

struct SchemaFile {
  std::string subset, name, path;
  bool operator<(const SchemaFile& o) const { return std::tie(subset, name) < std::tie(o.subset, o.name); }
};

// The *.json files of `data_dir` in the given subsets (all when empty), sorted by (subset, name).
inline std::vector<SchemaFile> ListSchemaFiles(const std::string& data_dir, const std::vector<std::string>& subsets) {
  std::vector<SchemaFile> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    SchemaFile f;
    f.name = e.path().filename().string();
    f.subset = SubsetOf(f.name);
    if (!subsets.empty() && std::find(subsets.begin(), subsets.end(), f.subset) == subsets.end()) continue;
    f.path = e.path().string();
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The files in sample order: by NameHash of the file name (stable across runs and machines).
inline void SortBySampleOrder(std::vector<SchemaFile>* files) {
  std::sort(files->begin(), files->end(), [](const SchemaFile& a, const SchemaFile& b) {
    const uint64_t ha = NameHash(a.name), hb = NameHash(b.name);
    return ha != hb ? ha < hb : a.name < b.name;
  });
}

inline std::vector<std::string> SplitComma(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t c = s.find(',');
    std::string_view part = s.substr(0, c);
    if (!part.empty()) out.emplace_back(part);
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

// The canonical serialisation of a test instance (docs/json_schema.md, "Property order and
// canonical serialisation"): compact json::Dump with every object's keys reordered by the
// first position at which the key is named in any `properties` of the schema document
// (depth first, document order), then names from `required` not seen yet; keys never named
// keep their relative order after those. The compiler emits properties in that order, so
// an instance that differs from a schema-order one only in key order is judged on content.
class CanonicalOrder {
 public:
  explicit CanonicalOrder(const json::Value& schema) {
    Collect(schema, "properties");
    Collect(schema, "required");
  }
  std::string Serialise(const json::Value& instance) const {
    return json::Dump(Reorder(instance), json::Style::kCompact);
  }

 private:
  void Collect(const json::Value& v, std::string_view keyword) {
    if (v.is_array()) {
      for (const auto& x : v.as_array()) Collect(x, keyword);
    }
    if (!v.is_object()) return;
    for (const auto& [k, x] : v.as_object()) {
      if (k == keyword && keyword == "properties" && x.is_object()) {
        for (const auto& [name, sub] : x.as_object()) ranks_.emplace(name, ranks_.size());
      }
      if (k == keyword && keyword == "required" && x.is_array()) {
        for (const auto& name : x.as_array())
          if (name.is_string()) ranks_.emplace(name.as_string(), ranks_.size());
      }
      // Values here are data, not subschemas.
      if (k != "enum" && k != "const" && k != "default" && k != "examples") Collect(x, keyword);
    }
  }
  json::Value Reorder(const json::Value& v) const {
    if (v.is_array()) {
      json::Value::Array a;
      for (const auto& x : v.as_array()) a.push_back(Reorder(x));
      return json::Value::MakeArray(std::move(a));
    }
    if (!v.is_object()) return v;
    json::Value::Object o;
    for (const auto& [k, x] : v.as_object()) o.emplace_back(k, Reorder(x));
    std::stable_sort(o.begin(), o.end(), [&](const auto& a, const auto& b) { return Rank(a.first) < Rank(b.first); });
    return json::Value::MakeObject(std::move(o));
  }
  size_t Rank(const std::string& key) const {
    auto it = ranks_.find(key);
    return it == ranks_.end() ? SIZE_MAX : it->second;
  }
  std::map<std::string, size_t> ranks_;
};

}  // namespace ladle::bench
