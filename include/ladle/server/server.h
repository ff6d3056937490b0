// `ladle serve`: an OpenAI- and Anthropic-compatible HTTP/1.1 server (Boost.Beast, keep-alive)
// in front of an engine::Engine.
//
//   POST /v1/chat/completions, /v1/responses, /v1/messages   (JSON or SSE streams)
//   GET  /v1/models, /health (liveness), /ready (503 while draining), /metrics (Prometheus)
//
// Threads: `io_threads` run the sockets; each connection is a strand. A generation request is
// adapted, encoded and submitted on that strand; the engine delivers outputs on its own
// thread into the request's queue, which wakes the strand to parse, render and write them.
// A client that disconnects cancels its engine request. docs/server.md has the details.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ladle/core/result.h"
#include "ladle/engine/engine.h"
#include "ladle/frontend/model_version.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/server/auth.h"
#include "ladle/structured/compile_service.h"
#include "ladle/tokenizer/tokenizer.h"
#include "ladle/vision/image_pipeline.h"

namespace ladle::server {

struct ServerConfig {
  // True when `model` is the served name or one of its aliases.
  bool ServesModel(std::string_view model) const {
    if (model == served_model_name) return true;
    for (const auto& a : model_aliases)
      if (model == a) return true;
    return false;
  }

  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (see Server::port())
  std::string served_model_name = "ladle";
  // Further names requests may use for the same model (`--served-model-name a,b` or repeated):
  // /v1/models lists them all, and a response names the model as the request did.
  std::vector<std::string> model_aliases;
  // Context limit in tokens (prompt + output); 0: the engine's own check only. A prompt over it
  // gets each API's context-overflow error (Anthropic's "prompt is too long: N tokens > M
  // maximum", OpenAI's code context_length_exceeded) so agents compact instead of failing.
  int64_t max_model_len = 0;
  frontend::ModelVersion version = frontend::ModelVersion::kV32;
  frontend::Limits limits;
  int default_max_tokens = 256;  // when the request names none (Chat, Responses)
  // When > 0, every request's output budget is at most this many tokens (finish reason
  // "length"/"max_tokens" past it): for serving a demo or test model to agents that ask for
  // 32,000-token answers. 0: the request's own max_tokens.
  int max_tokens_cap = 0;
  // Responses API `store` (default true): recent responses kept in memory so item_reference
  // and previous_response_id resolve. 0 TTL turns it off (references are then a 400).
  int64_t response_store_ttl_s = 3600;
  size_t response_store_entries = 4096;
  size_t response_store_bytes = 256u << 20;
  // Generation requests held at once (waiting or running); beyond it: 429 (OpenAI) or 529
  // (Anthropic) with Retry-After.
  int max_queue = 256;
  int retry_after_s = 1;
  int64_t drain_deadline_ms = 30'000;  // SIGTERM: in-flight requests get this long
  int io_threads = 2;
  bool handle_signals = true;  // SIGINT/SIGTERM start a drain
  ApiKeys keys;
  // Structured output (docs/structured_output.md). The compile service's cache, threads and
  // `--grammar-worker` endpoints; budget-aware completion for JSON and tool-call outputs (a
  // request may say `x-ladle-grammar-budget: off`, or `on` for regex/EBNF); JSON whitespace.
  structured::CompileServiceOptions grammar_service;
  bool grammar_budget_aware = true;
  // A constrained request waits at most this long for its grammar (queue + compile + worker
  // round trips); past it the request gets a 504 in its API's shape and the compile finishes
  // (or fails) on its own for the cache. 0 = the compile budget plus 10 s.
  int64_t grammar_deadline_ms = 0;
  ladle::grammar::JsonSchemaOptions::Whitespace grammar_whitespace = ladle::grammar::JsonSchemaOptions::Whitespace::kBounded;
  // Images (docs/vision.md): the stage that fetches, decodes, resizes and encodes a request's
  // images before it enters the engine, with its limits. null: image parts get a 400 (a model
  // version without an image token refuses them anyway).
  std::shared_ptr<vision::ImagePipeline> images;
};

class Server {
 public:
  virtual ~Server() = default;

  // Binds the listening socket (so port() is known) without serving yet. `engine` must
  // outlive the server; `base` is the DeepSeek V3 tokenizer.json.
  static Result<std::unique_ptr<Server>> Create(ServerConfig config, engine::Engine* engine,
                                                const tokenizer::Tokenizer& base);

  virtual uint16_t port() const = 0;
  // Serves until a drain completes; returns OK after a clean drain.
  virtual Status Run() = 0;
  // Starts a drain from any thread: stop accepting, answer new requests 503, let in-flight
  // ones finish until the deadline (then cancel them), then Run() returns.
  virtual void Drain() = 0;
};

}  // namespace ladle::server
