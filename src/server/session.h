// One client connection: reads HTTP/1.1 requests (keep-alive), routes them, and runs at most
// one generation at a time (HTTP/1.1 answers in order). Everything here runs on the
// connection's strand except the engine sink, which only queues and posts. Internal.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "generation.h"
#include "ladle/frontend/encoder.h"
#include "ladle/json/json.h"
#include "response_store.h"
#include "ladle/engine/engine.h"
#include "ladle/frontend/request_adapters.h"
#include "structured_hook.h"
#include "ladle/vision/image_pipeline.h"

namespace ladle::server {

class ServerImpl;

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerImpl& server, boost::asio::ip::tcp::socket socket);
  void Start();
  // From any thread (the drain deadline): cancel the running generation, if any.
  void CancelGeneration();

 private:
  using Request = http::request<http::string_body>;

  // Engine thread → strand. The sink appends here and posts one drain per batch.
  struct OutputQueue {
    std::mutex mu;
    std::vector<std::pair<engine::Output, Clock::time_point>> items;
    bool scheduled = false;
  };

  struct Active {
    engine::RequestId id = 0;
    frontend::Api api = frontend::Api::kChat;
    bool stream = false;
    bool keep_alive = true;
    bool chunked = true;  // HTTP/1.0 streams are close-delimited instead
    std::string rid;
    std::unique_ptr<Generation> gen;
    std::shared_ptr<OutputQueue> queue;
    Clock::time_point start, first_token, last_token;
    bool got_token = false;
    bool cancel_sent = false;
    bool peer_gone = false;
    bool head_sent = false, tail_sent = false;
    bool writing = false;
    std::string pending;  // bytes produced, not yet handed to a write
    std::string out;      // the write in flight
    std::shared_ptr<structured::StructuredMaskProvider> mask;  // structured output, or null
    std::string dropped_tools;  // x-ladle-dropped-tools value, or empty
    // Responses with store on: recorded in the response store when the response completes.
    bool store = false;
    uint64_t owner = 0;
    std::string response_id;
    json::Value store_input;
    std::string completed;  // streaming: the response.completed event's JSON, once seen
  };

  // A request ready for the engine, waiting (if constrained) for its compiled grammar.
  struct Launch {
    frontend::Api api = frontend::Api::kChat;
    bool stream = false;
    bool keep_alive = true;
    std::string rid;
    Clock::time_point start;
    std::unique_ptr<Generation> gen;
    std::vector<engine::TokenId> prompt;
    engine::SamplingParams sampling;
    std::string dropped_tools;
    bool store = false;
    uint64_t owner = 0;
    std::string response_id;
    json::Value store_input;
    bool agent_traffic = false;  // the store's traffic class of its KV blocks
    std::vector<engine::PromptImage> images;  // placeholders and their embeddings
  };

  // An adapted request on its way to the engine, past the HTTP request's lifetime (the image
  // stage answers later, on another thread).
  struct Pending {
    frontend::Api api = frontend::Api::kChat;
    std::string rid;
    Clock::time_point start;
    bool keep_alive = true;
    uint64_t owner = 0;
    std::optional<ResponseStore::Resolved> resolved;
    frontend::Request request;
    std::string traffic;         // x-ladle-traffic-class
    std::string grammar_budget;  // x-ladle-grammar-budget
  };

  void DoRead();
  void OnHeader(boost::beast::error_code ec);
  void OnRead(boost::beast::error_code ec);
  void Handle(Request req);
  void StartGeneration(frontend::Api api, Request& req, const std::string& rid, Clock::time_point start);
  // After the image stage (or at once without images): render, admit, constrain, submit.
  void ContinueGeneration(std::shared_ptr<Pending> p, Result<std::vector<vision::PreparedImage>> images);
  void SubmitGeneration(Launch l, ConstraintOutcome constraint);
  void Respond(int status, std::string_view content_type, std::string body, const std::string& rid,
               bool keep_alive, std::string_view api_label, int retry_after = 0, bool grammar_forced = false,
               std::string_view dropped_tools = {});
  void RespondError(frontend::Api api, const frontend::ApiError& e, const std::string& rid, bool keep_alive,
                    int retry_after = 0);
  void DrainOutputs();
  void FlushStream();
  void OnStreamWrite(boost::beast::error_code ec);
  void OnPeerReadable(boost::beast::error_code ec);
  void FinishGeneration();
  // Records a finished Responses response (non-streaming body or the streamed completed event).
  void StoreResponse(const Active& a, std::string_view response_json);
  void Close();
  // GET /v1/models and /v1/models/{id} (OpenAI's shape, or Anthropic's when the request carries
  // anthropic-version); POST /v1/messages/count_tokens. In session_info.cc.
  void HandleModels(const Request& req, std::string_view path, const std::string& rid, bool keep_alive);
  void HandleCountTokens(Request& req, const std::string& rid, bool keep_alive);
  void FinishCountTokens(frontend::Api api, const frontend::Request& request, const std::string& rid, bool keep_alive);
  // Checks the model name, renders and tokenizes an adapted request's prompt; on failure
  // answers the error in the API's shape and returns nullopt.
  std::optional<frontend::EncodedPrompt> EncodeOrRespond(frontend::Api api, const frontend::Request& request,
                                                         const std::string& rid, bool keep_alive);
  // The context-limit check of a rendered prompt: an error in the API's own words, or none.
  // May lower `max_tokens` when the request did not set it (it then gets what is left).
  std::optional<frontend::ApiError> CheckContext(const frontend::Request& request, size_t prompt_tokens,
                                                 engine::SamplingParams* sampling) const;
  // Lingering close (RFC 9112 §9.6): half-close, then read and discard what the client still
  // sends, for a bounded time, so a client that writes its whole body before reading (Python's
  // http.client, requests) reads our answer instead of a reset.
  void LingerThenClose();
  void LingerRead(std::shared_ptr<std::vector<char>> sink, Clock::time_point until);

  ServerImpl& server_;
  // Set when the answer being written ends a connection whose request body was not read.
  bool linger_ = false;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<Active> active_;
  // The HTTP version of the request being answered (10 or 11): responses use it, and an
  // HTTP/1.0 client gets Content-Length bodies and close-delimited streams, never chunks.
  unsigned version_ = 11;
};

}  // namespace ladle::server
