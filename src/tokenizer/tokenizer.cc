#include "ladle/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "impl.h"
#include "ladle/core/thread_pool.h"

namespace ladle::tokenizer {

Result<Tokenizer> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("cannot open tokenizer file '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return IoError(fmt::format("cannot read '{}'", path));
  auto r = FromJson(ss.str());
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

Result<Tokenizer> Tokenizer::FromJson(std::string_view json) {
  LADLE_ASSIGN_OR_RETURN(auto impl, LoadTokenizerJson(json));
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::WithAddedTokens(std::span<const AddedToken> overrides) const {
  auto impl = std::make_shared<Impl>(impl_->bpe_ptr);
  impl->pre = impl_->pre;
  impl->added_tokens = impl_->added_tokens;
  size_t size = impl_->vocab_size;
  for (const AddedToken& o : overrides) {
    if (o.content.empty()) return InvalidArgument(fmt::format("added token {} has empty content", o.id));
    auto it = std::find_if(impl->added_tokens.begin(), impl->added_tokens.end(),
                           [&](const AddedToken& t) { return t.id == o.id; });
    if (it != impl->added_tokens.end()) {
      *it = o;
    } else {
      impl->added_tokens.push_back(o);
    }
    size = std::max<size_t>(size, size_t(o.id) + 1);
  }
  impl->vocab_size = size;
  // Every id keeps its bytes unless overridden; overridden ids take the new content below.
  std::vector<std::string_view> bytes(size);
  for (size_t id = 0; id < impl_->vocab_size; ++id) {
    if (impl_->valid[id]) bytes[id] = impl_->Bytes(static_cast<TokenId>(id));
  }
  BuildAddedAndDecodeTables(impl.get(), bytes);
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::EncodePlainInto(std::string_view text, std::vector<TokenId>* out) const {
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  pre.Split(text, &pieces);
  const auto* base = reinterpret_cast<const unsigned char*>(text.data());
  for (const Piece& p : pieces) bpe.EncodeWord(base + p.begin, p.end - p.begin, out);
}

namespace {

// One unit of parallel work: a byte range of one text segment.
struct WorkItem {
  size_t segment;
  size_t begin;
  size_t end;
};

// Cuts [0, text.size()) into pieces of about `chunk` bytes at safe pre-token boundaries.
void Chunk(const PreTokenizer& pre, std::string_view text, size_t segment, size_t chunk,
           std::vector<WorkItem>* items) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.size();
    if (text.size() - start > chunk + chunk / 2) {
      for (size_t p = start + chunk; p < text.size(); ++p) {
        if (pre.IsSafeSplit(text, p)) {
          end = p;
          break;
        }
      }
    }
    items->push_back({segment, start, end});
    start = end;
  }
}

}  // namespace

void Tokenizer::Impl::EncodeSegmentsInto(std::span<const Segment> segments, const EncodeOptions& opts,
                                         EncodedSegments* out) const {
  size_t text_bytes = 0;
  for (const Segment& s : segments) text_bytes += s.kind == Segment::Kind::kText ? s.text.size() : 0;
  ThreadPool* pool = opts.pool ? opts.pool : &SharedPool();
  const size_t threads = opts.max_parallelism ? opts.max_parallelism : pool->size() + 1;
  auto emit_special = [&](TokenId id) {
    out->special_positions.push_back(static_cast<uint32_t>(out->ids.size()));
    out->ids.push_back(id);
  };
  if (text_bytes < opts.parallel_min_bytes || threads <= 1) {
    out->ids.reserve(out->ids.size() + text_bytes / 3 + segments.size());
    for (const Segment& s : segments) {
      if (s.kind == Segment::Kind::kSpecial) {
        emit_special(s.id);
      } else {
        EncodePlainInto(s.text, &out->ids);
      }
    }
    return;
  }
  // Parallel: long segments are cut at safe boundaries; results are stitched in order.
  std::vector<WorkItem> items;
  const size_t chunk = std::max<size_t>(1, std::min(opts.chunk_bytes, text_bytes / threads + 1));
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].kind != Segment::Kind::kText) continue;
    if (pre.fast_path()) {
      Chunk(pre, segments[i].text, i, chunk, &items);
    } else if (!segments[i].text.empty()) {
      items.push_back({i, 0, segments[i].text.size()});
    }
  }
  std::vector<std::vector<TokenId>> results(items.size());
  pool->ParallelFor(
      items.size(),
      [&](size_t k) {
        const WorkItem& w = items[k];
        std::string_view t = segments[w.segment].text.substr(w.begin, w.end - w.begin);
        results[k].reserve(t.size() / 3 + 1);
        EncodePlainInto(t, &results[k]);
      },
      threads);
  size_t total = out->ids.size();
  for (const auto& r : results) total += r.size();
  out->ids.reserve(total + segments.size());
  size_t k = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].kind == Segment::Kind::kSpecial) {
      emit_special(segments[i].id);
      continue;
    }
    for (; k < items.size() && items[k].segment == i; ++k) {
      out->ids.insert(out->ids.end(), results[k].begin(), results[k].end());
    }
  }
}

