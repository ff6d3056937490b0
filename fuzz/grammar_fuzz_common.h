// Shared checks of the grammar fuzz targets (regex_fuzz, ebnf_fuzz, json_schema_fuzz): once a
// front-end has produced a Grammar, the reference recognizer (src/grammar/reference_recognizer.h)
// and the automaton runtime (matcher.h) must agree on it.
//
// For a grammar G and a seed derived from the input:
//   * the reference recognizer lowers G, and RandomSentence(G) sentences are matched by it;
//   * CompiledGrammar::Compile(G) against a small byte-level vocabulary, under a small time and
//     memory budget, either fails with a Status (budget, left recursion) or yields a matcher that
//     accepts each sentence symbol by symbol and can then terminate;
//   * on a mutated sentence the matcher stops exactly where the reference says the text stops
//     being a viable prefix, and at the end agrees on CanTerminate() vs Matches();
//   * a sample of the token mask (random ids, EOS, and the ids the grammar names as `<[id]>`)
//     agrees with ReferenceIsPrefix on prefix + token; an id with no bytes that is not the
//     special token (a hole: 291..299, 302..319) is never allowed, even where the grammar
//     names it.
// A violation prints what disagreed and aborts, so libFuzzer keeps the input.
//
// LADLE_FUZZ_SKIP_MASK=1 leaves out the mask sample (to keep fuzzing the front-ends past a
// known mask bug); LADLE_FUZZ_SKIP_MATCHER=1 leaves out the automaton altogether.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "ladle/grammar/grammar.h"
#include "ladle/grammar/matcher.h"
#include "../src/grammar/reference_recognizer.h"

namespace ladle::grammar::fuzz {

// Ids 0..255: the single bytes; then multi-byte tokens; then holes (no bytes, not special) up
// to the special token and EOS, and more holes up to kVocabSize (logit columns past it).
inline constexpr TokenId kSpecialId = 300;
inline constexpr TokenId kEosId = 301;
inline constexpr size_t kVocabSize = 320;

[[noreturn]] inline void Fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::abort();
}

inline const std::shared_ptr<const TokenVocabulary>& Vocab() {
  static const std::shared_ptr<const TokenVocabulary> v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"ab", "abc", "aa", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xE4\xB8", "\"", "{\"",
                          "\":", "\": ", "\",", ", ", "true", "false", "null", "\n\n", "  ", "00", "12", "-1", "0.",
                          "e+", "[]", "{}", "x)", "((", "\\u", "\\n", "://", "ing", "the", " a", "a\"", "1\n"}) {
      toks.emplace_back(t);
    }
    toks.resize(kSpecialId, "");
    toks.push_back("<|special|>");
    toks.push_back("<|eos|>");
    auto r = TokenVocabulary::FromTokens(toks, {kSpecialId}, {kEosId}, kVocabSize);
    if (!r.ok()) Fail("grammar_fuzz", "vocabulary: " + r.status().ToString());
    return *r;
  }();
  return v;
}

inline std::string Show(const std::vector<Symbol>& s) {
  std::string out;
  for (Symbol x : s) {
    if (x.special) {
      out += "<[" + std::to_string(x.value) + "]>";
    } else if (x.value >= 0x20 && x.value < 0x7F && x.value != '\\') {
      out += static_cast<char>(x.value);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", x.value);
      out += buf;
    }
  }
  return out;
}

// Runs a front-end or compile call and asserts the class of property issue 12 asks for: it
// returns (a value or a Status) instead of throwing, and within `limit_s` seconds. The bound is
// a hang detector, far above the budgets (a 100 ms compile budget, inputs of a few KiB), not a
// speed test: sanitizers and a loaded machine stay well inside it.
template <typename F>
auto Bounded(const char* target, const char* what, double limit_s, F&& fn) -> decltype(fn()) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto r = fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > limit_s) Fail(target, std::string(what) + " took " + std::to_string(s) + " s (bound " + std::to_string(limit_s) + " s)");
    return r;
  } catch (const std::exception& e) {
    Fail(target, std::string(what) + " threw: " + e.what());
  } catch (...) {
    Fail(target, std::string(what) + " threw a non-standard exception");
  }
}

