// A connection: HTTP/1.1 reads, routing, simple responses, and the generation path (submit,
// engine outputs → strand → Generation → socket; disconnect → cancel).
#include "session.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>
#include <random>

#include "api_errors.h"
#include "image_stage.h"
#include "ladle/core/logging.h"
#include "ladle/frontend/encoder.h"
#include "ladle/json/json.h"
#include "ladle/net/sse.h"
#include "server_impl.h"

namespace ladle::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
using frontend::Api;

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(120);
// How long a connection whose body we refused is read and discarded after the answer: long
// enough for a client to finish a few hundred MiB on a slow link, bounded so a client that
// keeps sending cannot hold the connection.
constexpr auto kLingerTime = std::chrono::seconds(30);
// Each read of the lingering drain waits at most this long for more bytes.
constexpr auto kLingerIdle = std::chrono::seconds(5);

// Client-influenced text (error messages name fields and models) JSON-escaped, so a log line
// stays one valid line in --log-format json: the logger does not escape messages itself.
std::string LogSafe(std::string_view s) {
  std::string out;
  json::AppendEscaped(s, &out);
  return out;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The client's x-request-id when it is short and plain, else a fresh one.
std::string RequestIdFor(std::string_view given) {
  bool ok = !given.empty() && given.size() <= 64;
  for (char c : given) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  if (ok) return std::string(given);
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("req_{:016x}", rng());
}

std::string_view ApiLabel(Api api) {
  switch (api) {
    case Api::kChat: return "chat";
    case Api::kResponses: return "responses";
    case Api::kMessages: return "messages";
  }
  return "other";
}

engine::SamplingParams SamplingFor(const frontend::Request& r, int default_max_tokens) {
  engine::SamplingParams p;
  const auto& s = r.sampling;
  if (s.temperature) p.temperature = static_cast<float>(*s.temperature);
  if (s.top_p) p.top_p = static_cast<float>(*s.top_p);
  if (s.top_k) p.top_k = static_cast<int>(*s.top_k);
  if (s.min_p) p.min_p = static_cast<float>(*s.min_p);
  if (s.seed) p.seed = static_cast<uint64_t>(*s.seed);
  if (s.presence_penalty) p.presence_penalty = static_cast<float>(*s.presence_penalty);
  if (s.frequency_penalty) p.frequency_penalty = static_cast<float>(*s.frequency_penalty);
  p.max_tokens = s.max_tokens ? static_cast<int>(*s.max_tokens) : default_max_tokens;
  p.stop = s.stop;
  p.stop_token_ids.assign(s.stop_token_ids.begin(), s.stop_token_ids.end());
  p.n = r.api == Api::kChat ? std::max(1, s.n) : 1;
  if (s.logprobs) p.top_logprobs = s.top_logprobs;
  return p;
}

}  // namespace

Session::Session(ServerImpl& server, asio::ip::tcp::socket socket) : server_(server), stream_(std::move(socket)) {}

void Session::Start() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
}

void Session::DoRead() {
  parser_.emplace();
  parser_->body_limit(server_.config().limits.max_body_bytes);
  stream_.expires_after(kIdleTimeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void Session::OnHeader(beast::error_code ec) {
  if (ec) {
    OnRead(ec);
    return;
  }
  auto read_body = [self = shared_from_this()] {
    http::async_read(self->stream_, self->buffer_, *self->parser_,
                     [self](beast::error_code ec, size_t) { self->OnRead(ec); });
  };
  // curl sends `Expect: 100-continue` for bodies over 1 KiB and waits a second for this.
  if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(stream_, asio::buffer(kContinue), [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
      if (ec) {
        self->Close();
        return;
      }
      read_body();
    });
    return;
  }
  read_body();
}

void Session::Close() {
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  stream_.close();
}

void Session::LingerThenClose() {
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (ec) {
    stream_.close();
    return;
  }
  buffer_.clear();
  LingerRead(std::make_shared<std::vector<char>>(64 * 1024), Clock::now() + kLingerTime);
}

void Session::LingerRead(std::shared_ptr<std::vector<char>> sink, Clock::time_point until) {
  const auto now = Clock::now();
  if (now >= until) {
    stream_.close();
    return;
  }
  stream_.expires_after(std::min<Clock::duration>(kLingerIdle, until - now));
  stream_.async_read_some(asio::buffer(*sink), [self = shared_from_this(), sink, until](beast::error_code ec, size_t) {
    if (ec) {  // EOF: the client read our answer and closed; or timeout, or reset
      self->stream_.close();
      return;
    }
    self->LingerRead(sink, until);
  });
}

void Session::OnRead(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    version_ = parser_->get().version() == 10 ? 10 : 11;
    const std::string target(parser_->get().target());
    const Api api = ApiForPath(target.substr(0, target.find('?')));
    // The body is not parsed any further, so the connection closes after this (lingering).
    auto e = ErrorFor(api, Status(StatusCode::kPayloadTooLarge,
                                  fmt::format("request body exceeds {} bytes", server_.config().limits.max_body_bytes)),
                      api == Api::kMessages ? "" : "request_too_large");
    linger_ = true;
    RespondError(api, e, RequestIdFor(""), /*keep_alive=*/false);
    return;
  }
  if (ec) {
    // end_of_stream, timeout or reset: the client is gone or idle; nothing to answer.
    Close();
    return;
  }
  Handle(parser_->release());
}

