// `ladle grammar-worker` (server side) and CompileRemote (client side) over HTTP/1.1.
#include "ladle/structured/grammar_worker.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "ladle/core/logging.h"
#include "ladle/json/json.h"

namespace ladle::structured {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr std::string_view kMagic = "LGW1";

std::string ErrorBody(const Status& s) {
  json::Value::Object e;
  e.emplace_back("code", json::Value::Int(static_cast<int64_t>(s.code())));
  e.emplace_back("name", json::Value::String(std::string(StatusCodeName(s.code()))));
  e.emplace_back("message", json::Value::String(s.message()));
  json::Value::Object root;
  root.emplace_back("error", json::Value::MakeObject(std::move(e)));
  return json::Dump(json::Value::MakeObject(std::move(root)));
}

Status ErrorFromBody(int http_status, std::string_view body) {
  auto v = json::Parse(body);
  if (v.ok() && v->is_object()) {
    if (const json::Value* e = v->Find("error"); e && e->is_object()) {
      const json::Value* code = e->Find("code");
      const json::Value* msg = e->Find("message");
      if (code && code->is_number() && msg && msg->is_string()) {
        auto n = code->as_int64();
        if (n.ok() && *n > 0 && *n <= static_cast<int64_t>(StatusCode::kInternal)) {
          return Status(static_cast<StatusCode>(*n), msg->as_string());
        }
      }
    }
  }
  return Status(StatusCode::kUnavailable, fmt::format("grammar worker answered HTTP {} without an error body", http_status));
}

}  // namespace

std::string EncodeCompileResponse(const CompiledConstraint& c) {
  json::Value::Array approx;
  for (const auto& a : c.report.approximations) {
    json::Value::Object o;
    o.emplace_back("path", json::Value::String(a.path));
    o.emplace_back("what", json::Value::String(a.what));
    approx.push_back(json::Value::MakeObject(std::move(o)));
  }
  json::Value::Object report;
  report.emplace_back("compile_ms", json::Value::Double(c.compile_ms));
  report.emplace_back("approximations", json::Value::MakeArray(std::move(approx)));
  const std::string rj = json::Dump(json::Value::MakeObject(std::move(report)));
  std::string out(kMagic);
  const uint32_t n = static_cast<uint32_t>(rj.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += rj;
  out += c.grammar->Serialize();
  return out;
}

CompileResult DecodeCompileResponse(std::string_view body, std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                    const std::string& endpoint) {
  auto bad = [&](std::string_view why) {
    return Status(StatusCode::kUnavailable, fmt::format("grammar worker {}: malformed answer ({})", endpoint, why));
  };
  if (body.size() < 8 || body.substr(0, 4) != kMagic) return bad("no LGW1 header");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(body[4 + i])) << (8 * i);
  if (body.size() - 8 < n) return bad("report past the end");
  auto report = json::Parse(body.substr(8, n));
  if (!report.ok() || !report->is_object()) return bad("report is not a JSON object");
  auto out = std::make_shared<CompiledConstraint>();
  out->compiled_by = endpoint;
  if (const json::Value* ms = report->Find("compile_ms"); ms && ms->is_number()) out->compile_ms = ms->as_double();
  if (const json::Value* a = report->Find("approximations"); a && a->is_array()) {
    for (const auto& x : a->as_array()) {
      grammar::Approximation ap;
      if (const json::Value* p = x.Find("path"); p && p->is_string()) ap.path = p->as_string();
      if (const json::Value* w = x.Find("what"); w && w->is_string()) ap.what = w->as_string();
      out->report.approximations.push_back(std::move(ap));
    }
  }
  auto g = grammar::CompiledGrammar::Deserialize(body.substr(8 + n), std::move(vocab));
  // A fingerprint mismatch (the worker has another tokenizer) is the worker's fault, not the
  // request's: report it as unavailable so the compile falls back to this process.
  if (!g.ok()) return Status(StatusCode::kUnavailable, fmt::format("grammar worker {}: {}", endpoint, g.status().ToString()));
  out->grammar = std::move(g).value();
  return CompileResult(std::shared_ptr<const CompiledConstraint>(std::move(out)));
}

