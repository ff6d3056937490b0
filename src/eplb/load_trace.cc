// Load traces (include/ladle/eplb/load_trace.h): a strict reader of exactly the format's JSON
// shapes, bounds-checked character by character, and the writer that produces them.
#include "ladle/eplb/load_trace.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

namespace ladle::eplb {
namespace {

Status ShapeError(const LoadTraceHeader& h) {
  if (h.layers == 0 || h.experts == 0) return InvalidArgument("load trace: layers and experts must be >= 1");
  if (h.top_k > h.experts) {
    return InvalidArgument(fmt::format("load trace: top_k {} exceeds {} experts", h.top_k, h.experts));
  }
  if (uint64_t{h.layers} * h.experts > kLoadTraceMaxCells) {
    return InvalidArgument(fmt::format("load trace: {} layers x {} experts exceeds {} cells", h.layers, h.experts,
                                       kLoadTraceMaxCells));
  }
  return Status::Ok();
}

void AppendEscaped(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20) {
      *out += fmt::format("\\u{:04x}", c);
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

void AppendUint(uint64_t v, std::string* out) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

// A cursor over one line. Every read checks the bound; errors carry the column.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}

  void SkipWs() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  bool AtEnd() const { return i_ >= s_.size(); }
  bool Peek(char c) {
    SkipWs();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool Consume(char c) {
    if (!Peek(c)) return false;
    ++i_;
    return true;
  }
  Status Expect(char c) {
    if (Consume(c)) return Status::Ok();
    return Error(fmt::format("expected '{}'", c));
  }
  Status Error(std::string_view what) const {
    if (i_ >= s_.size()) return ParseError(fmt::format("{} at the end of the line", what));
    return ParseError(fmt::format("{} at column {}", what, i_ + 1));
  }

  Status String(std::string* out) {
    LADLE_RETURN_IF_ERROR(Expect('"'));
    out->clear();
    for (;;) {
      if (i_ >= s_.size()) return Error("unterminated string");
      const char ch = s_[i_++];
      if (ch == '"') return Status::Ok();
      if (static_cast<unsigned char>(ch) < 0x20) return Error("control character in a string");
      if (ch != '\\') {
        out->push_back(ch);
        continue;
      }
      if (i_ >= s_.size()) return Error("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          if (s_.size() - i_ < 4) return Error("short \\u escape");
          uint32_t cp = 0;
          auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, cp, 16);
          if (ec != std::errc() || p != s_.data() + i_ + 4) return Error("bad \\u escape");
          i_ += 4;
          // Free text only: a code point of the BMP as UTF-8 (surrogates are kept as their
          // own three bytes; nothing here interprets them).
          if (cp < 0x80) {
            out->push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          break;
        }
        default: return Error("bad escape");
      }
    }
  }

  // A non-negative JSON integer: digits only, no sign, fraction or exponent, < 2^64.
  Status Uint(uint64_t* out) {
    SkipWs();
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ == start) return Error("expected a non-negative integer");
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) return Error("expected an integer");
    if (i_ - start > 1 && s_[start] == '0') return Error("leading zero");
    auto [p, ec] = std::from_chars(s_.data() + start, s_.data() + i_, *out);
    if (ec != std::errc() || p != s_.data() + i_) {
      i_ = start;
      return Error("integer out of range");
    }
    return Status::Ok();
  }