void Session::Handle(Request req) {
  const auto start = Clock::now();
  version_ = req.version() == 10 ? 10 : 11;
  const std::string rid = RequestIdFor(req["x-request-id"]);
  const bool keep_alive = req.keep_alive() && !server_.draining();
  std::string path(req.target());
  path = path.substr(0, path.find('?'));
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;

  if (path == "/v1/chat/completions" || path == "/v1/responses" || path == "/v1/messages") {
    const Api api = ApiForPath(path);
    if (!post) {
      RespondError(api, ErrorFor(api, InvalidArgument("use POST for " + path)), rid, keep_alive);
      return;
    }
    StartGeneration(api, req, rid, start);
    return;
  }
  if (path == "/health" && get) {
    Respond(200, "application/json", R"({"status":"ok"})", rid, keep_alive, "other");
  } else if (path == "/ready" && get) {
    if (server_.draining()) {
      Respond(HttpStatusFor(StatusCode::kUnavailable), "application/json", R"({"status":"draining"})", rid, false,
              "other");
    } else {
      Respond(200, "application/json", R"({"status":"ready"})", rid, keep_alive, "other");
    }
  } else if (path == "/metrics" && get) {
    std::string text = server_.metrics().Render(server_.engine().GetStats());
    if (server_.grammar()) server_.grammar()->AppendMetrics(&text);
    if (server_.images()) AppendVisionMetrics(*server_.images(), &text);
    Respond(200, "text/plain; version=0.0.4; charset=utf-8", std::move(text), rid, keep_alive, "other");
  } else if ((path == "/v1/models" || path.starts_with("/v1/models/")) && get) {
    HandleModels(req, path, rid, keep_alive);
  } else if (path == "/v1/messages/count_tokens" && post) {
    HandleCountTokens(req, rid, keep_alive);
  } else {
    RespondError(Api::kChat, ErrorFor(Api::kChat, NotFound("no route for " + std::string(req.method_string()) + " " + path)),
                 rid, keep_alive);
  }
}

void Session::Respond(int status, std::string_view content_type, std::string body, const std::string& rid,
                      bool keep_alive, std::string_view api_label, int retry_after, bool grammar_forced,
                      std::string_view dropped_tools) {
  auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), version_);
  res->set(http::field::server, "ladle");
  res->set(http::field::content_type, content_type);
  res->set("x-request-id", rid);
  if (retry_after > 0) res->set(http::field::retry_after, std::to_string(retry_after));
  if (grammar_forced) res->set("x-ladle-grammar-forced", "true");
  if (!dropped_tools.empty()) res->set("x-ladle-dropped-tools", dropped_tools);
  res->keep_alive(keep_alive);
  res->body() = std::move(body);
  res->prepare_payload();
  server_.metrics().CountRequest(api_label, status);
  stream_.expires_after(kIdleTimeout);
  http::async_write(stream_, *res, [self = shared_from_this(), res, keep_alive](beast::error_code ec, size_t) {
    if (!ec && self->linger_) {
      self->LingerThenClose();
      return;
    }
    if (ec || !keep_alive) {
      self->Close();
      return;
    }
    self->DoRead();
  });
}

void Session::RespondError(Api api, const frontend::ApiError& e, const std::string& rid, bool keep_alive,
                           int retry_after) {
  LADLE_LOG_INFO("request.rejected rid={} api={} status={} type={} message='{}'", rid, ApiLabel(api), e.http_status(),
                 e.type, LogSafe(e.message));
  Respond(e.http_status(), "application/json", frontend::ErrorJson(api, e), rid, keep_alive, ApiLabel(api), retry_after);
}

