// The server's shared state: configuration, engine, tokenizer, metrics, the listener and the
// drain. Sessions reach it by reference. Internal to the server.
#pragma once

#include <boost/asio.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ladle/net/listener.h"
#include "ladle/server/metrics.h"
#include "ladle/server/server.h"
#include "ladle/structured/compile_service.h"
#include "response_store.h"

namespace ladle::server {

class Session;

class ServerImpl : public Server {
 public:
  ServerImpl(ServerConfig config, engine::Engine* engine, tokenizer::Tokenizer version_tok);
  ~ServerImpl() override;
  Status Bind();

  uint16_t port() const override { return port_; }
  Status Run() override;
  void Drain() override;

  const ServerConfig& config() const { return config_; }
  engine::Engine& engine() { return *engine_; }
  const tokenizer::Tokenizer& tokenizer() const { return tok_; }
  Metrics& metrics() { return metrics_; }
  // Structured output's compile service (null only if the vocabulary could not be built).
  structured::CompileService* grammar() { return grammar_.get(); }
  vision::ImagePipeline* images() { return config_.images.get(); }
  void SetGrammarService(std::unique_ptr<structured::CompileService> s) { grammar_ = std::move(s); }
  bool draining() const { return draining_.load(); }
  boost::asio::io_context& io() { return ioc_; }
  ResponseStore& responses() { return responses_; }

  // Admission against max_queue; Release when the generation ends.
  bool TryAdmit();
  void Release();
  // Sessions with a generation running, for the drain deadline.
  void Track(engine::RequestId id, const std::shared_ptr<Session>& s);
  void Untrack(engine::RequestId id);

 private:
  void DrainTick(std::chrono::steady_clock::time_point deadline, bool cancelled);

  ServerConfig config_;
  engine::Engine* engine_;
  tokenizer::Tokenizer tok_;
  Metrics metrics_;
  ResponseStore responses_;
  boost::asio::io_context ioc_;
  // After ioc_, so it is destroyed first: compiles still running post their results into a
  // stopped (but still existing) io context.
  std::unique_ptr<structured::CompileService> grammar_;
  std::unique_ptr<net::Listener> listener_;  // after ioc_, which must outlive it
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  uint16_t port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::mutex tracked_mu_;
  std::unordered_map<engine::RequestId, std::weak_ptr<Session>> tracked_;
};

}  // namespace ladle::server
