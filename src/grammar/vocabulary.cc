// TokenVocabulary: token bytes by id and the sorted token trie (token_trie.h).
#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <xxhash.h>

#include "ladle/tokenizer/tokenizer.h"
#include "token_trie.h"

namespace ladle::grammar {

const std::array<std::array<int8_t, 256>, StringBody::kStates>& StringBody::Table() {
  // 0 between characters; 1..7 inside a UTF-8 sequence (1: one continuation byte left; 2:
  // two; 3: two, the first A0-BF (after E0); 4: two, the first 80-9F (after ED: no
  // surrogates); 5: three; 6: three, the first 90-BF (F0); 7: three, the first 80-8F (F4));
  // 8 after a backslash; 9 after \u; 10, 11, 12: three, two, one hex digits left; 13 after
  // \uD (then 0-7: no surrogates).
  static const auto table = [] {
    std::array<std::array<int8_t, 256>, kStates> t;
    for (auto& row : t) row.fill(-1);
    auto set = [&](int from, int lo, int hi, int to) {
      for (int b = lo; b <= hi; ++b) t[from][b] = static_cast<int8_t>(to);
    };
    auto hex = [&](int from, int to) {
      set(from, '0', '9', to);
      set(from, 'a', 'f', to);
      set(from, 'A', 'F', to);
    };
    set(0, 0x20, 0x21, 0);
    set(0, 0x23, 0x5B, 0);
    set(0, 0x5D, 0x7F, 0);
    set(0, '\\', '\\', 8);
    set(0, 0xC2, 0xDF, 1);
    set(0, 0xE0, 0xE0, 3);
    set(0, 0xE1, 0xEC, 2);
    set(0, 0xED, 0xED, 4);
    set(0, 0xEE, 0xEF, 2);
    set(0, 0xF0, 0xF0, 6);
    set(0, 0xF1, 0xF3, 5);
    set(0, 0xF4, 0xF4, 7);
    set(1, 0x80, 0xBF, 0);
    set(2, 0x80, 0xBF, 1);
    set(3, 0xA0, 0xBF, 1);
    set(4, 0x80, 0x9F, 1);
    set(5, 0x80, 0xBF, 2);
    set(6, 0x90, 0xBF, 2);
    set(7, 0x80, 0x8F, 2);
    for (char c : std::string_view("\"\\/bfnrt")) t[8][static_cast<uint8_t>(c)] = 0;
    t[8]['u'] = 9;
    hex(9, 10);
    t[9]['d'] = t[9]['D'] = 13;
    set(13, '0', '7', 11);
    hex(10, 11);
    hex(11, 12);
    hex(12, 0);
    return t;
  }();
  return table;
}

namespace {

void BuildNodeSummaries(TokenVocabulary::Impl& v);

Status BuildTrie(TokenVocabulary::Impl& v) {
  v.position.assign(v.vocab_size, UINT32_MAX);
  v.sorted.clear();
  for (TokenId id = 0; id < v.vocab_size; ++id) {
    if (!v.special[id] && !v.bytes[id].empty()) v.sorted.push_back(id);
  }
  // Ties (two ids with the same bytes) are ordered by id so the order is deterministic.
  std::sort(v.sorted.begin(), v.sorted.end(), [&](TokenId a, TokenId b) {
    int c = v.bytes[a].compare(v.bytes[b]);
    return c != 0 ? c < 0 : a < b;
  });
  const size_t n = v.sorted.size();
  v.sorted_blob.clear();
  v.sorted_off.assign(1, 0);
  v.max_token_len = 0;
  for (TokenId id : v.sorted) {
    v.max_token_len = std::max(v.max_token_len, v.bytes[id].size());
    v.sorted_blob += v.bytes[id];
    if (v.sorted_blob.size() > UINT32_MAX) return InvalidArgument("vocabulary larger than 4 GiB");
    v.sorted_off.push_back(static_cast<uint32_t>(v.sorted_blob.size()));
  }
  v.lcp.assign(n, 0);
  v.subtree_end.assign(n, static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    v.position[v.sorted[i]] = static_cast<uint32_t>(i);
    if (i == 0) continue;
    std::string_view a = v.bytes[v.sorted[i - 1]], b = v.bytes[v.sorted[i]];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    if (k > UINT16_MAX) return InvalidArgument("token longer than 65535 bytes");
    v.lcp[i] = static_cast<uint16_t>(k);
  }
  v.first_byte_end.assign(256, 0);
  for (size_t b = 0, i = 0; b < 256; ++b) {
    while (i < n && static_cast<uint8_t>(v.bytes[v.sorted[i]][0]) <= b) ++i;
    v.first_byte_end[b] = static_cast<uint32_t>(i);
  }
  // subtree_end[i]: the first j > i with lcp < len(i) somewhere in (i, j]. A stack of open
  // tokens, closed when a later lcp drops below their length.
  std::vector<uint32_t> open;
  for (size_t j = 0; j < n; ++j) {
    while (!open.empty() && v.lcp[j] < v.bytes[v.sorted[open.back()]].size()) {
      v.subtree_end[open.back()] = static_cast<uint32_t>(j);
      open.pop_back();
    }
    open.push_back(static_cast<uint32_t>(j));
  }
  BuildNodeSummaries(v);
  // The two sublists the classifier walks on their own: long tokens, and short ones with a
  // quote (TokenSpan in mask_cache.h).
  auto sublist = [&](auto&& keep, std::vector<uint32_t>& pos, std::vector<uint16_t>& lcp) {
    pos.clear();
    lcp.clear();
    std::string_view prev;
    for (uint32_t j = 0; j < n; ++j) {
      std::string_view t = v.SortedBytes(j);
      if (!keep(t)) continue;
      size_t k = 0;
      while (k < prev.size() && k < t.size() && prev[k] == t[k]) ++k;
      pos.push_back(j);
      lcp.push_back(static_cast<uint16_t>(k));
      prev = t;
    }
  };
  constexpr size_t kShort = TokenVocabulary::Impl::kShortTokenBytes;
  auto body_end = [](std::string_view t) {
    int c = 0;
    for (char ch : t) {
      if ((c = StringBody::Step(c, static_cast<uint8_t>(ch))) < 0) break;
    }
    return c;
  };
  auto plain = [](std::string_view t) { return t.size() <= kShort && t.find('"') == std::string_view::npos; };
  sublist([](std::string_view t) { return t.size() > kShort; }, v.long_pos, v.long_lcp);
  sublist([](std::string_view t) { return t.size() <= kShort && t.find('"') != std::string_view::npos; },
          v.quote_pos, v.quote_lcp);
  sublist([&](std::string_view t) { return plain(t) && body_end(t) < 0; }, v.body_bad_pos, v.body_bad_lcp);
  v.body_ok.assign(v.words(), 0);
  v.body_ok_count = 0;
  v.body_end.assign(StringBody::kStates, {});
  v.body_next.assign(kShort * StringBody::kStates, ByteSet{});
  for (uint32_t j = 0; j < n; ++j) {
    std::string_view t = v.SortedBytes(j);
    if (!plain(t)) continue;
    const int c = body_end(t);
    if (c < 0) continue;
    const TokenId id = v.sorted[j];
    int at = 0;
    for (size_t d = 0; d < t.size(); ++d) {
      v.body_next[d * StringBody::kStates + static_cast<size_t>(at)].Set(static_cast<uint8_t>(t[d]));
      at = StringBody::Step(at, static_cast<uint8_t>(t[d]));
    }
    v.body_ok[id >> 6] |= uint64_t{1} << (id & 63);
    ++v.body_ok_count;
    if (c != 0) v.body_end[c].push_back(id);
  }
  for (auto& ids : v.body_end) std::sort(ids.begin(), ids.end());
  return Status::Ok();
}

// One pass in sorted order with a stack of open nodes (one per depth of the current token):
// each token ORs its suffix bytes into the nodes of its prefixes; a node closes when a later
// token's lcp drops below its depth, and is kept if its group is large enough.
void BuildNodeSummaries(TokenVocabulary::Impl& v) {
  using Impl = TokenVocabulary::Impl;
  struct Open {
    uint32_t first;
    ByteSet below;
  };
  struct Closed {
    uint32_t first, depth;
    Impl::NodeSummary s;
  };
  const auto n = static_cast<uint32_t>(v.sorted.size());
  std::vector<Open> open;  // open[d - 1]: the node of depth d
  std::vector<Closed> kept;
  std::vector<ByteSet> suffix;
  auto close_to = [&](size_t depth, uint32_t end) {
    while (open.size() > depth) {
      const Open& o = open.back();
      if (end - o.first >= Impl::kMinSummaryTokens) {
        kept.push_back({o.first, static_cast<uint32_t>(open.size()), {o.below, end}});
      }
      open.pop_back();
    }
  };
  for (uint32_t j = 0; j < n; ++j) {
    std::string_view t = v.SortedBytes(j);
    close_to(std::min<size_t>(v.lcp[j], open.size()), j);
    while (open.size() < t.size()) open.push_back({j, ByteSet{}});
    // suffix[d] = the bytes of t[d..].
    suffix.assign(t.size() + 1, ByteSet{});
    for (size_t d = t.size(); d-- > 0;) {
      suffix[d] = suffix[d + 1];
      suffix[d].Set(static_cast<uint8_t>(t[d]));
    }
    for (size_t d = 1; d <= t.size(); ++d) {
      for (int w = 0; w < 4; ++w) open[d - 1].below.bits[w] |= suffix[d].bits[w];
    }
  }
  close_to(0, n);
  std::sort(kept.begin(), kept.end(),
            [](const Closed& a, const Closed& b) { return a.first != b.first ? a.first < b.first : a.depth < b.depth; });
  v.node_sets.clear();
  v.node_first.assign(n, 0);
  v.node_count.assign(n, 0);
  for (size_t k = 0; k < kept.size(); ++k) {
    const Closed& c = kept[k];
    // Depths kept at one position are consecutive from lcp + 1 (a deeper node of the same
    // first position is never larger); a gap (not expected) ends the run.
    if (v.node_count[c.first] == 0) {
      if (c.depth != v.lcp[c.first] + 1u) continue;
      v.node_first[c.first] = static_cast<uint32_t>(v.node_sets.size());
    } else if (c.depth != v.lcp[c.first] + 1u + v.node_count[c.first] || v.node_count[c.first] == 255) {
      continue;
    }
    v.node_sets.push_back(c.s);
    ++v.node_count[c.first];
  }
}

uint64_t Digest(const TokenVocabulary::Impl& v) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  uint64_t n = v.vocab_size;
  XXH3_64bits_update(st, &n, sizeof n);
  for (TokenId e : v.eos) XXH3_64bits_update(st, &e, sizeof e);
  for (size_t id = 0; id < v.vocab_size; ++id) {
    uint32_t len = static_cast<uint32_t>(v.bytes[id].size()) | (v.special[id] ? 0x80000000u : 0);
    XXH3_64bits_update(st, &len, sizeof len);
    XXH3_64bits_update(st, v.bytes[id].data(), v.bytes[id].size());
  }
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

Result<std::shared_ptr<const TokenVocabulary>> Finish(std::unique_ptr<TokenVocabulary::Impl> v) {
  for (TokenId e : v->eos) {
    if (e >= v->vocab_size) return InvalidArgument(fmt::format("eos id {} is past the vocabulary", e));
  }
  std::sort(v->eos.begin(), v->eos.end());
  v->eos.erase(std::unique(v->eos.begin(), v->eos.end()), v->eos.end());
  // EOS is never spelled by bytes: it is allowed exactly when the grammar can end.
  for (TokenId e : v->eos) {
    v->special[e] = 1;
    v->bytes[e].clear();
  }
  for (TokenId id = 0; id < v->vocab_size; ++id) {
    if (v->special[id]) v->special_ids.push_back(id);
  }
  LADLE_RETURN_IF_ERROR(BuildTrie(*v));
  v->fingerprint = Digest(*v);
  return std::make_shared<const TokenVocabulary>(std::move(v));
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenVocabulary::~TokenVocabulary() = default;

Result<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::FromTokenizer(
    const tokenizer::Tokenizer& tok, std::vector<TokenId> eos, size_t vocab_size) {
  auto v = std::make_unique<Impl>();
  v->vocab_size = std::max(vocab_size, tok.VocabSize());
  v->eos = std::move(eos);
  v->bytes.resize(v->vocab_size);
  v->special.assign(v->vocab_size, 0);
  const size_t n = tok.VocabSize();
  for (TokenId id = 0; id < n; ++id) {
    if (!tok.IsValidId(id)) continue;  // a hole in the id space: never allowed
    if (tok.IsAddedToken(id)) {
      v->special[id] = 1;
      continue;
    }
    TokenId one[1] = {id};
    auto bytes = tok.Decode(one);
    if (!bytes.ok()) continue;
    v->bytes[id] = std::move(bytes).value();
  }
  return Finish(std::move(v));
}

Result<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::FromTokens(
    std::vector<std::string> tokens, std::vector<TokenId> special, std::vector<TokenId> eos,
    size_t vocab_size) {
  auto v = std::make_unique<Impl>();
  v->vocab_size = std::max(vocab_size, tokens.size());
  v->eos = std::move(eos);
  v->bytes = std::move(tokens);
  v->bytes.resize(v->vocab_size);
  v->special.assign(v->vocab_size, 0);
  for (TokenId s : special) {
    if (s >= v->vocab_size) return InvalidArgument(fmt::format("special id {} is past the vocabulary", s));
    v->special[s] = 1;
    v->bytes[s].clear();
  }
  return Finish(std::move(v));
}

size_t TokenVocabulary::vocab_size() const { return impl_->vocab_size; }
std::span<const TokenId> TokenVocabulary::eos() const { return impl_->eos; }
std::string_view TokenVocabulary::TokenBytes(TokenId id) const {
  return id < impl_->vocab_size ? std::string_view(impl_->bytes[id]) : std::string_view();
}
bool TokenVocabulary::IsSpecial(TokenId id) const { return id < impl_->vocab_size && impl_->special[id]; }
uint64_t TokenVocabulary::Fingerprint() const { return impl_->fingerprint; }

}  // namespace ladle::grammar
