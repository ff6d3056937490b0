#include "added_vocab.h"

#include <algorithm>

#include "unicode_classes.h"

namespace ladle::tokenizer {

void AddedVocab::Trie::Add(std::string_view s, int32_t token) {
  if (s.empty()) return;
  first_byte[static_cast<unsigned char>(s[0])] = true;
  int32_t node = 0;
  for (unsigned char b : s) {
    int32_t next = Child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes.size());
      nodes.push_back(Node{});
      auto& kids = nodes[node].kids;
      kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1})),
                  {b, next});
    }
    node = next;
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // first definition wins
}

int32_t AddedVocab::Trie::Child(int32_t node, unsigned char b) const {
  const auto& kids = nodes[node].kids;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
  return (it != kids.end() && it->first == b) ? it->second : -1;
}

AddedVocab::AddedVocab(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    (tokens_[i].normalized ? normalized_ : raw_).Add(tokens_[i].content, static_cast<int32_t>(i));
  }
}

namespace {

using unicode::DecodeUtf8;

bool IsSpaceAt(std::string_view t, size_t i, size_t* len) {
  auto d = DecodeUtf8(reinterpret_cast<const unsigned char*>(t.data()) + i,
                      reinterpret_cast<const unsigned char*>(t.data()) + t.size());
  *len = d.len;
  return unicode::ClassOf(d.cp) & unicode::kSpace;
}

// Rust's char::is_alphanumeric plus '_' is what HF's single_word treats as a word character.
bool IsWordCp(uint32_t cp) {
  return cp == '_' || (unicode::ClassOf(cp) & (unicode::kLetter | unicode::kNumber));
}

uint32_t PrevCp(std::string_view t, size_t i) {
  size_t q = i - 1;
  while (q > 0 && (static_cast<unsigned char>(t[q]) & 0xC0) == 0x80) --q;
  return DecodeUtf8(reinterpret_cast<const unsigned char*>(t.data()) + q,
                    reinterpret_cast<const unsigned char*>(t.data()) + t.size())
      .cp;
}

}  // namespace

void AddedVocab::SplitPass(const Trie& trie, std::string_view text, uint32_t b, uint32_t e,
                           std::vector<Span>* out) const {
  uint32_t gap = b;
  uint32_t i = b;
  while (i < e) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // Longest token starting at i.
    int32_t node = 0, best = -1;
    uint32_t best_end = 0;
    for (uint32_t j = i; j < e; ++j) {
      node = trie.Child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (trie.nodes[node].token >= 0) {
        best = trie.nodes[node].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    uint32_t start = i, end = best_end;
    if (tok.single_word) {
      bool left_ok = start == 0 || !IsWordCp(PrevCp(text, start));
      bool right_ok = end >= text.size() ||
                      !IsWordCp(DecodeUtf8(reinterpret_cast<const unsigned char*>(text.data()) + end,
                                           reinterpret_cast<const unsigned char*>(text.data()) + text.size())
                                    .cp);
      if (!left_ok || !right_ok) {
        ++i;
        continue;
      }
    }
    if (tok.lstrip) {
      while (start > gap) {
        size_t q = start - 1;
        while (q > gap && (static_cast<unsigned char>(text[q]) & 0xC0) == 0x80) --q;
        size_t len = 0;
        if (!IsSpaceAt(text, q, &len) || q + len != start) break;
        start = static_cast<uint32_t>(q);
      }
    }
    if (tok.rstrip) {
      size_t len = 0;
      while (end < e && IsSpaceAt(text, end, &len)) end += static_cast<uint32_t>(len);
    }
    if (gap < start) out->push_back({gap, start, -1});
    out->push_back({start, end, tok.id});
    i = gap = end;
  }
  if (gap < e) out->push_back({gap, e, -1});
}

std::vector<AddedVocab::Span> AddedVocab::Split(std::string_view text) const {
  std::vector<Span> first;
  SplitPass(raw_, text, 0, static_cast<uint32_t>(text.size()), &first);
  std::vector<Span> out;
  out.reserve(first.size());
  for (const Span& s : first) {
    if (s.id >= 0) {
      out.push_back(s);
    } else {
      SplitPass(normalized_, text, s.begin, s.end, &out);
    }
  }
  return out;
}

}  // namespace ladle::tokenizer