void Session::StartGeneration(Api api, Request& req, const std::string& rid, Clock::time_point start) {
  const auto& cfg = server_.config();
  const bool keep_alive = req.keep_alive() && !server_.draining();
  // Authentication comes first: an unauthenticated client learns nothing about the body.
  const std::string_view x_api_key = req["x-api-key"];
  if (!cfg.keys.Allows(req[http::field::authorization], x_api_key)) {
    RespondError(api, Unauthorized(api), rid, keep_alive);
    return;
  }
  if (server_.draining()) {
    RespondError(api, ErrorFor(api, Status(StatusCode::kUnavailable, "the server is shutting down")), rid, false);
    return;
  }
  // Responses: resolve item_reference / previous_response_id from the response store first, so
  // the adapter sees a self-contained request.
  const uint64_t owner = std::hash<std::string_view>{}(x_api_key.empty() ? req[http::field::authorization] : x_api_key);
  std::optional<ResponseStore::Resolved> resolved;
  if (api == Api::kResponses && server_.responses().enabled()) {
    auto r = server_.responses().Resolve(req.body(), owner, WallMs(), cfg.limits);
    if (auto* e = std::get_if<frontend::ApiError>(&r)) {
      RespondError(api, *e, rid, keep_alive);
      return;
    }
    resolved = std::move(std::get<ResponseStore::Resolved>(r));
  }
  frontend::Adapted adapted = frontend::Adapt(api, resolved ? std::string_view(resolved->body) : req.body(), cfg.limits);
  if (!adapted.ok()) {
    RespondError(api, adapted.error, rid, keep_alive);
    return;
  }
  // What the rest needs of the HTTP request: it is gone once an image stage goes async.
  auto p = std::make_shared<Pending>();
  p->api = api;
  p->rid = rid;
  p->start = start;
  p->keep_alive = keep_alive;
  p->owner = owner;
  p->resolved = std::move(resolved);
  p->request = std::move(*adapted.request);
  p->traffic = std::string(req["x-ladle-traffic-class"]);
  p->grammar_budget = std::string(req["x-ladle-grammar-budget"]);
  // Images go through the image stage (fetch, decode, resize, encode) off this strand; a
  // request without images goes straight on. A version without an image token refuses them
  // when rendering, so nothing is fetched for it.
  std::vector<vision::ImageRef> refs = ImageRefs(api, &p->request);
  if (refs.empty() || !frontend::SpecialTokensFor(cfg.version).image) {
    ContinueGeneration(std::move(p), std::vector<vision::PreparedImage>{});
    return;
  }
  if (server_.images() == nullptr) {
    RespondError(api, ErrorFor(api, Status(StatusCode::kUnsupported, fmt::format("{}: this server takes no images (it has no vision encoder; a "
                                                                                "cluster entrypoint does not pass images to its engines yet)", refs[0].where))),
                 rid, keep_alive);
    return;
  }
  server_.images()->Prepare(std::move(refs), [self = shared_from_this(), p](Result<std::vector<vision::PreparedImage>> r) {
    asio::post(self->stream_.get_executor(),
               [self, p, r = std::move(r)]() mutable { self->ContinueGeneration(std::move(p), std::move(r)); });
  });
}

