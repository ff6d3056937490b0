// libFuzzer target for the tokenizer (build and run with scripts/fuzz).
//
// The tokenizer is loaded once: $LADLE_TOKENIZER, else <cache>/tokenizers/deepseek-v3/
// tokenizer.json, else <shared>/tokenizers/deepseek-v3/tokenizer.json (the CMake cache's
// LADLE_CACHE_DIR and LADLE_SHARED_DIR). Each input is then used twice:
//
//   as text  — EncodePlain / EncodePlainSerial / EncodeTrusted (default options and tiny
//              chunks, so the parallel splitter sees every input), EncodeSegments with cut
//              points and special ids derived from a hash of the input, Decode of everything,
//              and an IncrementalDecoder over the ids;
//   as ids   — 3 bytes per id, modulo VocabSize() + 10, fed to Decode, IdToToken and an
//              IncrementalDecoder: unknown ids must come back as errors, never a crash.
//
// Every property the header promises is checked and a violation aborts with a message
// (libFuzzer then saves the input as a crash artifact):
//   * EncodePlain never yields an added-token id; EncodePlain == EncodePlainSerial, with any
//     EncodeOptions; EncodeTrusted does not depend on EncodeOptions.
//   * Decode(EncodePlain(x)) == x and Decode(EncodeTrusted(x)) == x when x is valid UTF-8
//     (byte-level BPE covers every byte, so this is also checked for invalid UTF-8 unless
//     LADLE_FUZZ_UTF8_ONLY=1).
//   * EncodeSegments == the concatenation of EncodePlain of each text and the special ids,
//     special_positions point at exactly those ids; a special id that is not an added token
//     fails with kInvalidArgument.
//   * Concatenated IncrementalDecoder output == Decode; every piece is a whole number of code
//     points when the full text is valid UTF-8; at most 3 bytes are ever pending.
//   * Decode fails (kOutOfRange) exactly when some id is not IsValidId.
//   * IsValidUtf8 / Utf8EmitLength agree with an independent reference implementation.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/core/status.h"
#include "ladle/core/thread_pool.h"
#include "ladle/tokenizer/tokenizer.h"

#ifndef LADLE_FUZZ_CACHE_DIR
#define LADLE_FUZZ_CACHE_DIR ".cache"
#endif
#ifndef LADLE_FUZZ_SHARED_DIR
#define LADLE_FUZZ_SHARED_DIR "../shared"
#endif

namespace {

using ladle::StatusCode;
using ladle::tokenizer::EncodedSegments;
using ladle::tokenizer::EncodeOptions;
using ladle::tokenizer::IncrementalDecoder;
using ladle::tokenizer::Segment;
using ladle::tokenizer::TokenId;
using ladle::tokenizer::Tokenizer;

const Tokenizer* g_tok = nullptr;
ladle::ThreadPool* g_pool = nullptr;    // small private pool for the tiny-chunk runs
std::vector<TokenId> g_added;           // added-token ids, for drawing special segments
bool g_utf8_only = false;

std::string Escape(std::string_view s, size_t limit = 200) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > limit) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string IdsToString(std::span<const TokenId> ids, size_t limit = 64) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < limit; ++i) {
    if (i) out += ",";
    out += std::to_string(ids[i]);
  }
  if (ids.size() > limit) out += ",...(" + std::to_string(ids.size()) + " ids)";
  return out + "]";
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "\n*** tokenizer_fuzz: property violated: %s\n%s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, what, detail) \
  do {                                 \
    if (!(cond)) Fail(what, (detail)); \
  } while (0)

// ---- Reference UTF-8 (independent of the library's implementation) -------------------------

// Length of a complete, well-formed code point at s[i], or 0 if none starts there.
size_t RefCodePointLen(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const size_t n = s.size() - i;
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlongs
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // ≤ U+10FFFF
  } else {
    return 0;
  }
  if (n < len) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  }
  return len;
}

