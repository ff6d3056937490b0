// Helpers for the kvcache tests: temp directories under $TMPDIR, store URIs, condition waits
// with deadlines, and one-key Put/Get shorthands.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <fstream>
#include <iterator>

#include "ladle/kvcache/kv_store.h"
#include "object_format.h"
#include "test_values.h"

namespace kvtest {

using namespace ladle::kvcache;
using ladle::Result;
using ladle::Status;
using ladle::StatusCode;

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ladle-kv-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* p = ::mkdtemp(buf.data());
    if (!p) std::abort();
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// "ec:K+M:DIR/d0,...": `prefix(d)` may wrap a directory as "fault:NAME:DIR".
inline std::string EcUri(const TempDir& t, unsigned k, unsigned m,
                         const std::function<std::string(unsigned, const std::string&)>& wrap = nullptr) {
  std::string uri = "ec:" + std::to_string(k) + "+" + std::to_string(m) + ":";
  for (unsigned d = 0; d < k + m; ++d) {
    std::string dir = t.Sub("d" + std::to_string(d));
    if (d) uri += ",";
    uri += wrap ? wrap(d, dir) : dir;
  }
  return uri;
}

// Every chunk file under a target directory (not its index).
inline std::vector<std::string> ChunkFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    if (it->path().string().find("/.index") != std::string::npos) continue;
    if (it->is_regular_file() || it->is_fifo()) out.push_back(it->path().string());
  }
  return out;
}

// Whether any chunk file under a target directory lists `key` among its stripe's blocks.
inline bool HoldsBlock(const std::string& dir, const BlockKey& key) {
  for (const std::string& p : ChunkFilesUnder(dir)) {
    std::ifstream f(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto h = DecodeChunkHeader(bytes);
    if (!h.ok()) continue;
    for (const StripeMember& mb : h->members) {
      if (mb.key == key) return true;
    }
  }
  return false;
}

inline bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

inline Status PutOne(KvStore& s, const BlockKey& key, const std::vector<uint8_t>& v,
                     TrafficClass cls = TrafficClass::kChatbot) {
  std::span<const uint8_t> value(v);
  return s.PutSync(std::span<const BlockKey>(&key, 1), std::span<const std::span<const uint8_t>>(&value, 1), cls)[0];
}

// Puts `keys` as one chain with deterministic values of the given length.
inline void PutChain(KvStore& s, const std::vector<BlockKey>& keys, size_t len) {
  std::vector<std::vector<uint8_t>> vals;
  std::vector<std::span<const uint8_t>> spans;
  for (const BlockKey& k : keys) vals.push_back(testing_values::ValueFor(k, len));
  for (auto& v : vals) spans.emplace_back(v);
  for (const Status& st : s.PutSync(keys, spans, TrafficClass::kChatbot)) ASSERT_TRUE(st.ok()) << st.ToString();
}

// Reads one key; the bytes in `out` (resized to the length) or the error.
inline Result<size_t> GetOne(KvStore& s, const BlockKey& key, std::vector<uint8_t>* out, size_t cap = 2 << 20) {
  out->assign(cap, 0xEE);
  MutableBuffer b{out->data(), out->size()};
  auto r = s.GetSync(std::span<const BlockKey>(&key, 1), std::span<const MutableBuffer>(&b, 1))[0];
  if (r.ok()) out->resize(*r);
  return r;
}

inline std::vector<BlockKey> Chain(uint64_t seed, size_t n) {
  std::vector<uint32_t> tokens(n * kBlockTokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(testing_values::Mix(seed * 7919 + i));
  return ChainKeys(tokens, {});
}

}  // namespace kvtest
