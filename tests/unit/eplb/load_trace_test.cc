// Load traces (src/eplb/load_trace.cc): a written trace reads back exactly, and malformed
// input of every kind is a kParseError naming the line, never a crash.
#include "ladle/eplb/load_trace.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace ladle::eplb {
namespace {

LoadTraceHeader Shape(uint32_t layers, uint32_t experts, uint32_t top_k = 2) {
  return {.layers = layers, .experts = experts, .top_k = top_k, .source = "test \"quoted\" \\ tab\t"};
}

std::string ValidTrace() {
  std::ostringstream out;
  auto w = LoadTraceWriter::Create(&out, Shape(2, 3));
  EXPECT_TRUE(w.ok());
  EXPECT_TRUE(w->Append(1, std::vector<uint64_t>{1, 2, 3, 4, 5, 6}).ok());
  EXPECT_TRUE(w->Append(7, std::vector<uint64_t>{0, 0, 18446744073709551615ull, 10, 0, 2}).ok());
  return out.str();
}

// Reads every step; the first error, if any.
Status ReadAll(const std::string& text, std::vector<LoadTraceStep>* steps = nullptr) {
  std::istringstream in(text);
  auto r = LoadTraceReader::Open(&in);
  if (!r.ok()) return r.status();
  for (;;) {
    LoadTraceStep s;
    bool end = false;
    LADLE_RETURN_IF_ERROR(r->Next(&s, &end));
    if (end) return Status::Ok();
    if (steps != nullptr) steps->push_back(s);
  }
}

TEST(LoadTrace, RoundTrip) {
  const std::string text = ValidTrace();
  std::istringstream in(text);
  auto r = LoadTraceReader::Open(&in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header().layers, 2u);
  EXPECT_EQ(r->header().experts, 3u);
  EXPECT_EQ(r->header().top_k, 2u);
  EXPECT_EQ(r->header().source, "test \"quoted\" \\ tab\t");
  LoadTraceStep s;
  bool end = true;
  ASSERT_TRUE(r->Next(&s, &end).ok());
  ASSERT_FALSE(end);
  EXPECT_EQ(s.step, 1u);
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(s.Layer(1, 3)[0], 4u);
  ASSERT_TRUE(r->Next(&s, &end).ok());
  ASSERT_FALSE(end);
  EXPECT_EQ(s.step, 7u);
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{0, 0, 18446744073709551615ull, 10, 0, 2}));
  ASSERT_TRUE(r->Next(&s, &end).ok());
  EXPECT_TRUE(end);
  ASSERT_TRUE(r->Next(&s, &end).ok());  // the end stays the end
  EXPECT_TRUE(end);
}

TEST(LoadTrace, LinesArePlainJson) {
  std::string line;
  ASSERT_TRUE(AppendLoadTraceStep(Shape(1, 2), 5, std::vector<uint64_t>{3, 0}, &line).ok());
  EXPECT_EQ(line, "{\"step\":5,\"layers\":[[3,0]]}\n");
  auto h = FormatLoadTraceHeader({.layers = 1, .experts = 2, .top_k = 0, .source = ""});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, "{\"format\":\"ladle-expert-loads\",\"version\":1,\"layers\":1,\"experts\":2,\"top_k\":0}\n");
}

TEST(LoadTrace, AcceptsWhitespaceKeyOrderCrlfAndBlankLines) {
  const std::string text =
      "\n{ \"experts\" : 2 , \"layers\":1,\"version\":1,\"format\":\"ladle-expert-loads\"}\r\n"
      "\n"
      "{\"layers\": [ [ 1 , 2 ] ] , \"step\": 3 }\r\n"
      "  \n"
      "{\"step\":4,\"layers\":[[0,\t0]]}";  // no final newline
  std::vector<LoadTraceStep> steps;
  ASSERT_TRUE(ReadAll(text, &steps).ok()) << ReadAll(text).ToString();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 3u);
  EXPECT_EQ(steps[0].counts, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(steps[1].step, 4u);
}

TEST(LoadTrace, UnicodeEscapeInSource) {
  auto h = ParseLoadTraceHeader(
      R"({"format":"ladle-expert-loads","version":1,"layers":1,"experts":1,"source":"a\u00e9\u4e2d\/\n"})");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->source, "a\xc3\xa9\xe4\xb8\xad/\n");
}

TEST(LoadTrace, MalformedHeadersAreParseErrors) {
  const std::vector<std::string> bad = {
      "",
      "not json",
      "[]",
      R"({"format":"ladle-expert-loads","version":1,"layers":2})",                       // no experts
      R"({"format":"other","version":1,"layers":2,"experts":3})",                        // wrong format
      R"({"format":"ladle-expert-loads","version":2,"layers":2,"experts":3})",           // version
      R"({"format":"ladle-expert-loads","version":1,"layers":0,"experts":3})",           // zero layers
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,"top_k":4})", // top_k > experts
      R"({"format":"ladle-expert-loads","version":1,"layers":4096,"experts":8192})",     // too many cells
      R"({"format":"ladle-expert-loads","version":1,"layers":99999999999999999999,"experts":3})",
      R"({"format":"ladle-expert-loads","version":1,"layers":-2,"experts":3})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2.0,"experts":3})",
      R"({"format":"ladle-expert-loads","version":1,"layers":02,"experts":3})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"layers":2,"experts":3})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,"extra":1})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3} x)",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3)",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,"source":"abc)",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,"source":"\q"})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,"source":"\u12"})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,"source":"\u12G4"})",
      R"({"format":"ladle-expert-loads","version":1,"layers":2,"experts":3,})",
      R"({"format":"ladle-expert-loads" "version":1,"layers":2,"experts":3})",
  };
  for (const std::string& line : bad) {
    auto h = ParseLoadTraceHeader(line);
    ASSERT_FALSE(h.ok()) << line;
    EXPECT_EQ(h.status().code(), StatusCode::kParseError) << line << " -> " << h.status().ToString();
    std::istringstream in(line + "\n");
    auto r = LoadTraceReader::Open(&in);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), StatusCode::kParseError) << line;
  }
}