void Session::ContinueGeneration(std::shared_ptr<Pending> p, Result<std::vector<vision::PreparedImage>> images) {
  const auto& cfg = server_.config();
  const Api api = p->api;
  const std::string& rid = p->rid;
  const bool keep_alive = p->keep_alive && !server_.draining();
  const Clock::time_point start = p->start;
  const uint64_t owner = p->owner;
  std::optional<ResponseStore::Resolved>& resolved = p->resolved;
  if (!images.ok()) {
    RespondError(api, ErrorFor(api, images.status()), rid, keep_alive);
    return;
  }
  frontend::Request& request = p->request;
  SetPlaceholders(*images, &request);
  auto encoded = EncodeOrRespond(api, request, rid, keep_alive);
  if (!encoded) return;
  if (!server_.TryAdmit()) {
    RespondError(api, Overloaded(api), rid, keep_alive, cfg.retry_after_s);
    return;
  }
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  frontend::ResponseMeta meta = frontend::MakeResponseMeta(request, now_s);
  meta.echo.store = resolved.has_value() && resolved->store;
  engine::SamplingParams sampling = SamplingFor(request, cfg.default_max_tokens);
  if (cfg.max_tokens_cap > 0) sampling.max_tokens = std::min(sampling.max_tokens, cfg.max_tokens_cap);
  if (auto overflow = CheckContext(request, encoded->ids.size(), &sampling)) {
    server_.Release();
    RespondError(api, *overflow, rid, keep_alive);
    return;
  }
  auto gen = Generation::Create(cfg.version, server_.tokenizer(), encoded->ends_in_thinking, meta, sampling.stop,
                                static_cast<int64_t>(encoded->ids.size()));
  if (!gen.ok()) {
    server_.Release();
    RespondError(api, ErrorFor(api, gen.status()), rid, keep_alive);
    return;
  }
  // The KV store's traffic class (TTL) of this request's blocks: the x-ladle-traffic-class
  // header, else metadata.ladle_traffic_class, else chatbot.
  std::string traffic = p->traffic;
  const char* traffic_from = "header x-ladle-traffic-class";
  if (traffic.empty() && request.metadata.is_object()) {
    if (const json::Value* t = request.metadata.Find("ladle_traffic_class"); t != nullptr && t->is_string()) {
      traffic = t->as_string();
      traffic_from = "metadata.ladle_traffic_class";
    }
  }
  if (!traffic.empty() && traffic != "agent" && traffic != "chatbot") {
    server_.Release();
    RespondError(api, ErrorFor(api, InvalidArgument(fmt::format("{}: unknown traffic class '{}' (use agent or chatbot)",
                                                                traffic_from, LogSafe(traffic)))),
                 rid, keep_alive);
    return;
  }
  Launch l;
  l.agent_traffic = traffic == "agent";
  l.api = api;
  l.stream = request.stream;
  l.keep_alive = keep_alive;
  l.rid = rid;
  l.start = start;
  l.gen = std::move(gen).value();
  l.images = EngineImages(*encoded, *images);
  l.prompt = std::move(encoded->ids);
  l.sampling = std::move(sampling);
  if (resolved && resolved->store) {
    l.store = true;
    l.owner = owner;
    l.response_id = meta.id;
    l.store_input = std::move(resolved->input);
  }
  for (const auto& t : request.dropped_tools) {
    if (!l.dropped_tools.empty()) l.dropped_tools += ", ";
    l.dropped_tools += t;
  }
  if (!l.dropped_tools.empty()) {
    LADLE_LOG_INFO("request.tools_dropped rid={} tools='{}' reason=hosted_tool_not_available", rid,
                   LogSafe(l.dropped_tools));
  }
  // Structured output: the compiled grammar is fetched before the request enters the engine;
  // the compile service answers on its own thread, so continue on the strand.
  auto launch = std::make_shared<Launch>(std::move(l));
  const bool constrained = PrepareConstraint(
      server_, request, encoded->ends_in_thinking, launch->sampling, p->grammar_budget,
      [self = shared_from_this(), launch](ConstraintOutcome o) {
        asio::post(self->stream_.get_executor(), [self, launch, o = std::move(o)]() mutable {
          self->SubmitGeneration(std::move(*launch), std::move(o));
        });
      });
  if (!constrained) SubmitGeneration(std::move(*launch), {});
}