// ---- Client ------------------------------------------------------------------------------

CompileResult CompileRemote(const std::string& endpoint, const ConstraintSpec& spec,
                            std::shared_ptr<const grammar::TokenVocabulary> vocab, uint32_t timeout_ms) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("grammar worker '" + endpoint + "': expected host:port");
  const std::string host = endpoint.substr(0, colon), port = endpoint.substr(colon + 1);
  // Exceptions stay here: Beast's sync calls take error codes, but resolver/stream
  // construction can still throw on exotic failures.
  try {
    net::io_context ioc;
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, port, ec);
    if (ec) return Status(StatusCode::kUnavailable, fmt::format("grammar worker {}: resolve: {}", endpoint, ec.message()));
    beast::tcp_stream stream(ioc);
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    // The stream's timeouts apply to async operations only, so run each step async and
    // bounded by the io_context.
    std::string body = SpecToJson(spec);
    http::request<http::string_body> req(http::verb::post, "/v1/compile", 11);
    req.set(http::field::host, host);
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    http::response<http::string_body> res;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 30);
    beast::flat_buffer buffer;
    beast::error_code step_ec;
    std::string_view step = "connect";
    stream.expires_after(timeout);
    stream.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) {
      if (e) {
        step_ec = e;
        return;
      }
      step = "write";
      http::async_write(stream, req, [&](beast::error_code e2, size_t) {
        if (e2) {
          step_ec = e2;
          return;
        }
        step = "read";
        http::async_read(stream, buffer, parser, [&](beast::error_code e3, size_t) { step_ec = e3; });
      });
    });
    ioc.run();
    if (step_ec) {
      return Status(StatusCode::kUnavailable, fmt::format("grammar worker {}: {}: {}", endpoint, step, step_ec.message()));
    }
    res = parser.release();
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    const int status = static_cast<int>(res.result_int());
    if (status != 200) return ErrorFromBody(status, res.body());
    return DecodeCompileResponse(res.body(), std::move(vocab), endpoint);
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, fmt::format("grammar worker {}: {}", endpoint, e.what()));
  }
}

// ---- Server ------------------------------------------------------------------------------

namespace {

class WorkerImpl;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(WorkerImpl& w, tcp::socket socket) : worker_(w), stream_(std::move(socket)) {}
  void Start() { Read(); }

 private:
  void Read();
  void OnRead(beast::error_code ec);
  void Reply(http::status status, std::string_view type, std::string body, bool keep_alive);

  WorkerImpl& worker_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
};

class WorkerImpl : public GrammarWorker {
 public:
  WorkerImpl(GrammarWorkerOptions opts, tokenizer::Tokenizer base)
      : opts_(std::move(opts)), base_(std::move(base)), acceptor_(ioc_) {}
  ~WorkerImpl() override { Stop(); }

