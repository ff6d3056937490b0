// libFuzzer target for the speculative-decoding loaders: the SPS table text (SpsTable::Load)
// and a drafter folder (Drafter::Load: drafter.json + drafter.safetensors). Properties:
//  - no input crashes, hangs or leaks a loader;
//  - a table that loads validates, and saves and loads back to the same points;
//  - a drafter that loads drafts γ tokens inside the target's vocabulary with confidences in
//    (0, 1) for an ordinary input.
// Input layout: byte 0 picks the loader (even: SPS text = the rest; odd: bytes 1–2 are the
// JSON's length n, then n bytes of JSON, then the safetensors bytes).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ladle/engine/drafter.h"
#include "ladle/engine/spec_policy.h"

using namespace ladle::engine;

namespace {

std::string Dir() {
  static const std::string d = [] {
    std::string p = "/tmp/ladle-spec-fuzz-" + std::to_string(::getpid());
    std::string cmd = "mkdir -p " + p;
    if (std::system(cmd.c_str()) != 0) std::abort();
    return p;
  }();
  return d;
}

void Write(const std::string& path, const uint8_t* p, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
}

void Fail(const char* why) {
  std::fprintf(stderr, "%s\n", why);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string dir = Dir();
  if ((data[0] & 1) == 0) {
    const std::string path = dir + "/sps.txt";
    Write(path, data + 1, size - 1);
    auto t = SpsTable::Load(path);
    if (!t.ok()) return 0;
    if (!t->Validate().ok()) Fail("a loaded SPS table does not validate");
    const std::string again = dir + "/sps2.txt";
    if (!t->Save(again).ok()) Fail("a loaded SPS table does not save");
    auto u = SpsTable::Load(again);
    if (!u.ok() || u->tokens != t->tokens || u->sps != t->sps) Fail("an SPS table does not round-trip");
    // Past the last entry too, without overflowing when it is near INT64_MAX.
    const int64_t last = t->tokens.back();
    const int64_t past = last > INT64_MAX / 2 - 1 ? INT64_MAX : last * 2 + 1;
    for (int64_t b : {int64_t{1}, last, past}) {
      const double v = t->At(b);
      if (!(v > 0) || !std::isfinite(v)) Fail("SPS is not a positive finite rate");
    }
    return 0;
  }
  if (size < 3) return 0;
  const size_t n = std::min<size_t>(size - 3, static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8);
  Write(dir + "/drafter.json", data + 3, n);
  Write(dir + "/drafter.safetensors", data + 3 + n, size - 3 - n);
  auto d = Drafter::Load(dir);
  if (!d.ok()) return 0;
  const DrafterConfig& c = (*d)->config();
  std::vector<float> h(static_cast<size_t>(c.hidden), 0.25f);
  const DraftInput in{h, 0};
  std::vector<DraftOutput> out;
  (*d)->Draft(std::span<const DraftInput>(&in, 1), &out);
  if (out.size() != 1 || out[0].tokens.size() != static_cast<size_t>(c.draft_tokens) ||
      out[0].confidences.size() != static_cast<size_t>(c.draft_tokens)) {
    Fail("a loaded drafter drafts the wrong number of tokens");
  }
  for (size_t k = 0; k < out[0].tokens.size(); ++k) {
    if (out[0].tokens[k] >= static_cast<TokenId>(c.target_vocab)) Fail("a draft is outside the target vocabulary");
    const float p = out[0].confidences[k];
    if (!(p > 0.0f && p < 1.0f)) Fail("a confidence is outside (0, 1)");
  }
  return 0;
}