bool RefValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = RefCodePointLen(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// True if `tail` is the beginning of a well-formed code point that more bytes could complete:
// a valid lead byte, then bytes each in their allowed range, fewer than the code point needs.
bool RefIsIncompletePrefix(std::string_view tail) {
  if (tail.empty()) return false;
  const auto b = [&](size_t k) { return static_cast<unsigned char>(tail[k]); };
  const unsigned char c = b(0);
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return false;
  }
  if (tail.size() >= len) return false;
  if (tail.size() >= 2 && (b(1) < lo || b(1) > hi)) return false;
  for (size_t k = 2; k < tail.size(); ++k) {
    if (b(k) < 0x80 || b(k) > 0xbf) return false;
  }
  return true;
}

void CheckUtf8Helpers(std::string_view x) {
  const bool valid = RefValidUtf8(x);
  FUZZ_CHECK(ladle::tokenizer::IsValidUtf8(x) == valid, "IsValidUtf8 matches reference",
             "input=" + Escape(x) + " reference=" + (valid ? "valid" : "invalid"));
  const size_t n = ladle::tokenizer::Utf8EmitLength(x);
  FUZZ_CHECK(n <= x.size(), "Utf8EmitLength <= size", "input=" + Escape(x));
  if (valid) {
    FUZZ_CHECK(n == x.size(), "Utf8EmitLength of valid UTF-8 is everything",
               "input=" + Escape(x) + " n=" + std::to_string(n));
  }
  if (n < x.size()) {
    FUZZ_CHECK(RefIsIncompletePrefix(x.substr(n)),
               "Utf8EmitLength holds back only an incomplete but possible code point",
               "input=" + Escape(x) + " n=" + std::to_string(n));
  } else {
    // Nothing held back: the input must not end in a completable prefix (one starts with a
    // lead byte, which never occurs inside a complete code point, so any such tail counts).
    for (size_t k = 1; k <= 3 && k <= x.size(); ++k) {
      FUZZ_CHECK(!RefIsIncompletePrefix(x.substr(x.size() - k)),
                 "Utf8EmitLength holds back a completable tail",
                 "input=" + Escape(x) + " n=" + std::to_string(n));
    }
  }
}

// ---- Helpers ----------------------------------------------------------------------------