// Feeds one symbol to the matcher: a byte by AcceptString, the fuzz special token by id;
// nullopt (not comparable) for a special token the vocabulary does not have, or once the
// matcher gave up on a grammar too ambiguous for its stack limit (an explicit error, which is
// the specified behaviour, not a disagreement).
inline std::optional<bool> Feed(GrammarMatcher& m, Symbol x) {
  bool ok;
  if (!x.special) {
    const char c = static_cast<char>(x.value);
    ok = m.AcceptString(std::string_view(&c, 1));
  } else if (x.value != kSpecialId) {
    return std::nullopt;
  } else {
    ok = m.AcceptToken(kSpecialId);
  }
  if (!m.status().ok()) return std::nullopt;
  return ok;
}

// Small enough that an exponentially ambiguous input fails in milliseconds, not seconds.
inline MatcherOptions FuzzMatcherOptions() { return MatcherOptions{.max_parallel_stacks = 2048}; }

inline void CheckGrammar(const char* target, const Grammar& g, uint64_t seed) {
  // The oracle is an Earley parser: cubic in the worst case, so the checks keep to grammars
  // and sentences small enough for a fuzzer's per-input budget.
  auto rec = ReferenceRecognizer::Create(g, /*max_symbols=*/200'000);
  if (!rec.ok()) return;  // a huge expansion: the oracle declines, nothing to compare
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(std::uniform_int_distribution<uint64_t>(0, n - 1)(rng)); };

  CompileOptions copts;
  copts.max_compile_ms = 100;
  copts.max_memory_bytes = 64ull << 20;
  static const bool skip_mask = std::getenv("LADLE_FUZZ_SKIP_MASK") != nullptr;
  static const bool skip_matcher = std::getenv("LADLE_FUZZ_SKIP_MATCHER") != nullptr;
  auto cg = skip_matcher ? Result<std::shared_ptr<const CompiledGrammar>>(Status(StatusCode::kCancelled, "skipped"))
                         : Bounded(target, "Compile", 5.0, [&] { return CompiledGrammar::Compile(g, Vocab(), copts); });

  for (int round = 0; round < 2; ++round) {
    auto sentence = RandomSentence(g, seed + static_cast<uint64_t>(round), 64, 24);
    if (!sentence) return;  // the grammar derives nothing
    if (sentence->size() > 400) return;  // a{10000}: too long for the oracle
    if (!rec->Matches(*sentence)) Fail(target, "reference rejects its own random sentence " + Show(*sentence));
    if (!cg.ok()) continue;

    GrammarMatcher m(*cg, FuzzMatcherOptions());
    bool comparable = true;
    for (size_t i = 0; i < sentence->size() && comparable; ++i) {
      auto ok = Feed(m, (*sentence)[i]);
      if (!ok) {
        comparable = false;
      } else if (!*ok) {
        Fail(target, "matcher rejects symbol " + std::to_string(i) + " of the sentence " + Show(*sentence) +
                         "\ngrammar:\n" + g.ToString());
      }
    }
    if (comparable && !m.CanTerminate()) {
      Fail(target, "matcher cannot terminate after the sentence " + Show(*sentence) + "\ngrammar:\n" + g.ToString());
    }

    // A near miss: the sentence with one symbol deleted, replaced or inserted.
    std::vector<Symbol> t = *sentence;
    static const Symbol kNoise[] = {ByteSymbol('a'), ByteSymbol('"'), ByteSymbol('0'), ByteSymbol(' '),
                                    ByteSymbol('}'), ByteSymbol(0xC3), ByteSymbol(0xA9), ByteSymbol(0xFF),
                                    ByteSymbol('\n'), SpecialSymbol(kSpecialId)};
    const Symbol noise = kNoise[pick(std::size(kNoise))];
    const size_t at = pick(t.size() + 1);
    switch (pick(3)) {
      case 0:
        if (at < t.size()) t.erase(t.begin() + static_cast<long>(at));
        break;
      case 1:
        if (at < t.size()) t[at] = noise;
        break;
      default: t.insert(t.begin() + static_cast<long>(at), noise);
    }
    m.Reset();
    size_t stop = t.size();
    // Stopped before a special symbol the fuzz cannot feed (`<[299]>`): the matcher is
    // unchanged, so the prefix so far and the mask there are still compared.
    bool unfed = false;
    comparable = true;
    for (size_t i = 0; i < t.size(); ++i) {
      auto ok = Feed(m, t[i]);
      if (!ok) {
        if (m.status().ok()) {
          unfed = true;
          stop = i;
        } else {
          comparable = false;
        }
        break;
      }
      if (!*ok) {
        stop = i;
        break;
      }
    }
    if (!comparable) continue;
    std::span<const Symbol> all(t);
    if (!rec->IsPrefix(all.first(stop))) {
      Fail(target, "matcher accepted " + Show(std::vector<Symbol>(t.begin(), t.begin() + static_cast<long>(stop))) +
                       " which the reference says is no viable prefix\ngrammar:\n" + g.ToString());
    }
    if (unfed) {
      // Nothing to say about the symbol itself.
    } else if (stop < t.size()) {
      if (rec->IsPrefix(all.first(stop + 1))) {
        Fail(target, "matcher rejects symbol " + std::to_string(stop) + " of " + Show(t) +
                         " but the reference says it is a viable prefix\ngrammar:\n" + g.ToString());
      }
    } else if (m.CanTerminate() != rec->Matches(all)) {
      Fail(target, std::string("after ") + Show(t) + " the matcher says CanTerminate=" +
                       (m.CanTerminate() ? "true" : "false") + ", the reference Matches=" +
                       (rec->Matches(all) ? "true" : "false") + "\ngrammar:\n" + g.ToString());
    }

    // The mask where the walk stopped: a sample of allowed and of refused tokens.
    if (skip_mask) continue;
    std::vector<Symbol> prefix(t.begin(), t.begin() + static_cast<long>(stop));
    std::vector<uint64_t> bits((kVocabSize + 63) / 64);
    m.FillNextTokenMask(bits.data());
    if (!m.status().ok()) continue;
    // Six random ids, then EOS and the ids the grammar names as `<[id]>` (holes, EOS and
    // normal ids among them: the vocabulary decides which can take the edge, matcher.h).
    std::vector<TokenId> ids;
    for (int k = 0; k < 6; ++k) ids.push_back(static_cast<TokenId>(pick(kVocabSize)));
    ids.push_back(kEosId);
    for (const Expr& e : g.exprs) {
      if (ids.size() >= 16) break;
      if (e.kind == ExprKind::kSpecialToken && e.token_id < kVocabSize) ids.push_back(e.token_id);
    }
    for (const TokenId id : ids) {
      const bool allowed = (bits[id >> 6] >> (id & 63)) & 1;
      bool want = false;
      if (id == kEosId) {
        want = rec->Matches(prefix);
      } else if (id == kSpecialId) {
        std::vector<Symbol> p = prefix;
        p.push_back(SpecialSymbol(kSpecialId));
        want = rec->IsPrefix(p);
      } else if (std::string_view bytes = Vocab()->TokenBytes(id); !bytes.empty()) {
        std::vector<Symbol> p = prefix;
        for (unsigned char c : bytes) p.push_back(ByteSymbol(c));
        want = rec->IsPrefix(p);
        // A normal id that the grammar also names as a special token (`<[200]>`) may take
        // either path (matcher.h, AcceptToken).
        std::vector<Symbol> q = prefix;
        q.push_back(SpecialSymbol(id));
        want = want || rec->IsPrefix(q);
      }
      if (allowed != want) {
        Fail(target, "mask bit of token " + std::to_string(id) + " after " + Show(prefix) + " is " +
                         (allowed ? "1" : "0") + ", the reference says " + (want ? "1" : "0") + "\ngrammar:\n" +
                         g.ToString());
      }
    }
  }
}

}  // namespace ladle::grammar::fuzz