TEST(LoadTrace, MalformedStepsAreParseErrorsNamingTheLine) {
  const std::string header = "{\"format\":\"ladle-expert-loads\",\"version\":1,\"layers\":2,\"experts\":2}\n";
  const std::vector<std::string> bad = {
      R"({"step":1})",                                   // no layers
      R"({"layers":[[1,2],[3,4]]})",                     // no step
      R"({"step":1,"layers":[[1,2]]})",                  // too few layers
      R"({"step":1,"layers":[[1,2],[3,4],[5,6]]})",      // too many layers
      R"({"step":1,"layers":[[1,2],[3]]})",              // too few experts
      R"({"step":1,"layers":[[1,2,9],[3,4]]})",          // too many experts
      R"({"step":1,"layers":[[1,-2],[3,4]]})",           // negative
      R"({"step":1,"layers":[[1,2.5],[3,4]]})",          // fraction
      R"({"step":1,"layers":[[1,2e3],[3,4]]})",          // exponent
      R"({"step":1,"layers":[[1,"2"],[3,4]]})",          // string
      R"({"step":1,"layers":[[1,18446744073709551616],[3,4]]})",  // 2^64
      R"({"step":1,"layers":[[1,2],[3,4]],"step":2})",   // repeated key
      R"({"step":1,"layers":[[1,2],[3,4]],"x":0})",      // unknown key
      R"({"step":1,"layers":[[1,2],[3,4]]}})",           // trailing characters
      R"({"step":1,"layers":[[1,2],[3,4])",              // truncated
      R"({"step":1,"layers":[[1,2],[3,4]]}{"step":2})",  // two objects on a line
      R"({"step":-1,"layers":[[1,2],[3,4]]})",
      R"({"step":null,"layers":[[1,2],[3,4]]})",
      R"(["step",1])",
  };
  for (const std::string& line : bad) {
    const Status s = ReadAll(header + "{\"step\":1,\"layers\":[[0,0],[0,0]]}\n" + line + "\n");
    ASSERT_FALSE(s.ok()) << line;
    EXPECT_EQ(s.code(), StatusCode::kParseError) << line;
    EXPECT_NE(s.message().find("line 3"), std::string::npos) << s.ToString();
  }
  // Steps must increase.
  const std::string dup = header + "{\"step\":5,\"layers\":[[0,0],[0,0]]}\n{\"step\":5,\"layers\":[[0,0],[0,0]]}\n";
  const Status s = ReadAll(dup);
  EXPECT_EQ(s.code(), StatusCode::kParseError);
  EXPECT_NE(s.message().find("not after step 5"), std::string::npos) << s.ToString();
}

TEST(LoadTrace, ReaderStaysFailedAfterAnError) {
  std::istringstream in(
      "{\"format\":\"ladle-expert-loads\",\"version\":1,\"layers\":1,\"experts\":1}\nbad\n{\"step\":1,\"layers\":[[1]]}\n");
  auto r = LoadTraceReader::Open(&in);
  ASSERT_TRUE(r.ok());
  LoadTraceStep s;
  bool end = false;
  EXPECT_FALSE(r->Next(&s, &end).ok());
  EXPECT_FALSE(r->Next(&s, &end).ok());
}

// Every truncation and every single-byte corruption of a valid trace either reads or fails
// with a Status: never a crash.
TEST(LoadTrace, TruncationsAndCorruptionsNeverCrash) {
  const std::string text = ValidTrace();
  for (size_t n = 0; n <= text.size(); ++n) {
    const Status s = ReadAll(text.substr(0, n));
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kParseError) << n << ": " << s.ToString();
    }
  }
  const std::string junk("\0\"\\{}[],:-.e0 9x\n\r\t\xff", 20);
  for (size_t i = 0; i < text.size(); ++i) {
    for (char c : junk) {
      std::string t = text;
      t[i] = c;
      const Status s = ReadAll(t);
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kParseError) << i << ": " << s.ToString();
      }
    }
  }
}

TEST(LoadTrace, WriterRejectsWrongShapesAndBackwardSteps) {
  std::ostringstream out;
  EXPECT_EQ(LoadTraceWriter::Create(&out, {.layers = 0, .experts = 3, .top_k = 0, .source = ""}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadTraceWriter::Create(&out, {.layers = 1, .experts = 3, .top_k = 4, .source = ""}).status().code(),
            StatusCode::kInvalidArgument);
  auto w = LoadTraceWriter::Create(&out, Shape(1, 2));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->Append(1, std::vector<uint64_t>{1, 2, 3}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(w->Append(2, std::vector<uint64_t>{1, 2}).ok());
  EXPECT_EQ(w->Append(2, std::vector<uint64_t>{1, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Append(1, std::vector<uint64_t>{1, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->steps_written(), 1u);
}

TEST(LoadTrace, WriterReportsAFailedStream) {
  std::ostringstream out;
  auto w = LoadTraceWriter::Create(&out, Shape(1, 1, 1));
  ASSERT_TRUE(w.ok());
  out.setstate(std::ios::badbit);
  EXPECT_EQ(w->Append(1, std::vector<uint64_t>{1}).code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace ladle::eplb
