// Server-sent events (the WHATWG "text/event-stream" format) in both directions, and the HTTP
// framing a streamed response needs.
//
// Server side:
//   out = SseResponseHead({.http11 = true, .keep_alive = true, .headers = {{"x-request-id", id}}});
//   AppendSseEvent("message_start", json, &frame);   // "event: message_start\ndata: {...}\n\n"
//   AppendChunk(frame, &out);                        // HTTP/1.1 chunked transfer coding
//   out += kLastChunk;                               // the end of the stream
// Client side:
//   SseParser parser;
//   std::vector<SseEvent> events;
//   Status s = parser.Feed(bytes, &events);          // any split of the stream, byte by byte too
//
// The parser follows the spec's line rules: lines end in "\n", "\r\n" or "\r" (a "\r\n" split
// between two Feed calls is one line end); "field: value" loses one space after the colon; a
// line starting with ':' is a comment; "data" lines of one event are joined with "\n"; a blank
// line dispatches the event unless it has no data. Not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ladle/core/status.h"
#include "ladle/net/http.h"

namespace ladle::net {

// "event: <event>\n" (left out when `event` is empty), one "data: <line>\n" per line of
// `data` (at least one), then the blank line.
void AppendSseEvent(std::string_view event, std::string_view data, std::string* out);

// One chunk of the chunked transfer coding: "<hex size>\r\n<data>\r\n"; nothing for empty
// `data` (an empty chunk would end the body).
void AppendChunk(std::string_view data, std::string* out);
// The last chunk: the end of a chunked body.
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

struct SseHeadOptions {
  // HTTP/1.1: the body is chunked (AppendChunk). HTTP/1.0 has no chunks: the stream is the
  // raw bytes and ends when the connection closes (keep_alive must then be false).
  bool http11 = true;
  bool keep_alive = true;
  std::string server = "ladle";
  HttpHeaders headers;  // extra headers, after Cache-Control, in this order
};
// "HTTP/1.x 200 OK" and the headers of an event stream (Server, Content-Type:
// text/event-stream, Cache-Control: no-cache, the extra headers, Transfer-Encoding when
// chunked, Connection), ending with the blank line.
std::string SseResponseHead(const SseHeadOptions& options);

struct SseEvent {
  std::string event;  // the "event" field; empty means the spec's default, "message"
  std::string data;
  std::string id;     // the last "id" seen on the stream, as the spec keeps it
};

class SseParser {
 public:
  // An event whose buffered lines pass max_event_bytes is an error (a stream that never sends
  // a blank line must not grow memory without bound).
  explicit SseParser(size_t max_event_bytes = 64u << 20) : max_event_bytes_(max_event_bytes) {}

  // Parses `bytes` and appends each event they complete to *out. After an error every later
  // call fails too.
  Status Feed(std::string_view bytes, std::vector<SseEvent>* out);
  // Nothing buffered: the stream so far ended on an event boundary.
  bool idle() const { return line_.empty() && data_.empty() && event_.empty() && !has_data_; }

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);

  size_t max_event_bytes_;
  std::string line_;  // the current line, not yet ended
  bool after_cr_ = false;  // the last byte was '\r': a '\n' next is part of that line end
  std::string event_, data_, id_;
  bool has_data_ = false;
  size_t event_bytes_ = 0;
  Status error_;
};

}  // namespace ladle::net
