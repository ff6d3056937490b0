// SSE framing and the incremental parser: every split of a stream parses to the same events.
#include "ladle/net/sse.h"

#include <gtest/gtest.h>

namespace ladle::net {
namespace {

std::vector<SseEvent> ParseAll(const std::vector<std::string_view>& pieces) {
  SseParser p;
  std::vector<SseEvent> out;
  for (auto piece : pieces) EXPECT_TRUE(p.Feed(piece, &out).ok());
  return out;
}

bool Same(const std::vector<SseEvent>& a, const std::vector<SseEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].event != b[i].event || a[i].data != b[i].data || a[i].id != b[i].id) return false;
  }
  return true;
}

// Every line ending, a comment, multi-line data, an event name, an id, a field without a
// colon, an event with no data (not dispatched), UTF-8 text, and [DONE].
constexpr std::string_view kStream =
    ": ping\n"
    "event: message_start\ndata: {\"a\":1}\n\n"
    "data: line one\r\ndata: line two\r\n\r\n"
    "id: 7\revent: delta\rdata:no space\r\r"
    "event: nothing\n\n"
    "data\n\n"
    "data: caf\xc3\xa9 \xe2\x9c\x93\n\n"
    "data: [DONE]\n\n";

TEST(SseParser, ParsesEveryFieldAndLineEnding) {
  const auto ev = ParseAll({kStream});
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0].event, "message_start");
  EXPECT_EQ(ev[0].data, "{\"a\":1}");
  EXPECT_EQ(ev[1].event, "");
  EXPECT_EQ(ev[1].data, "line one\nline two");
  EXPECT_EQ(ev[2].event, "delta");
  EXPECT_EQ(ev[2].data, "no space");
  EXPECT_EQ(ev[2].id, "7");
  EXPECT_EQ(ev[3].data, "");  // "data" alone: an empty data line, dispatched
  EXPECT_EQ(ev[3].id, "7");   // the last id stays
  EXPECT_EQ(ev[4].data, "caf\xc3\xa9 \xe2\x9c\x93");
  EXPECT_EQ(ev[5].data, "[DONE]");
}

TEST(SseParser, EverySplitGivesTheSameEvents) {
  const auto whole = ParseAll({kStream});
  for (size_t i = 0; i <= kStream.size(); ++i) {
    EXPECT_TRUE(Same(ParseAll({kStream.substr(0, i), kStream.substr(i)}), whole)) << "split at " << i;
    for (size_t j = i; j <= kStream.size(); j += 7) {  // three pieces, a second cut every 7 bytes
      ASSERT_TRUE(Same(ParseAll({kStream.substr(0, i), kStream.substr(i, j - i), kStream.substr(j)}), whole))
          << "splits at " << i << ", " << j;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < kStream.size(); ++i) bytes.push_back(kStream.substr(i, 1));
  EXPECT_TRUE(Same(ParseAll(bytes), whole));
}

TEST(SseParser, IdleOnlyOnAnEventBoundary) {
  SseParser p;
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.Feed("data: x\n", &out).ok());
  EXPECT_FALSE(p.idle());
  ASSERT_TRUE(p.Feed("\n", &out).ok());
  EXPECT_TRUE(p.idle());
  EXPECT_EQ(out.size(), 1u);
}

TEST(SseParser, AnEventOverTheLimitIsAnError) {
  SseParser p(/*max_event_bytes=*/64);
  std::vector<SseEvent> out;
  EXPECT_TRUE(p.Feed("data: short\n\n", &out).ok());
  Status s = p.Feed("data: " + std::string(100, 'x'), &out);  // no line end yet: still counted
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(p.Feed("\n\n", &out).ok());  // and it stays failed
  EXPECT_EQ(out.size(), 1u);
}

TEST(SseWriter, FramesEventsAndChunks) {
  std::string s;
  AppendSseEvent("message_delta", R"({"x":1})", &s);
  EXPECT_EQ(s, "event: message_delta\ndata: {\"x\":1}\n\n");
  s.clear();
  AppendSseEvent("", "a\nb", &s);
  EXPECT_EQ(s, "data: a\ndata: b\n\n");
  // What the writer frames, the parser reads back.
  std::vector<SseEvent> ev;
  SseParser p;
  ASSERT_TRUE(p.Feed(s, &ev).ok());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "a\nb");

  std::string c;
  AppendChunk("", &c);
  EXPECT_EQ(c, "");  // an empty chunk would end the body
  AppendChunk(std::string(26, 'z'), &c);
  EXPECT_EQ(c, "1a\r\n" + std::string(26, 'z') + "\r\n");
  EXPECT_EQ(kLastChunk, "0\r\n\r\n");
}

TEST(SseWriter, ResponseHead) {
  SseHeadOptions o;
  o.headers = {{"x-request-id", "r1"}};
  EXPECT_EQ(SseResponseHead(o),
            "HTTP/1.1 200 OK\r\nServer: ladle\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "x-request-id: r1\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n");
  o.http11 = false;
  o.keep_alive = false;
  o.headers.clear();
  EXPECT_EQ(SseResponseHead(o),
            "HTTP/1.0 200 OK\r\nServer: ladle\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Connection: close\r\n\r\n");
}

}  // namespace
}  // namespace ladle::net