void Session::SubmitGeneration(Launch l, ConstraintOutcome constraint) {
  const auto& cfg = server_.config();
  const Api api = l.api;
  const std::string rid = l.rid;
  const bool keep_alive = l.keep_alive;
  if (constraint.error) {
    server_.Release();
    RespondError(api, *constraint.error, rid, keep_alive);
    return;
  }
  Active a;
  a.api = api;
  a.stream = l.stream;
  // HTTP/1.0 has no chunked encoding: a stream's end is the connection's end.
  a.chunked = version_ == 11;
  a.keep_alive = keep_alive && (a.chunked || !a.stream);
  a.rid = rid;
  a.gen = std::move(l.gen);
  a.queue = std::make_shared<OutputQueue>();
  a.start = l.start;
  a.mask = constraint.mask;
  a.store = l.store;
  a.owner = l.owner;
  a.response_id = std::move(l.response_id);
  a.store_input = std::move(l.store_input);
  // Header values must be plain: tool names are [A-Za-z0-9_-] by the adapters' checks, but a
  // hosted tool's type is the client's text, so anything else becomes '?'.
  for (char c : l.dropped_tools) a.dropped_tools += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ',' || c == ' ' || c == '.') ? c : '?';
  active_.emplace(std::move(a));

  engine::SubmitRequest submit;
  submit.prompt = std::move(l.prompt);
  submit.sampling = std::move(l.sampling);
  submit.mask = std::move(constraint.mask);
  submit.agent_traffic = l.agent_traffic;
  submit.images = std::move(l.images);
  // The sink runs on the engine thread: queue the output and wake the strand once per batch.
  auto sink = [self = shared_from_this(), queue = active_->queue](const engine::Output& out) {
    bool post = false;
    {
      std::lock_guard lock(queue->mu);
      queue->items.emplace_back(out, Clock::now());
      post = !queue->scheduled;
      queue->scheduled = true;
    }
    if (post) asio::post(self->stream_.get_executor(), [self] { self->DrainOutputs(); });
  };
  auto id = server_.engine().Submit(std::move(submit), std::move(sink));
  if (!id.ok()) {
    active_.reset();
    server_.Release();
    // Full (429/529), or no engine of a needed role alive behind an entrypoint (503): both pass.
    const int retry = id.status().code() == StatusCode::kResourceExhausted || id.status().code() == StatusCode::kUnavailable
                          ? cfg.retry_after_s
                          : 0;
    RespondError(api, ErrorFor(api, id.status()), rid, keep_alive, retry);
    return;
  }
  active_->id = *id;
  server_.Track(*id, shared_from_this());
  // A stream's head goes out now, before prefill ends: clients' first-byte watchdogs time the
  // headers, and a long prompt's prefill can outlast them.
  if (active_->stream) FlushStream();
  LADLE_LOG_DEBUG("request.submitted rid={} api={} engine_id={} prompt_tokens={} stream={}", rid, ApiLabel(api), *id,
                  active_->gen->usage().prompt_tokens, active_->stream);
  // Watch for the client going away while the engine works (no read is pending meanwhile).
  stream_.expires_never();
  stream_.socket().async_wait(asio::ip::tcp::socket::wait_read,
                              [self = shared_from_this()](beast::error_code ec) { self->OnPeerReadable(ec); });
}

void Session::OnPeerReadable(beast::error_code ec) {
  if (ec || !active_ || active_->gen->done()) return;
  char c;
  const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return;  // a pipelined request: it waits in the socket for the next read
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    stream_.socket().async_wait(asio::ip::tcp::socket::wait_read,
                                [self = shared_from_this()](beast::error_code ec) { self->OnPeerReadable(ec); });
    return;
  }
  // EOF or reset: the client is gone; free its KV now rather than at max_tokens.
  active_->peer_gone = true;
  CancelGeneration();
}

void Session::CancelGeneration() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    auto& a = self->active_;
    if (!a || a->cancel_sent || a->gen->done()) return;
    a->cancel_sent = true;
    LADLE_LOG_INFO("request.cancel rid={} engine_id={} peer_gone={}", a->rid, a->id, a->peer_gone);
    self->server_.engine().Cancel(a->id);
  });
}

void Session::DrainOutputs() {
  if (!active_) return;
  Active& a = *active_;
  std::vector<std::pair<engine::Output, Clock::time_point>> items;
  {
    std::lock_guard lock(a.queue->mu);
    items.swap(a.queue->items);
    a.queue->scheduled = false;
  }
  for (auto& [out, at] : items) {
    if (!out.tokens.empty()) {
      if (!a.got_token) {
        a.got_token = true;
        a.first_token = at;
        server_.metrics().ObserveTtft(Seconds(at - a.start));
      } else {
        const double gap = Seconds(at - a.last_token) / static_cast<double>(out.tokens.size());
        for (size_t i = 0; i < out.tokens.size(); ++i) server_.metrics().ObserveInterToken(gap);
      }
      a.last_token = at;
    }
    // The mask provider has seen every token of this output already (it runs at sampling).
    if (out.finished && a.mask && a.mask->forced()) a.gen->MarkGrammarForced();
    a.gen->Consume(out, &a.pending);
  }
  if (a.stream) {
    FlushStream();
  } else if (a.gen->done()) {
    FinishGeneration();
  }
}