  // Calls `member(key)` for each key of an object, at its value; the object must be the whole
  // line (trailing blanks allowed).
  template <typename F>
  Status Object(F&& member) {
    LADLE_RETURN_IF_ERROR(Expect('{'));
    if (!Consume('}')) {
      std::string key;
      do {
        LADLE_RETURN_IF_ERROR(String(&key));
        LADLE_RETURN_IF_ERROR(Expect(':'));
        LADLE_RETURN_IF_ERROR(member(key));
      } while (Consume(','));
      LADLE_RETURN_IF_ERROR(Expect('}'));
    }
    SkipWs();
    if (!AtEnd()) return Error("trailing characters");
    return Status::Ok();
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

Status Narrow(const Cursor& c, uint64_t v, uint64_t max, std::string_view key, uint32_t* out) {
  if (v > max) return c.Error(fmt::format("\"{}\" {} out of range", key, v));
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

std::string_view StripCr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool Blank(std::string_view line) { return line.find_first_not_of(" \t") == std::string_view::npos; }

}  // namespace

Result<std::string> FormatLoadTraceHeader(const LoadTraceHeader& header) {
  LADLE_RETURN_IF_ERROR(ShapeError(header));
  std::string out = "{\"format\":";
  AppendEscaped(kLoadTraceFormat, &out);
  out += fmt::format(",\"version\":{},\"layers\":{},\"experts\":{},\"top_k\":{}", kLoadTraceVersion, header.layers,
                     header.experts, header.top_k);
  if (!header.source.empty()) {
    out += ",\"source\":";
    AppendEscaped(header.source, &out);
  }
  out += "}\n";
  return out;
}

Status AppendLoadTraceStep(const LoadTraceHeader& header, uint64_t step, std::span<const uint64_t> counts,
                           std::string* out) {
  if (counts.size() != size_t{header.layers} * header.experts) {
    return InvalidArgument(fmt::format("load trace: {} counts for {} layers x {} experts", counts.size(),
                                       header.layers, header.experts));
  }
  *out += "{\"step\":";
  AppendUint(step, out);
  *out += ",\"layers\":[";
  for (uint32_t l = 0; l < header.layers; ++l) {
    if (l > 0) out->push_back(',');
    out->push_back('[');
    for (uint32_t e = 0; e < header.experts; ++e) {
      if (e > 0) out->push_back(',');
      AppendUint(counts[size_t{l} * header.experts + e], out);
    }
    out->push_back(']');
  }
  *out += "]}\n";
  return Status::Ok();
}

Result<LoadTraceHeader> ParseLoadTraceHeader(std::string_view line) {
  Cursor c(StripCr(line));
  LoadTraceHeader h;
  bool format = false, version = false, layers = false, experts = false, top_k = false, source = false;
  auto dup = [&](bool& seen, std::string_view key) -> Status {
    if (seen) return c.Error(fmt::format("repeated key \"{}\"", key));
    seen = true;
    return Status::Ok();
  };
  Status s = c.Object([&](const std::string& key) -> Status {
    uint64_t v = 0;
    if (key == "format") {
      LADLE_RETURN_IF_ERROR(dup(format, key));
      std::string f;
      LADLE_RETURN_IF_ERROR(c.String(&f));
      if (f != kLoadTraceFormat) return c.Error(fmt::format("format \"{}\" is not \"{}\"", f, kLoadTraceFormat));
    } else if (key == "version") {
      LADLE_RETURN_IF_ERROR(dup(version, key));
      LADLE_RETURN_IF_ERROR(c.Uint(&v));
      if (v != kLoadTraceVersion) return c.Error(fmt::format("unsupported version {}", v));
    } else if (key == "layers") {
      LADLE_RETURN_IF_ERROR(dup(layers, key));
      LADLE_RETURN_IF_ERROR(c.Uint(&v));
      LADLE_RETURN_IF_ERROR(Narrow(c, v, kLoadTraceMaxCells, key, &h.layers));
    } else if (key == "experts") {
      LADLE_RETURN_IF_ERROR(dup(experts, key));
      LADLE_RETURN_IF_ERROR(c.Uint(&v));
      LADLE_RETURN_IF_ERROR(Narrow(c, v, kLoadTraceMaxCells, key, &h.experts));
    } else if (key == "top_k") {
      LADLE_RETURN_IF_ERROR(dup(top_k, key));
      LADLE_RETURN_IF_ERROR(c.Uint(&v));
      LADLE_RETURN_IF_ERROR(Narrow(c, v, kLoadTraceMaxCells, key, &h.top_k));
    } else if (key == "source") {
      LADLE_RETURN_IF_ERROR(dup(source, key));
      LADLE_RETURN_IF_ERROR(c.String(&h.source));
    } else {
      return c.Error(fmt::format("unknown header key \"{}\"", key));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s.WithContext("load trace header");
  if (!format || !version || !layers || !experts) {
    return ParseError("load trace header: needs \"format\", \"version\", \"layers\" and \"experts\"");
  }
  if (Status shape = ShapeError(h); !shape.ok()) return ParseError(shape.message());
  return h;
}

Status ParseLoadTraceStep(std::string_view line, const LoadTraceHeader& header, LoadTraceStep* out) {
  LADLE_RETURN_IF_ERROR(ShapeError(header));
  Cursor c(StripCr(line));
  const uint32_t L = header.layers, E = header.experts;
  out->counts.resize(size_t{L} * E);
  bool step = false, layers = false;
  Status s = c.Object([&](const std::string& key) -> Status {
    if (key == "step") {
      if (step) return c.Error("repeated key \"step\"");
      step = true;
      return c.Uint(&out->step);
    }
    if (key != "layers") return c.Error(fmt::format("unknown step key \"{}\"", key));
    if (layers) return c.Error("repeated key \"layers\"");
    layers = true;
    LADLE_RETURN_IF_ERROR(c.Expect('['));
    for (uint32_t l = 0; l < L; ++l) {
      if (l > 0) LADLE_RETURN_IF_ERROR(c.Expect(','));
      LADLE_RETURN_IF_ERROR(c.Expect('['));
      uint64_t* row = out->counts.data() + size_t{l} * E;
      for (uint32_t e = 0; e < E; ++e) {
        if (e > 0 && !c.Consume(',')) {
          return c.Error(fmt::format("layer {} has {} experts, not {}", l, e, E));
        }
        LADLE_RETURN_IF_ERROR(c.Uint(&row[e]));
      }
      if (!c.Consume(']')) return c.Error(fmt::format("layer {} has more than {} experts", l, E));
    }
    if (!c.Consume(']')) return c.Error(fmt::format("more than {} layers", L));
    return Status::Ok();
  });
  if (!s.ok()) return s.WithContext("load trace step");
  if (!step || !layers) return ParseError("load trace step: needs \"step\" and \"layers\"");
  return Status::Ok();
}

Result<LoadTraceWriter> LoadTraceWriter::Create(std::ostream* out, LoadTraceHeader header) {
  LADLE_ASSIGN_OR_RETURN(std::string line, FormatLoadTraceHeader(header));
  out->write(line.data(), static_cast<std::streamsize>(line.size()));
  if (!*out) return IoError("load trace: cannot write the header");
  return LoadTraceWriter(out, std::move(header));
}

Status LoadTraceWriter::Append(uint64_t step, std::span<const uint64_t> counts) {
  if (steps_ > 0 && step <= last_step_) {
    return InvalidArgument(fmt::format("load trace: step {} is not after step {}", step, last_step_));
  }
  line_.clear();
  LADLE_RETURN_IF_ERROR(AppendLoadTraceStep(header_, step, counts, &line_));
  out_->write(line_.data(), static_cast<std::streamsize>(line_.size()));
  if (!*out_) return IoError(fmt::format("load trace: cannot write step {}", step));
  ++steps_;
  last_step_ = step;
  return Status::Ok();
}

Result<LoadTraceReader> LoadTraceReader::Open(std::istream* in) {
  std::string line;
  uint64_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (!Blank(StripCr(line))) break;
  }
  if (line_no == 0 || Blank(StripCr(line))) {
    if (in->bad()) return IoError("load trace: cannot read the header");
    return ParseError("load trace: empty input (no header line)");
  }
  auto h = ParseLoadTraceHeader(line);
  if (!h.ok()) return h.status().WithContext(fmt::format("line {}", line_no));
  LoadTraceReader r(in, std::move(h).value());
  r.line_no_ = line_no;
  return r;
}

Status LoadTraceReader::Next(LoadTraceStep* out, bool* at_end) {
  *at_end = false;
  if (failed_) return ParseError("load trace: the reader failed earlier");
  for (;;) {
    if (!std::getline(*in_, line_)) {
      if (in_->bad()) {
        failed_ = true;
        return IoError(fmt::format("load trace: read failed after line {}", line_no_));
      }
      *at_end = true;
      return Status::Ok();
    }
    ++line_no_;
    if (!Blank(StripCr(line_))) break;
  }
  if (Status s = ParseLoadTraceStep(line_, header_, out); !s.ok()) {
    failed_ = true;
    return s.WithContext(fmt::format("line {}", line_no_));
  }
  if (have_step_ && out->step <= last_step_) {
    failed_ = true;
    return ParseError(fmt::format("line {}: load trace: step {} is not after step {}", line_no_, out->step, last_step_));
  }
  have_step_ = true;
  last_step_ = out->step;
  return Status::Ok();
}

}  // namespace ladle::eplb