struct Rng {
  uint64_t s;
  uint64_t Next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

uint64_t Hash(std::string_view s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string MustDecode(std::span<const TokenId> ids, const char* what) {
  ladle::Result<std::string> r = g_tok->Decode(ids);
  FUZZ_CHECK(r.ok(), what, "Decode failed on encoder output: " + r.status().ToString() +
                                " ids=" + IdsToString(ids));
  return std::move(r).value();
}

// Runs an IncrementalDecoder over `ids`. Returns the concatenated output; *failed_at is the
// index of the first id whose Push failed (or ids.size()).
std::string RunIncremental(std::span<const TokenId> ids, bool expect_valid_pieces) {
  IncrementalDecoder dec(*g_tok);
  std::string all;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece;
    ladle::Status st = dec.Push(ids[i], &piece);
    if (g_tok->IsValidId(ids[i])) {
      FUZZ_CHECK(st.ok(), "IncrementalDecoder::Push accepts a valid id",
                 "id=" + std::to_string(ids[i]) + " status=" + st.ToString());
    } else {
      FUZZ_CHECK(!st.ok() && st.code() == StatusCode::kOutOfRange,
                 "IncrementalDecoder::Push rejects an unknown id with kOutOfRange",
                 "id=" + std::to_string(ids[i]) + " status=" + st.ToString());
      FUZZ_CHECK(piece.empty(), "a failed Push emits nothing", "piece=" + Escape(piece));
    }
    FUZZ_CHECK(dec.pending_bytes() <= 3, "IncrementalDecoder holds at most 3 bytes",
               "pending=" + std::to_string(dec.pending_bytes()));
    if (expect_valid_pieces) {
      FUZZ_CHECK(ladle::tokenizer::IsValidUtf8(piece) && RefValidUtf8(piece),
                 "IncrementalDecoder emits whole code points of valid text",
                 "piece=" + Escape(piece) + " after id #" + std::to_string(i));
    }
    all += piece;
  }
  all += dec.Flush();
  FUZZ_CHECK(dec.pending_bytes() == 0, "Flush empties the decoder",
             "pending=" + std::to_string(dec.pending_bytes()));
  return all;
}

void CheckDecodeAgreesWithIncremental(std::span<const TokenId> ids, const std::string& decoded,
                                      const char* what) {
  const std::string inc = RunIncremental(ids, RefValidUtf8(decoded));
  FUZZ_CHECK(inc == decoded, what,
             "decode=" + Escape(decoded) + "\nincremental=" + Escape(inc) +
                 "\nids=" + IdsToString(ids));
}

// ---- The input as text ---------------------------------------------------------------------

void FuzzText(std::string_view x) {
  const Tokenizer& tok = *g_tok;
  const bool valid = RefValidUtf8(x);
  const bool check_round_trip = valid || !g_utf8_only;
  Rng rng{Hash(x)};

  EncodeOptions tiny;  // force the parallel splitter on every input
  tiny.pool = g_pool;
  tiny.parallel_min_bytes = rng.Next() % 2;
  tiny.chunk_bytes = 1 + rng.Next() % 48;
  tiny.max_parallelism = rng.Next() % 4;

  // Plain.
  const std::vector<TokenId> serial = tok.EncodePlainSerial(x);
  const std::vector<TokenId> plain = tok.EncodePlain(x);
  FUZZ_CHECK(plain == serial, "EncodePlain == EncodePlainSerial",
             "input=" + Escape(x) + "\nplain=" + IdsToString(plain) +
                 "\nserial=" + IdsToString(serial));
  const std::vector<TokenId> plain_tiny = tok.EncodePlain(x, tiny);
  FUZZ_CHECK(plain_tiny == serial, "EncodePlain(tiny chunks) == EncodePlainSerial",
             "input=" + Escape(x) + " chunk_bytes=" + std::to_string(tiny.chunk_bytes) +
                 " max_parallelism=" + std::to_string(tiny.max_parallelism) +
                 "\nparallel=" + IdsToString(plain_tiny) + "\nserial=" + IdsToString(serial));
  for (TokenId id : plain) {
    FUZZ_CHECK(tok.IsValidId(id) && !tok.IsAddedToken(id),
               "EncodePlain yields only vocabulary ids, never an added token",
               "input=" + Escape(x) + " id=" + std::to_string(id));
  }
  FUZZ_CHECK(x.empty() == plain.empty(), "EncodePlain is empty iff the input is",
             "input=" + Escape(x));
  const std::string plain_dec = MustDecode(plain, "Decode(EncodePlain(x)) succeeds");
  if (check_round_trip) {
    FUZZ_CHECK(plain_dec == x, "Decode(EncodePlain(x)) == x",
               "input=  " + Escape(x) + "\ndecoded=" + Escape(plain_dec) +
                   "\nids=" + IdsToString(plain));
  }
  CheckDecodeAgreesWithIncremental(plain, plain_dec, "IncrementalDecoder == Decode (plain)");

  // Trusted.
  const std::vector<TokenId> trusted = tok.EncodeTrusted(x);
  const std::vector<TokenId> trusted_tiny = tok.EncodeTrusted(x, tiny);
  FUZZ_CHECK(trusted == trusted_tiny, "EncodeTrusted does not depend on EncodeOptions",
             "input=" + Escape(x) + "\ndefault=" + IdsToString(trusted) +
                 "\ntiny=" + IdsToString(trusted_tiny));
  for (TokenId id : trusted) {
    FUZZ_CHECK(tok.IsValidId(id), "EncodeTrusted yields valid ids",
               "input=" + Escape(x) + " id=" + std::to_string(id));
  }
  const std::string trusted_dec = MustDecode(trusted, "Decode(EncodeTrusted(x)) succeeds");
  if (check_round_trip) {
    FUZZ_CHECK(trusted_dec == x, "Decode(EncodeTrusted(x)) == x",
               "input=  " + Escape(x) + "\ndecoded=" + Escape(trusted_dec) +
                   "\nids=" + IdsToString(trusted));
  }
  CheckDecodeAgreesWithIncremental(trusted, trusted_dec, "IncrementalDecoder == Decode (trusted)");

  // Segments: up to 4 cuts, a special id between pieces (sometimes one that is not an added
  // token, which must be rejected), the text pieces taken from the input as they are.
  const size_t cuts = rng.Next() % 5;
  std::vector<size_t> at;
  for (size_t i = 0; i < cuts; ++i) at.push_back(x.empty() ? 0 : rng.Next() % (x.size() + 1));
  std::sort(at.begin(), at.end());
  std::vector<Segment> segs;
  std::vector<TokenId> expected;
  std::vector<uint32_t> expected_pos;
  bool expect_error = false;
  size_t prev = 0;
  auto add_text = [&](std::string_view piece) {
    segs.push_back(Segment::Text(piece));
    const std::vector<TokenId> e = tok.EncodePlain(piece);
    expected.insert(expected.end(), e.begin(), e.end());
  };
  for (size_t i = 0; i < at.size(); ++i) {
    add_text(x.substr(prev, at[i] - prev));
    prev = at[i];
    TokenId id;
    const uint64_t r = rng.Next();
    if (r % 8 == 0 || g_added.empty()) {
      id = static_cast<TokenId>((r >> 8) % (tok.VocabSize() + 10));
    } else {
      id = g_added[(r >> 8) % g_added.size()];
    }
    if (!tok.IsAddedToken(id)) expect_error = true;
    segs.push_back(Segment::Special(id));
    expected_pos.push_back(static_cast<uint32_t>(expected.size()));
    expected.push_back(id);
  }
  add_text(x.substr(prev));

  for (const EncodeOptions& opts : {EncodeOptions{}, tiny}) {
    ladle::Result<EncodedSegments> r = tok.EncodeSegments(segs, opts);
    if (expect_error) {
      FUZZ_CHECK(!r.ok() && r.status().code() == StatusCode::kInvalidArgument,
                 "EncodeSegments rejects a special id that is not an added token",
                 "input=" + Escape(x) + " ok=" + (r.ok() ? "true" : r.status().ToString()));
      continue;
    }
    FUZZ_CHECK(r.ok(), "EncodeSegments succeeds with added-token specials",
               "input=" + Escape(x) + " status=" + r.status().ToString());
    FUZZ_CHECK(r->ids == expected, "EncodeSegments == concatenated EncodePlain + specials",
               "input=" + Escape(x) + "\ngot=     " + IdsToString(r->ids) +
                   "\nexpected=" + IdsToString(expected));
    FUZZ_CHECK(r->special_positions == expected_pos, "EncodeSegments special_positions",
               "input=" + Escape(x) + "\ngot=" +
                   IdsToString(std::span<const TokenId>(r->special_positions.data(),
                                                        r->special_positions.size())) +
                   "\nexpected=" +
                   IdsToString(std::span<const TokenId>(expected_pos.data(), expected_pos.size())));
  }
  if (!expect_error) {
    const std::string seg_dec = MustDecode(expected, "Decode(EncodeSegments) succeeds");
    CheckDecodeAgreesWithIncremental(expected, seg_dec, "IncrementalDecoder == Decode (segments)");
  }
}

// ---- The input as ids ----------------------------------------------------------------------

void FuzzIds(std::string_view x) {
  const Tokenizer& tok = *g_tok;
  const uint64_t modulus = tok.VocabSize() + 10;
  std::vector<TokenId> ids;
  for (size_t i = 0; i + 3 <= x.size(); i += 3) {
    const uint32_t v = static_cast<unsigned char>(x[i]) |
                       (static_cast<uint32_t>(static_cast<unsigned char>(x[i + 1])) << 8) |
                       (static_cast<uint32_t>(static_cast<unsigned char>(x[i + 2])) << 16);
    ids.push_back(static_cast<TokenId>(v % modulus));
  }
  bool all_valid = true;
  for (TokenId id : ids) {
    const bool valid = tok.IsValidId(id);
    all_valid = all_valid && valid;
    const std::optional<std::string> s = tok.IdToToken(id);
    FUZZ_CHECK(s.has_value() == valid, "IdToToken has a value exactly for valid ids",
               "id=" + std::to_string(id));
    if (s) {
      const std::optional<TokenId> back = tok.TokenToId(*s);
      FUZZ_CHECK(back.has_value() && *back == id, "TokenToId(IdToToken(id)) == id",
                 "id=" + std::to_string(id) + " token=" + Escape(*s) +
                     " back=" + (back ? std::to_string(*back) : std::string("none")));
    }
  }
  ladle::Result<std::string> d = tok.Decode(ids);
  if (all_valid) {
    FUZZ_CHECK(d.ok(), "Decode accepts valid ids",
               "ids=" + IdsToString(ids) + " status=" + d.status().ToString());
    CheckDecodeAgreesWithIncremental(ids, *d, "IncrementalDecoder == Decode (arbitrary ids)");
  } else {
    FUZZ_CHECK(!d.ok() && d.status().code() == StatusCode::kOutOfRange,
               "Decode rejects an unknown id with kOutOfRange",
               "ids=" + IdsToString(ids) + (d.ok() ? " ok" : " status=" + d.status().ToString()));
    // The decoder must survive bad ids mid-stream, and the valid ones still add up to Decode
    // of the valid ids alone.
    std::vector<TokenId> valid_ids;
    for (TokenId id : ids) {
      if (tok.IsValidId(id)) valid_ids.push_back(id);
    }
    const std::string inc = RunIncremental(ids, false);
    const std::string ref = MustDecode(valid_ids, "Decode of the valid ids succeeds");
    FUZZ_CHECK(inc == ref, "IncrementalDecoder skips failed pushes",
               "ids=" + IdsToString(ids) + "\nincremental=" + Escape(inc) +
                   "\ndecode(valid)=" + Escape(ref));
  }
}

std::string ResolveTokenizerPath() {
  if (const char* env = std::getenv("LADLE_TOKENIZER"); env && *env) return env;
  const std::string rel = "/tokenizers/deepseek-v3/tokenizer.json";
  for (const std::string& p :
       {std::string(LADLE_FUZZ_CACHE_DIR) + rel, std::string(LADLE_FUZZ_SHARED_DIR) + rel}) {
    if (FILE* f = std::fopen(p.c_str(), "rb")) {
      std::fclose(f);
      return p;
    }
  }
  std::fprintf(stderr,
               "tokenizer_fuzz: no tokenizer.json: set LADLE_TOKENIZER, or put it at %s%s or "
               "%s%s\n",
               LADLE_FUZZ_CACHE_DIR, rel.c_str(), LADLE_FUZZ_SHARED_DIR, rel.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const std::string path = ResolveTokenizerPath();
  ladle::Result<Tokenizer> r = Tokenizer::FromFile(path);
  if (!r.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", path.c_str(),
                 r.status().ToString().c_str());
    std::abort();
  }
  g_tok = new Tokenizer(std::move(r).value());
  g_pool = new ladle::ThreadPool(2);
  for (const auto& t : g_tok->AddedTokens()) g_added.push_back(t.id);
  if (const char* e = std::getenv("LADLE_FUZZ_UTF8_ONLY")) g_utf8_only = std::strcmp(e, "1") == 0;
  std::fprintf(stderr, "tokenizer_fuzz: loaded %s (vocab %zu, %zu added tokens)%s\n",
               path.c_str(), g_tok->VocabSize(), g_added.size(),
               g_utf8_only ? " [round trip checked on valid UTF-8 only]" : "");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view x(reinterpret_cast<const char*>(data), size);
  CheckUtf8Helpers(x);
  FuzzText(x);
  FuzzIds(x);
  return 0;
}
