// Recorded per-expert loads ("load traces"): every step's routed tokens per logical expert of
// every MoE layer, one line per step, so the bench can replay a recording instead of the
// synthetic generator (docs/eplb.md, "Load traces").
//
// Format: JSON lines, each line one object, '\n'-terminated (a '\r' before it and empty lines
// are ignored). The first line is the header, every later line one step:
//
//   {"format":"ladle-expert-loads","version":1,"layers":61,"experts":256,"top_k":8,"source":"..."}
//   {"step":1,"layers":[[12,0,7,...],[...],...]}
//   {"step":2,"layers":[[...],...]}
//
//   header  format   exactly "ladle-expert-loads"            (required)
//           version  1                                       (required)
//           layers   MoE layers L >= 1                       (required)
//           experts  logical experts per layer E >= 1        (required)
//           top_k    experts per token, 0 = unknown, <= E    (optional, default 0): a step's
//                    tokens are a layer's count sum / top_k
//           source   free text: what recorded the trace      (optional)
//   step    step     the step number; strictly increasing down the file. A step with no line
//                    had no tokens (the window counts it as zero load).
//           layers   exactly L arrays of exactly E non-negative integers (< 2^64): the tokens
//                    routed to each logical expert of each layer in that step.
//
// Keys may come in any order; unknown or repeated keys, fractions, exponents, signs and
// anything after the closing brace are errors. Steps hold integers only, so a step line is
// plain JSON that any JSON reader takes, and a trace can be written and read step by step
// (streamed) without holding more than one step.
//
// The reader and writer work on streams the caller opens; nothing here touches the file
// system or a clock. Malformed input is a kParseError naming the line, never a crash.
#pragma once

#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/result.h"

namespace ladle::eplb {

inline constexpr std::string_view kLoadTraceFormat = "ladle-expert-loads";
inline constexpr uint64_t kLoadTraceVersion = 1;

struct LoadTraceHeader {
  uint32_t layers = 0;   // MoE layers
  uint32_t experts = 0;  // logical experts per layer
  uint32_t top_k = 0;    // experts per token; 0: unknown
  std::string source;    // what recorded it (free text)
};

struct LoadTraceStep {
  uint64_t step = 0;
  std::vector<uint64_t> counts;  // [layer][expert], row-major: layers x experts
  std::span<const uint64_t> Layer(uint32_t layer, uint32_t experts) const {
    return {counts.data() + size_t{layer} * experts, experts};
  }
};

// The largest layers x experts a header may declare (bounds what a step line allocates).
inline constexpr uint64_t kLoadTraceMaxCells = uint64_t{1} << 24;

// One header line, '\n' included. kInvalidArgument for zero layers or experts, top_k above
// experts, or more than kLoadTraceMaxCells cells.
Result<std::string> FormatLoadTraceHeader(const LoadTraceHeader& header);
// Appends one step line ('\n' included) to *out. kInvalidArgument unless counts has
// layers x experts entries.
Status AppendLoadTraceStep(const LoadTraceHeader& header, uint64_t step, std::span<const uint64_t> counts,
                           std::string* out);

// One line without its '\n'. kParseError for anything but the format above.
Result<LoadTraceHeader> ParseLoadTraceHeader(std::string_view line);
// One step line of a trace with `header`'s shape into *out (counts resized to layers x
// experts). kParseError for a malformed line or the wrong shape.
Status ParseLoadTraceStep(std::string_view line, const LoadTraceHeader& header, LoadTraceStep* out);

// Writes a trace to `out` (which must outlive the writer): the header at Create, one line per
// Append. kInvalidArgument for a step not after the previous one or a wrong count size;
// kIoError when the stream fails.
class LoadTraceWriter {
 public:
  static Result<LoadTraceWriter> Create(std::ostream* out, LoadTraceHeader header);
  Status Append(uint64_t step, std::span<const uint64_t> counts);
  const LoadTraceHeader& header() const { return header_; }
  uint64_t steps_written() const { return steps_; }

 private:
  LoadTraceWriter(std::ostream* out, LoadTraceHeader header) : out_(out), header_(std::move(header)) {}
  std::ostream* out_;
  LoadTraceHeader header_;
  std::string line_;
  uint64_t steps_ = 0, last_step_ = 0;
};

// Reads a trace from `in` (which must outlive the reader) one step at a time.
class LoadTraceReader {
 public:
  // Reads and checks the header line. kParseError for a missing or malformed header.
  static Result<LoadTraceReader> Open(std::istream* in);
  const LoadTraceHeader& header() const { return header_; }
  // The next step into *out with *at_end false, or *at_end true at the end of the input.
  // kParseError (with the line number) for a malformed line or a step not after the previous
  // one; kIoError when the stream fails other than at its end. After an error the reader
  // stays failed (every later call returns an error).
  Status Next(LoadTraceStep* out, bool* at_end);
  uint64_t line_number() const { return line_no_; }

 private:
  LoadTraceReader(std::istream* in, LoadTraceHeader header) : in_(in), header_(std::move(header)) {}
  std::istream* in_;
  LoadTraceHeader header_;
  std::string line_;
  uint64_t line_no_ = 1;  // the header
  bool have_step_ = false, failed_ = false;
  uint64_t last_step_ = 0;
};

}  // namespace ladle::eplb