std::vector<TokenId> Tokenizer::EncodePlainSerial(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 1);
  impl_->EncodePlainInto(text, &ids);
  return ids;
}

std::vector<TokenId> Tokenizer::EncodePlain(std::string_view text, const EncodeOptions& opts) const {
  EncodedSegments out;
  Segment seg = Segment::Text(text);
  impl_->EncodeSegmentsInto(std::span<const Segment>(&seg, 1), opts, &out);
  return std::move(out.ids);
}

std::vector<TokenId> Tokenizer::EncodeTrusted(std::string_view text, const EncodeOptions& opts) const {
  std::vector<Segment> segs;
  for (const auto& span : impl_->added->Split(text)) {
    if (span.id >= 0) {
      segs.push_back(Segment::Special(static_cast<TokenId>(span.id)));
    } else {
      segs.push_back(Segment::Text(text.substr(span.begin, span.end - span.begin)));
    }
  }
  EncodedSegments out;
  impl_->EncodeSegmentsInto(segs, opts, &out);
  return std::move(out.ids);
}

Result<EncodedSegments> Tokenizer::EncodeSegments(std::span<const Segment> segments,
                                                  const EncodeOptions& opts) const {
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].kind == Segment::Kind::kSpecial && !IsAddedToken(segments[i].id)) {
      return InvalidArgument(fmt::format("segment {}: id {} is not an added token", i, segments[i].id));
    }
  }
  EncodedSegments out;
  impl_->EncodeSegmentsInto(segments, opts, &out);
  return out;
}

Result<std::string> Tokenizer::Decode(std::span<const TokenId> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!IsValidId(ids[i])) return OutOfRange(fmt::format("token id {} at index {} is not in the vocabulary", ids[i], i));
    out.append(impl_->Bytes(ids[i]));
  }
  return out;
}

size_t Tokenizer::VocabSize() const { return impl_->vocab_size; }
bool Tokenizer::IsValidId(TokenId id) const { return id < impl_->vocab_size && impl_->valid[id]; }
bool Tokenizer::IsAddedToken(TokenId id) const { return id < impl_->vocab_size && impl_->is_added[id]; }
std::span<const AddedToken> Tokenizer::AddedTokens() const { return impl_->added_tokens; }

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  for (const auto& t : impl_->added_tokens) {
    if (t.content == token) return t.id;
  }
  std::string bytes;
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const auto* e = p + token.size();
  while (p < e) {
    // Vocabulary strings use the ByteLevel alphabet: every code point is one byte.
    uint32_t cp = *p;
    size_t len = 1;
    if (cp >= 0xC0 && p + 1 < e) {
      cp = ((cp & 0x1F) << 6) | (p[1] & 0x3F);
      len = 2;
    }
    int b = CodePointToByte(cp);
    if (b < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(b));
    p += len;
  }
  return impl_->bpe.Find(bytes);
}

std::optional<std::string> Tokenizer::IdToToken(TokenId id) const {
  if (!IsValidId(id)) return std::nullopt;
  if (IsAddedToken(id)) return std::string(impl_->Bytes(id));
  std::string out;
  for (unsigned char b : impl_->Bytes(id)) {
    uint32_t cp = ByteToCodePoint()[b];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

size_t Tokenizer::MemoryBytes() const {
  size_t n = impl_->bpe.MemoryBytes() + impl_->dec_arena.capacity() + impl_->dec_off.capacity() * 4 +
             impl_->valid.capacity() + impl_->is_added.capacity();
  for (const auto& t : impl_->added_tokens) n += sizeof(t) + t.content.capacity();
  return n;
}

}  // namespace ladle::tokenizer
