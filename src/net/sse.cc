// SSE framing (server side) and the incremental event parser (client side).
#include "ladle/net/sse.h"

#include <fmt/format.h>

namespace ladle::net {

void AppendSseEvent(std::string_view event, std::string_view data, std::string* out) {
  if (!event.empty()) {
    out->append("event: ");
    out->append(event);
    out->push_back('\n');
  }
  // One data line per line of `data`: a newline inside would otherwise end the field.
  size_t pos = 0;
  while (true) {
    const size_t nl = data.find('\n', pos);
    out->append("data: ");
    out->append(data.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    out->push_back('\n');
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  out->push_back('\n');
}

void AppendChunk(std::string_view data, std::string* out) {
  if (data.empty()) return;
  fmt::format_to(std::back_inserter(*out), "{:x}\r\n", data.size());
  out->append(data);
  out->append("\r\n");
}

std::string SseResponseHead(const SseHeadOptions& o) {
  std::string out = fmt::format(
      "HTTP/1.{} 200 OK\r\nServer: {}\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n",
      o.http11 ? 1 : 0, o.server);
  for (const auto& [k, v] : o.headers) fmt::format_to(std::back_inserter(out), "{}: {}\r\n", k, v);
  if (o.http11) out += "Transfer-Encoding: chunked\r\n";
  out += o.keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

Status SseParser::Feed(std::string_view bytes, std::vector<SseEvent>* out) {
  if (!error_.ok()) return error_;
  size_t start = 0;  // the first byte of `bytes` not yet in line_
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == start && line_.empty()) {
      // The '\n' of a "\r\n" whose '\r' ended the previous line.
      after_cr_ = false;
      start = i + 1;
      continue;
    }
    line_.append(bytes.substr(start, i - start));
    start = i + 1;
    after_cr_ = c == '\r';
    event_bytes_ += line_.size() + 1;
    Line(line_, out);
    line_.clear();
    if (event_bytes_ > max_event_bytes_) break;
  }
  if (start < bytes.size()) {
    line_.append(bytes.substr(start));
    after_cr_ = false;
  }
  if (event_bytes_ + line_.size() > max_event_bytes_) {
    error_ = Status(StatusCode::kOutOfRange, fmt::format("server-sent event over {} bytes", max_event_bytes_));
    return error_;
  }
  return Status::Ok();
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {  // dispatch
    if (has_data_) out->push_back(SseEvent{std::move(event_), std::move(data_), id_});
    event_.clear();
    data_.clear();
    has_data_ = false;
    event_bytes_ = 0;
    return;
  }
  if (line.front() == ':') return;  // a comment (keep-alive pings)
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon), value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_.assign(value);
  }
  // "retry" and unknown fields are ignored.
}

}  // namespace ladle::net
