// `ladle grammar-worker`: the compiler as its own process (the recipe's dedicated SO
// machines), and the client the server's CompileService uses to reach it.
//
// Protocol: HTTP/1.1, keep-alive (the net module's HttpServer and HttpClient).
//   POST /v1/compile   body: SpecToJson(spec)
//     200  application/octet-stream: "LGW1", u32 little-endian n, n bytes of report JSON
//          ({"compile_ms":1.2,"approximations":[{"path":...,"what":...}]}), then
//          CompiledGrammar::Serialize() bytes to the end of the body.
//     4xx/5xx  application/json {"error":{"code":<StatusCode number>,"name":"InvalidArgument",
//          "message":"..."}}: the compile failed (the status is HttpStatusFor(code)).
//   GET /health        {"status":"ok"}
// The worker builds one vocabulary per model version on first use from its base tokenizer,
// so one worker serves servers of any version; the server's Deserialize checks the
// vocabulary fingerprint, so a worker with another tokenizer file is refused, not trusted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ladle/core/result.h"
#include "ladle/net/http_client.h"
#include "ladle/structured/compile_service.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::structured {

struct GrammarWorkerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  int io_threads = 2;
  CompileServiceOptions service;  // its cache and compile threads (workers ignored)
};

class GrammarWorker {
 public:
  // Binds at once (so port() is known); serves after Start().
  static Result<std::unique_ptr<GrammarWorker>> Create(GrammarWorkerOptions opts, tokenizer::Tokenizer base);
  virtual ~GrammarWorker() = default;
  virtual uint16_t port() const = 0;
  // Serves on background threads until Stop() (or destruction).
  virtual void Start() = 0;
  virtual void Stop() = 0;
  virtual uint64_t compiles_served() const = 0;
};

// One compile on a remote worker, blocking up to timeout_ms, through `client`'s pooled
// keep-alive connections. Transport failures (refused, reset, a malformed answer) are
// kUnavailable, the deadline kDeadlineExceeded; a compile error the worker reports keeps its
// code.
CompileResult CompileRemote(net::HttpClient& client, const std::string& endpoint, const ConstraintSpec& spec,
                            std::shared_ptr<const grammar::TokenVocabulary> vocab, uint32_t timeout_ms);
// The same through a client of its own (one connection, closed afterwards).
CompileResult CompileRemote(const std::string& endpoint, const ConstraintSpec& spec,
                            std::shared_ptr<const grammar::TokenVocabulary> vocab, uint32_t timeout_ms);

// The 200 body of /v1/compile, and back (exposed for tests).
std::string EncodeCompileResponse(const CompiledConstraint& c);
CompileResult DecodeCompileResponse(std::string_view body, std::shared_ptr<const grammar::TokenVocabulary> vocab,
                                    const std::string& endpoint);

}  // namespace ladle::structured
