// ServerImpl: binding (net::Listener), the io threads and the drain.
#include "server_impl.h"

#include <csignal>

#include "ladle/core/logging.h"
#include "session.h"

namespace ladle::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Result<std::unique_ptr<Server>> Server::Create(ServerConfig config, engine::Engine* engine,
                                               const tokenizer::Tokenizer& base) {
  if (engine == nullptr) return InvalidArgument("server needs an engine");
  if (config.io_threads < 1) return InvalidArgument("io_threads must be at least 1");
  if (config.max_queue < 1) return InvalidArgument("max_queue must be at least 1");
  auto tok = frontend::TokenizerForVersion(base, config.version);
  if (!tok.ok()) return tok.status();
  auto vocab = structured::VocabularyFor(*tok, config.version);
  if (!vocab.ok()) return vocab.status().WithContext("grammar vocabulary");
  auto grammar = structured::CompileService::Create(std::move(vocab).value(), config.grammar_service);
  if (!grammar.ok()) return grammar.status();
  auto server = std::make_unique<ServerImpl>(std::move(config), engine, std::move(tok).value());
  server->SetGrammarService(std::move(grammar).value());
  LADLE_RETURN_IF_ERROR(server->Bind());
  return std::unique_ptr<Server>(std::move(server));
}

ServerImpl::ServerImpl(ServerConfig config, engine::Engine* engine, tokenizer::Tokenizer version_tok)
    : config_(std::move(config)),
      engine_(engine),
      tok_(std::move(version_tok)),
      responses_(ResponseStoreOptions{config_.response_store_entries, config_.response_store_bytes,
                                      config_.response_store_ttl_s}),
      signals_(ioc_),
      drain_timer_(ioc_) {}

ServerImpl::~ServerImpl() {
  ioc_.stop();
  // Image stages still running post their results into the stopped (but still existing) io
  // context: the pipeline waits for them before ioc_ goes.
  config_.images.reset();
}

Status ServerImpl::Bind() {
  LADLE_ASSIGN_OR_RETURN(listener_, net::Listener::Create(ioc_, net::ListenOptions{config_.host, config_.port, true},
                                                          [this](tcp::socket socket) {
                                                            std::make_shared<Session>(*this, std::move(socket))->Start();
                                                          }));
  port_ = listener_->port();
  return Status::Ok();
}

Status ServerImpl::Run() {
  if (config_.handle_signals) {
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      LADLE_LOG_INFO("server.signal signal={} action=drain", sig);
      Drain();
    });
  }
  listener_->Start();
  LADLE_LOG_INFO("server.listening host={} port={} model={} version={} auth={} max_queue={}", config_.host, port_,
                 config_.served_model_name, frontend::ModelVersionName(config_.version),
                 config_.keys.open() ? "open" : "keys", config_.max_queue);
  std::vector<std::thread> threads;
  for (int i = 1; i < config_.io_threads; ++i) threads.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (auto& t : threads) t.join();
  LADLE_LOG_INFO("server.stopped in_flight={}", in_flight_.load());
  return Status::Ok();
}

void ServerImpl::Drain() {
  asio::post(ioc_, [this] {
    if (draining_.exchange(true)) return;
    listener_->Stop();
    boost::system::error_code ec;
    signals_.cancel(ec);
    LADLE_LOG_INFO("server.drain in_flight={} deadline_ms={}", in_flight_.load(), config_.drain_deadline_ms);
    DrainTick(std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.drain_deadline_ms), false);
  });
}

void ServerImpl::DrainTick(std::chrono::steady_clock::time_point deadline, bool cancelled) {
  if (in_flight_.load() == 0) {
    ioc_.stop();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline && !cancelled) {
    // Past the deadline: cancel what is left; the sessions answer it as cancelled.
    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard lock(tracked_mu_);
      for (auto& [id, weak] : tracked_) {
        if (auto s = weak.lock()) sessions.push_back(std::move(s));
      }
    }
    LADLE_LOG_WARN("server.drain_deadline cancelling={}", sessions.size());
    for (auto& s : sessions) s->CancelGeneration();
    cancelled = true;
  }
  if (cancelled && now >= deadline + std::chrono::seconds(5)) {
    LADLE_LOG_ERROR("server.drain_stuck in_flight={}", in_flight_.load());
    ioc_.stop();
    return;
  }
  drain_timer_.expires_after(std::chrono::milliseconds(20));
  drain_timer_.async_wait([this, deadline, cancelled](boost::system::error_code ec) {
    if (!ec) DrainTick(deadline, cancelled);
  });
}

bool ServerImpl::TryAdmit() {
  int n = in_flight_.load();
  while (n < config_.max_queue) {
    if (in_flight_.compare_exchange_weak(n, n + 1)) {
      metrics_.SetInFlight(n + 1);
      return true;
    }
  }
  return false;
}

void ServerImpl::Release() { metrics_.SetInFlight(--in_flight_); }

void ServerImpl::Track(engine::RequestId id, const std::shared_ptr<Session>& s) {
  std::lock_guard lock(tracked_mu_);
  tracked_[id] = s;
}

void ServerImpl::Untrack(engine::RequestId id) {
  std::lock_guard lock(tracked_mu_);
  tracked_.erase(id);
}

}  // namespace ladle::server
