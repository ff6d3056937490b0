#include "index.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>

#include <cstring>

namespace ladle::kvcache {
namespace {

void PutBe64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutBe32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void PutLe64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

void AppendKey(std::string* s, const BlockKey& k) {
  PutBe64(s, k.hi);
  PutBe64(s, k.lo);
}
BlockKey KeyAt(const rocksdb::Slice& s, size_t off) {
  uint64_t hi = 0, lo = 0;
  for (int i = 0; i < 8; ++i) hi = (hi << 8) | static_cast<uint8_t>(s[off + i]);
  for (int i = 0; i < 8; ++i) lo = (lo << 8) | static_cast<uint8_t>(s[off + 8 + i]);
  return BlockKey{lo, hi};
}
// Signed times map to unsigned with the sign bit flipped so that byte order is numeric order.
uint64_t Ordered(int64_t v) { return static_cast<uint64_t>(v) ^ (1ULL << 63); }

std::string MetaKey(const BlockKey& k) {
  std::string s = "m";
  AppendKey(&s, k);
  return s;
}
std::string LruKey(const BlockKey& k, const IndexMeta& m) {
  std::string s = "l";
  PutBe64(&s, Ordered(m.last_read_ms));
  PutBe32(&s, ~m.depth);
  AppendKey(&s, k);
  return s;
}
std::string ExpiryKey(const BlockKey& k, const IndexMeta& m) {
  std::string s = "x";
  PutBe64(&s, Ordered(m.expire_ms));
  AppendKey(&s, k);
  return s;
}

constexpr size_t kMetaBytes = 8 * 8 + 4 + 2;
std::string EncodeMeta(const IndexMeta& m) {
  std::string s;
  PutLe64(&s, m.value_len);
  PutLe64(&s, m.file_bytes);
  PutLe64(&s, static_cast<uint64_t>(m.write_ms));
  PutLe64(&s, m.write_id);
  PutLe64(&s, static_cast<uint64_t>(m.expire_ms));
  PutLe64(&s, static_cast<uint64_t>(m.last_read_ms));
  PutLe64(&s, m.parent.lo);
  PutLe64(&s, m.parent.hi);
  s.append(reinterpret_cast<const char*>(&m.depth), 4);
  s.push_back(m.has_parent ? 1 : 0);
  s.push_back(static_cast<char>(m.cls));
  uint16_t n = static_cast<uint16_t>(m.members.size());
  s.append(reinterpret_cast<const char*>(&n), 2);
  for (const StripeMember& mb : m.members) {
    PutLe64(&s, mb.key.lo);
    PutLe64(&s, mb.key.hi);
    PutLe64(&s, mb.len);
  }
  return s;
}
std::optional<IndexMeta> DecodeMeta(const rocksdb::Slice& v) {
  // A record of the version-1 format (no member table) reads as absent: fsck drops its files.
  if (v.size() < kMetaBytes + 2) return std::nullopt;
  uint16_t n;
  std::memcpy(&n, v.data() + kMetaBytes, 2);
  if (n == 0 || v.size() != kMetaBytes + 2 + 24 * size_t{n}) return std::nullopt;
  const char* p = v.data();
  IndexMeta m;
  m.value_len = GetLe64(p);
  m.file_bytes = GetLe64(p + 8);
  m.write_ms = static_cast<int64_t>(GetLe64(p + 16));
  m.write_id = GetLe64(p + 24);
  m.expire_ms = static_cast<int64_t>(GetLe64(p + 32));
  m.last_read_ms = static_cast<int64_t>(GetLe64(p + 40));
  m.parent.lo = GetLe64(p + 48);
  m.parent.hi = GetLe64(p + 56);
  std::memcpy(&m.depth, p + 64, 4);
  m.has_parent = p[68] != 0;
  m.cls = static_cast<uint8_t>(p[69]) <= 1 ? static_cast<TrafficClass>(p[69]) : TrafficClass::kChatbot;
  m.members.resize(n);
  for (size_t j = 0; j < n; ++j) {
    const char* q = p + kMetaBytes + 2 + 24 * j;
    m.members[j].key = BlockKey{GetLe64(q), GetLe64(q + 8)};
    m.members[j].len = GetLe64(q + 16);
  }
  return m;
}

Status FromRocks(const rocksdb::Status& s, const char* what) {
  if (s.ok()) return Status::Ok();
  return IoError(std::string("kvcache index ") + what + ": " + s.ToString());
}

}  // namespace

Result<std::unique_ptr<Index>> Index::Open(const std::string& dir, bool* created) {
  struct stat st;
  *created = ::stat((dir + "/CURRENT").c_str(), &st) != 0;
  rocksdb::Options options;
  options.create_if_missing = true;
  options.write_buffer_size = 8 << 20;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  options.info_log_level = rocksdb::WARN_LEVEL;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) {
    // Another process holding the LOCK is the common case (two stores on one directory).
    return Status(StatusCode::kUnavailable, "kvcache index " + dir + ": " + s.ToString());
  }
  return std::unique_ptr<Index>(new Index(db));
}