  Status Bind() {
    beast::error_code ec;
    auto address = net::ip::make_address(opts_.host, ec);
    if (ec) return InvalidArgument("bad --host " + opts_.host + ": " + ec.message());
    tcp::endpoint ep(address, opts_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return Status(StatusCode::kUnavailable, fmt::format("cannot listen on {}:{}: {}", opts_.host, opts_.port, ec.message()));
    port_ = acceptor_.local_endpoint().port();
    return Status::Ok();
  }

  uint16_t port() const override { return port_; }

  void Start() override {
    Accept();
    for (int i = 0; i < std::max(1, opts_.io_threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    net::post(ioc_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    ioc_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // Compiles in flight finish (their replies go nowhere: the io context is stopped).
    std::lock_guard lock(mu_);
    services_.clear();
  }

  uint64_t compiles_served() const override { return served_.load(); }

  // The service for a version, built on first use.
  Result<CompileService*> ServiceFor(frontend::ModelVersion v) {
    std::lock_guard lock(mu_);
    auto it = services_.find(v);
    if (it != services_.end()) return it->second.get();
    LADLE_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, frontend::TokenizerForVersion(base_, v));
    LADLE_ASSIGN_OR_RETURN(auto vocab, VocabularyFor(tok, v));
    CompileServiceOptions so = opts_.service;
    so.workers.clear();
    LADLE_ASSIGN_OR_RETURN(auto svc, CompileService::Create(std::move(vocab), so));
    CompileService* raw = svc.get();
    services_.emplace(v, std::move(svc));
    return raw;
  }

  void CountServed() { served_.fetch_add(1); }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (!acceptor_.is_open()) return;
      } else {
        std::make_shared<Connection>(*this, std::move(socket))->Start();
      }
      Accept();
    });
  }

  GrammarWorkerOptions opts_;
  tokenizer::Tokenizer base_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> served_{0};
  std::mutex mu_;
  std::map<frontend::ModelVersion, std::unique_ptr<CompileService>> services_;
};

void Connection::Read() {
  req_ = {};
  stream_.expires_after(std::chrono::seconds(120));
  http::async_read(stream_, buffer_, req_, [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void Connection::OnRead(beast::error_code ec) {
  if (ec) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    return;
  }
  const bool keep_alive = req_.keep_alive();
  const std::string_view target = req_.target();
  if (req_.method() == http::verb::get && target == "/health") {
    Reply(http::status::ok, "application/json", R"({"status":"ok"})", keep_alive);
    return;
  }
  if (req_.method() != http::verb::post || target != "/v1/compile") {
    Reply(http::status::not_found, "application/json", ErrorBody(NotFound("no route " + std::string(target))), keep_alive);
    return;
  }
  auto spec = SpecFromJson(req_.body());
  if (!spec.ok()) {
    Reply(static_cast<http::status>(HttpStatusFor(spec.status().code())), "application/json", ErrorBody(spec.status()),
          keep_alive);
    return;
  }
  auto svc = worker_.ServiceFor(spec->version);
  if (!svc.ok()) {
    Reply(http::status::internal_server_error, "application/json", ErrorBody(svc.status()), keep_alive);
    return;
  }
  // The compile runs on the service's threads; the reply goes back through the strand.
  (*svc)->GetAsync(*spec, [self = shared_from_this(), keep_alive](const CompileResult& r) {
    std::string body;
    http::status status = http::status::ok;
    std::string_view type = "application/octet-stream";
    if (r.ok()) {
      body = EncodeCompileResponse(**r);
      self->worker_.CountServed();
    } else {
      status = static_cast<http::status>(HttpStatusFor(r.status().code()));
      type = "application/json";
      body = ErrorBody(r.status());
    }
    net::dispatch(self->stream_.get_executor(), [self, status, type, body = std::move(body), keep_alive]() mutable {
      self->Reply(status, type, std::move(body), keep_alive);
    });
  });
}

void Connection::Reply(http::status status, std::string_view type, std::string body, bool keep_alive) {
  auto res = std::make_shared<http::response<http::string_body>>(status, 11);
  res->set(http::field::server, "ladle-grammar-worker");
  res->set(http::field::content_type, type);
  res->keep_alive(keep_alive);
  res->body() = std::move(body);
  res->prepare_payload();
  http::async_write(stream_, *res, [self = shared_from_this(), res, keep_alive](beast::error_code ec, size_t) {
    if (ec || !keep_alive) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return;
    }
    self->Read();
  });
}

}  // namespace

Result<std::unique_ptr<GrammarWorker>> GrammarWorker::Create(GrammarWorkerOptions opts, tokenizer::Tokenizer base) {
  auto w = std::make_unique<WorkerImpl>(std::move(opts), std::move(base));
  LADLE_RETURN_IF_ERROR(w->Bind());
  return std::unique_ptr<GrammarWorker>(std::move(w));
}

}  // namespace ladle::structured
