// HTTP/1.0 clients on a raw socket: no chunked encoding ever reaches them. A plain response
// carries Content-Length; a stream is close-delimited (the server closes after the last frame).
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <string>

#include "server_fixture.h"

namespace ladle::server::testing {
namespace {

class Http10Test : public ServerFixture {
 protected:
  void SetUp() override { LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath()); }
};

struct RawReply {
  std::string status_line;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool closed_by_server = false;
};

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits one response off the front of `raw` (head + Content-Length body, or everything when
// there is no Content-Length); returns false when `raw` does not hold a complete head.
bool TakeResponse(std::string* raw, RawReply* r) {
  const size_t head_end = raw->find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  const std::string head = raw->substr(0, head_end);
  size_t pos = head.find("\r\n");
  r->status_line = head.substr(0, pos);
  while (pos != std::string::npos && pos < head.size()) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r->headers[Lower(line.substr(0, colon))] = value;
    }
    pos = next;
  }
  size_t body_len = raw->size() - head_end - 4;
  if (auto it = r->headers.find("content-length"); it != r->headers.end()) body_len = std::stoul(it->second);
  r->body = raw->substr(head_end + 4, body_len);
  raw->erase(0, head_end + 4 + body_len);
  return true;
}

std::string Request10(const std::string& target, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Writes `requests` on one connection and reads `responses` replies; then, with
// `expect_close`, reads on until the server closes (closed_by_server on the last reply).
std::vector<RawReply> Exchange(uint16_t port, const std::string& requests, size_t responses, bool expect_close) {
  net::io_context ioc;
  net::ip::tcp::socket sock(ioc);
  sock.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  // A guard against hanging the test binary when the server never closes; not a timing check.
  timeval tv{30, 0};
  setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  net::write(sock, net::buffer(requests));
  std::string raw;
  std::vector<RawReply> out;
  bool eof = false;
  auto read_more = [&] {
    char buf[4096];
    const ssize_t n = ::recv(sock.native_handle(), buf, sizeof buf, 0);
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      eof = true;
    } else {
      ADD_FAILURE() << "read failed or timed out (errno " << errno << ")";
      return false;
    }
    return true;
  };
  while (out.size() < responses) {
    RawReply r;
    std::string copy = raw;
    // A reply without Content-Length is only complete at EOF.
    if (TakeResponse(&copy, &r) && (r.headers.count("content-length") || eof)) {
      out.push_back(r);
      raw = copy;
      continue;
    }
    if (eof || !read_more()) return out;
  }
  if (expect_close) {
    while (!eof && read_more()) {
    }
    EXPECT_TRUE(raw.empty()) << "bytes after the last reply: " << raw;
    if (!out.empty()) out.back().closed_by_server = eof;
  }
  return out;
}

TEST_F(Http10Test, NonStreamingGetsContentLengthAndCloses) {
  StartServer();
  auto replies = Exchange(port_, Request10("/v1/chat/completions", ChatBody(false, 5)), 1, true);
  ASSERT_EQ(replies.size(), 1u);
  const RawReply& r = replies[0];
  EXPECT_EQ(r.status_line, "HTTP/1.0 200 OK");
  EXPECT_EQ(r.headers.count("transfer-encoding"), 0u);
  ASSERT_EQ(r.headers.count("content-length"), 1u);
  EXPECT_EQ(std::stoul(r.headers.at("content-length")), r.body.size());
  json::Value c = ParseJson(r.body);
  EXPECT_EQ(*c.Find("usage")->Find("completion_tokens")->as_int64(), 5);
  EXPECT_TRUE(r.closed_by_server);  // HTTP/1.0 without keep-alive: one request per connection
}

TEST_F(Http10Test, KeepAliveIsHonouredForPlainResponses) {
  StartServer();
  const std::string req = Request10("/v1/messages", MessagesBody(false, 3), "Connection: keep-alive\r\n");
  auto replies = Exchange(port_, req + req, 2, false);
  ASSERT_EQ(replies.size(), 2u);
  for (const auto& r : replies) {
    EXPECT_EQ(r.status_line, "HTTP/1.0 200 OK");
    EXPECT_EQ(Lower(r.headers.at("connection")), "keep-alive");
    EXPECT_EQ(r.headers.count("transfer-encoding"), 0u);
    EXPECT_EQ(ParseJson(r.body).Find("stop_reason")->as_string(), "max_tokens");
  }
}

TEST_F(Http10Test, StreamingIsCloseDelimitedForEachApi) {
  StartServer();
  struct Case {
    const char* target;
    std::string body;
    const char* last;  // text the final frame contains
  };
  const Case cases[] = {
      {"/v1/chat/completions", ChatBody(true, 6), "data: [DONE]\n\n"},
      {"/v1/responses", ResponsesBody(true, 4), "event: response.incomplete\n"},
      {"/v1/messages", MessagesBody(true, 3), "event: message_stop\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.target);
    // Asking for keep-alive does not help: without chunks the close is the end of the body.
    auto replies = Exchange(port_, Request10(c.target, c.body, "Connection: keep-alive\r\n"), 1, true);
    ASSERT_EQ(replies.size(), 1u);
    const RawReply& r = replies[0];
    EXPECT_EQ(r.status_line, "HTTP/1.0 200 OK");
    EXPECT_EQ(r.headers.at("content-type"), "text/event-stream");
    EXPECT_EQ(r.headers.count("transfer-encoding"), 0u);
    EXPECT_EQ(r.headers.count("content-length"), 0u);
    EXPECT_EQ(Lower(r.headers.at("connection")), "close");
    EXPECT_TRUE(r.closed_by_server);
    // Raw SSE, no chunk-size lines: the body starts with a frame and ends with the last one.
    EXPECT_TRUE(r.body.rfind("data: ", 0) == 0 || r.body.rfind("event: ", 0) == 0) << r.body.substr(0, 80);
    EXPECT_NE(r.body.find(c.last), std::string::npos) << r.body;
    EXPECT_EQ(r.body.substr(r.body.size() - 2), "\n\n");
    EXPECT_EQ(r.body.find("\r\n"), std::string::npos);
  }
}

TEST_F(Http10Test, ErrorsUseHttp10Too) {
  StartServer();
  auto replies = Exchange(port_, Request10("/v1/chat/completions", R"({"model":"ladle","messages":5})"), 1, true);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].status_line, "HTTP/1.0 400 Bad Request");
  EXPECT_EQ(std::stoul(replies[0].headers.at("content-length")), replies[0].body.size());
  EXPECT_TRUE(ParseJson(replies[0].body).Find("error"));
}

}  // namespace
}  // namespace ladle::server::testing
