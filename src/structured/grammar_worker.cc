// `ladle grammar-worker` (server side) and CompileRemote (client side) over HTTP/1.1: the
// protocol here, the transport in the net module (HttpServer, HttpClient).
#include "ladle/structured/grammar_worker.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>

#include "ladle/core/logging.h"
#include "ladle/json/json.h"
#include "ladle/net/http_server.h"

namespace ladle::structured {

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

CompileResult CompileRemote(net::HttpClient& client, const std::string& endpoint, const ConstraintSpec& spec,
                            std::shared_ptr<const grammar::TokenVocabulary> vocab, uint32_t timeout_ms) {
  auto ep = net::Endpoint::Parse(endpoint);
  if (!ep.ok()) return InvalidArgument("grammar worker '" + endpoint + "': expected host:port");
  net::CallOptions o;
  o.connect_timeout = std::chrono::milliseconds(timeout_ms);
  o.timeout = std::chrono::milliseconds(timeout_ms);
  auto res = client.Fetch(*ep, {"POST", "/v1/compile", {{"Content-Type", "application/json"}}, SpecToJson(spec)}, o);
  if (!res.ok()) {
    // Every transport failure is the worker's, so the compile falls back: kUnavailable unless
    // it was the deadline.
    const StatusCode code =
        res.status().code() == StatusCode::kDeadlineExceeded ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable;
    return Status(code, fmt::format("grammar worker {}", res.status().message()));
  }
  if (res->status != 200) return ErrorFromBody(res->status, res->body);
  return DecodeCompileResponse(res->body, std::move(vocab), endpoint);
}

CompileResult CompileRemote(const std::string& endpoint, const ConstraintSpec& spec,
                            std::shared_ptr<const grammar::TokenVocabulary> vocab, uint32_t timeout_ms) {
  auto client = net::HttpClient::Create();
  if (!client.ok()) return client.status();
  return CompileRemote(**client, endpoint, spec, std::move(vocab), timeout_ms);
}

// ---- Server ------------------------------------------------------------------------------

namespace {

class WorkerImpl : public GrammarWorker {
 public:
  WorkerImpl(GrammarWorkerOptions opts, tokenizer::Tokenizer base) : opts_(std::move(opts)), base_(std::move(base)) {}
  ~WorkerImpl() override { Stop(); }

  Status Bind() {
    net::HttpServerOptions so;
    so.host = opts_.host;
    so.port = opts_.port;
    so.io_threads = std::max(1, opts_.io_threads);
    so.server_name = "ladle-grammar-worker";
    so.max_body_bytes = 64u << 20;  // a spec is a schema or a grammar: large ones stay well under
    LADLE_ASSIGN_OR_RETURN(server_, net::HttpServer::Create(so, [this](net::HttpRequest req, net::HttpServer::Respond respond) {
                             Handle(std::move(req), std::move(respond));
                           }));
    return Status::Ok();
  }

  uint16_t port() const override { return server_->port(); }
  void Start() override { server_->Start(); }

  void Stop() override {
    if (stopped_.exchange(true) || !server_) return;
    server_->Stop();
    // Compiles in flight finish (their replies go nowhere: the server is stopped).
    std::lock_guard lock(mu_);
    services_.clear();
  }

  uint64_t compiles_served() const override { return served_.load(); }

 private:
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

  static net::HttpResponse Json(const Status& s) {
    return net::HttpResponse::WithBody(HttpStatusFor(s.code()), "application/json", ErrorBody(s));
  }

  void Handle(net::HttpRequest req, net::HttpServer::Respond respond) {
    if (req.method == "GET" && req.target == "/health") {
      respond(net::HttpResponse::WithBody(200, "application/json", R"({"status":"ok"})"));
      return;
    }
    if (req.method != "POST" || req.target != "/v1/compile") {
      respond(Json(NotFound("no route " + req.target)));
      return;
    }
    auto spec = SpecFromJson(req.body);
    if (!spec.ok()) {
      respond(Json(spec.status()));
      return;
    }
    auto svc = ServiceFor(spec->version);
    if (!svc.ok()) {
      respond(net::HttpResponse::WithBody(500, "application/json", ErrorBody(svc.status())));
      return;
    }
    // The compile runs on the service's threads; the server writes the answer on its own.
    (*svc)->GetAsync(*spec, [this, respond = std::move(respond)](const CompileResult& r) {
      if (!r.ok()) {
        respond(Json(r.status()));
        return;
      }
      served_.fetch_add(1);
      respond(net::HttpResponse::WithBody(200, "application/octet-stream", EncodeCompileResponse(**r)));
    });
  }

  GrammarWorkerOptions opts_;
  tokenizer::Tokenizer base_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> served_{0};
  std::mutex mu_;
  std::map<frontend::ModelVersion, std::unique_ptr<CompileService>> services_;
  // Last: destroyed first, after Stop() has cleared the services (and with them every
  // compile that could still answer through it).
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace

Result<std::unique_ptr<GrammarWorker>> GrammarWorker::Create(GrammarWorkerOptions opts, tokenizer::Tokenizer base) {
  auto w = std::make_unique<WorkerImpl>(std::move(opts), std::move(base));
  LADLE_RETURN_IF_ERROR(w->Bind());
  return std::unique_ptr<GrammarWorker>(std::move(w));
}

}  // namespace ladle::structured