void Session::FlushStream() {
  Active& a = *active_;
  if (a.writing) return;
  if (a.peer_gone) {
    if (a.gen->done()) FinishGeneration();
    return;
  }
  a.out.clear();
  if (a.store && a.completed.empty()) {
    // The stream's last event carries the whole response: keep its JSON for the store.
    // (response.incomplete when max_output_tokens ended it: its items are just as referable.)
    size_t at = std::string::npos, start = 0;
    for (std::string_view ev : {"event: response.completed\ndata: ", "event: response.incomplete\ndata: "}) {
      at = a.pending.find(ev);
      if (at != std::string::npos) {
        start = at + ev.size();
        break;
      }
    }
    if (at != std::string::npos) {
      const size_t end = a.pending.find('\n', start);
      a.completed = a.pending.substr(start, end == std::string::npos ? std::string::npos : end - start);
      // Stored before these bytes go out: a client may send its next request, referring to
      // this response, the moment it reads them.
      StoreResponse(a, a.completed);
      a.store = false;
    }
  }
  if (!a.head_sent) {
    a.head_sent = true;
    net::SseHeadOptions head;
    head.http11 = a.chunked;
    head.keep_alive = a.keep_alive;
    head.headers.emplace_back("x-request-id", a.rid);
    if (!a.dropped_tools.empty()) head.headers.emplace_back("x-ladle-dropped-tools", a.dropped_tools);
    a.out = net::SseResponseHead(head);
  }
  if (!a.chunked) {
    a.out += a.pending;
    a.pending.clear();
    a.tail_sent = a.gen->done();  // nothing to send: FinishGeneration closes the connection
  } else {
    net::AppendChunk(a.pending, &a.out);
    a.pending.clear();
  }
  if (a.gen->done() && !a.tail_sent) {
    a.tail_sent = true;
    a.out += net::kLastChunk;
  }
  if (a.out.empty()) {
    if (a.tail_sent) FinishGeneration();
    return;
  }
  a.writing = true;
  stream_.expires_after(kIdleTimeout);  // a client that stops reading must not pin the request
  asio::async_write(stream_, asio::buffer(a.out),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnStreamWrite(ec); });
}

void Session::OnStreamWrite(beast::error_code ec) {
  Active& a = *active_;
  a.writing = false;
  if (ec) {
    a.peer_gone = true;
    CancelGeneration();
    if (a.gen->done()) FinishGeneration();
    return;
  }
  FlushStream();
}

void Session::StoreResponse(const Active& a, std::string_view response_json) {
  auto doc = json::Parse(response_json);
  if (!doc.ok() || !doc->is_object()) return;
  // A streamed completed event wraps the response: {"type":"response.completed","response":{...}}.
  const json::Value* resp = doc->Find("response");
  if (resp == nullptr) resp = &*doc;
  const json::Value* output = resp->Find("output");
  if (output == nullptr || !output->is_array()) return;
  server_.responses().Put(a.response_id, a.owner, a.store_input, *output, WallMs());
}

void Session::FinishGeneration() {
  Active a = std::move(*active_);
  active_.reset();
  // Every sample ended here while the engine still runs one (the stop filter cut a stop string
  // the engine missed): free its KV now rather than at max_tokens.
  if (!a.gen->engine_done() && !a.cancel_sent) server_.engine().Cancel(a.id);
  server_.Untrack(a.id);
  server_.Release();
  beast::error_code ignored;
  stream_.socket().cancel(ignored);  // the disconnect watch
  const auto& u = a.gen->usage();
  server_.metrics().AddTokens(u.prompt_tokens, u.completion_tokens);
  const int status = a.peer_gone ? HttpStatusFor(StatusCode::kCancelled) : a.gen->http_status();
  const double ms = Seconds(Clock::now() - a.start) * 1e3;
  LADLE_LOG_INFO(
      "request.done rid={} api={} status={} stream={} finish={} prompt_tokens={} cached_tokens={} "
      "completion_tokens={} ttft_ms={:.1f} ms={:.1f}",
      a.rid, ApiLabel(a.api), status, a.stream, a.gen->finish_name(), u.prompt_tokens, u.cached_tokens,
      u.completion_tokens, a.got_token ? Seconds(a.first_token - a.start) * 1e3 : -1.0, ms);
  if (a.peer_gone) {
    server_.metrics().CountRequest(ApiLabel(a.api), 499);
    Close();
    return;
  }
  // Non-streaming: stored before Respond writes the body (streams stored theirs in FlushStream).
  if (a.store && !a.stream && status == 200) StoreResponse(a, a.pending);
  if (a.stream) {
    server_.metrics().CountRequest(ApiLabel(a.api), 200);
    if (a.keep_alive) {
      DoRead();
    } else {
      Close();
    }
    return;
  }
  Respond(status, a.gen->content_type(), std::move(a.pending), a.rid, a.keep_alive, ApiLabel(a.api), 0,
          a.mask && a.mask->forced(), a.dropped_tools);
}

}  // namespace ladle::server