Index::~Index() {
  db_->Close();
  delete db_;
}

std::optional<IndexMeta> Index::Get(const BlockKey& key) {
  std::string v;
  if (!db_->Get(rocksdb::ReadOptions(), MetaKey(key), &v).ok()) return std::nullopt;
  return DecodeMeta(v);
}

Status Index::Upsert(const BlockKey& key, const IndexMeta& meta, std::optional<IndexMeta>* old) {
  std::lock_guard lock(mu_);
  rocksdb::WriteBatch batch;
  std::optional<IndexMeta> prev = Get(key);
  if (prev) {
    batch.Delete(LruKey(key, *prev));
    batch.Delete(ExpiryKey(key, *prev));
  }
  batch.Put(MetaKey(key), EncodeMeta(meta));
  batch.Put(LruKey(key, meta), "");
  batch.Put(ExpiryKey(key, meta), "");
  if (old) *old = prev;
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "upsert");
}

Status Index::Erase(const BlockKey& key, std::optional<IndexMeta>* old) {
  std::lock_guard lock(mu_);
  std::optional<IndexMeta> prev = Get(key);
  if (old) *old = prev;
  if (!prev) return Status::Ok();
  rocksdb::WriteBatch batch;
  batch.Delete(MetaKey(key));
  batch.Delete(LruKey(key, *prev));
  batch.Delete(ExpiryKey(key, *prev));
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "erase");
}

Status Index::Touch(const std::vector<std::pair<BlockKey, int64_t>>& reads) {
  std::lock_guard lock(mu_);
  rocksdb::WriteBatch batch;
  for (const auto& [key, ms] : reads) {
    std::optional<IndexMeta> prev = Get(key);
    if (!prev || prev->last_read_ms >= ms) continue;
    batch.Delete(LruKey(key, *prev));
    IndexMeta next = *prev;
    next.last_read_ms = ms;
    batch.Put(MetaKey(key), EncodeMeta(next));
    batch.Put(LruKey(key, next), "");
  }
  if (batch.Count() == 0) return Status::Ok();
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "touch");
}

void Index::ForEach(const std::function<void(const BlockKey&, const IndexMeta&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("m"); it->Valid() && it->key().starts_with("m"); it->Next()) {
    if (it->key().size() != 17) continue;
    if (auto m = DecodeMeta(it->value())) fn(KeyAt(it->key(), 1), *m);
  }
}

std::vector<std::pair<BlockKey, int64_t>> Index::Lru(std::string* cursor, size_t n) {
  std::vector<std::pair<BlockKey, int64_t>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  if (cursor->empty()) {
    it->Seek("l");
  } else {
    it->Seek(*cursor);
    if (it->Valid() && it->key() == rocksdb::Slice(*cursor)) it->Next();
  }
  for (; it->Valid() && it->key().starts_with("l") && out.size() < n; it->Next()) {
    if (it->key().size() != 1 + 8 + 4 + 16) continue;
    uint64_t ordered = 0;
    for (int i = 0; i < 8; ++i) ordered = (ordered << 8) | static_cast<uint8_t>(it->key()[1 + i]);
    out.emplace_back(KeyAt(it->key(), 13), static_cast<int64_t>(ordered ^ (1ULL << 63)));
    *cursor = it->key().ToString();
  }
  return out;
}

std::vector<BlockKey> Index::Expired(int64_t now_ms, size_t n) {
  std::vector<BlockKey> out;
  std::string end = "x";
  PutBe64(&end, Ordered(now_ms + 1));  // expired means expire_ms <= now
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("x"); it->Valid() && it->key().starts_with("x") && out.size() < n; it->Next()) {
    if (it->key().size() != 1 + 8 + 16) continue;
    if (it->key().compare(rocksdb::Slice(end)) > 0) break;
    out.push_back(KeyAt(it->key(), 9));
  }
  return out;
}

}  // namespace ladle::kvcache
