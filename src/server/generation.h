// One generation request's output path, independent of sockets: engine Outputs → one
// StreamParser per sample → StopFilter → the API's ResponseWriter → bytes to send. Lives on
// the connection's strand; never touched by the engine thread. Internal to the server.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/engine/engine.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/frontend/response_writers.h"
#include "stop_filter.h"

namespace ladle::server {

class Generation {
 public:
  // `tok` is the version's tokenizer; `meta` the writer's settings; `prompt_tokens` the
  // encoded prompt length (reported until the engine says how much was cached).
  static Result<std::unique_ptr<Generation>> Create(frontend::ModelVersion version, const tokenizer::Tokenizer& tok,
                                                    bool starts_in_reasoning, const frontend::ResponseMeta& meta,
                                                    std::vector<std::string> stops, int64_t prompt_tokens);

  // Consumes one engine Output; appends bytes to send (streaming: SSE frames, the opening
  // frames before the first; non-streaming: the whole body once every sample finished).
  void Consume(const engine::Output& out, std::string* bytes);
  // Ends the response early (engine failure or drain deadline): every unfinished sample
  // finishes with `reason`.
  void Abort(frontend::FinishReason reason, const std::string& message, std::string* bytes);

  // Structured output: the budget forced the grammar (reported in usage). Call before the
  // last sample finishes.
  void MarkGrammarForced() { usage_.grammar_forced = true; }

  bool done() const { return done_; }
  bool begun() const { return begun_; }
  const frontend::Usage& usage() const { return usage_; }
  int http_status() const { return writer_->http_status(); }
  std::string_view content_type() const { return writer_->content_type(); }
  // The finish of sample 0 ("stop", "length", ...), for logs.
  std::string_view finish_name() const { return finish_name_; }

 private:
  struct Sample {
    std::unique_ptr<frontend::StreamParser> parser;
    std::unique_ptr<StopFilter> filter;
    bool finished = false;
  };
  Generation() = default;
  void Begin(std::string* bytes);
  void Emit(int index, std::vector<frontend::Event> events, std::string* bytes);
  void FinishSample(int index, frontend::FinishReason reason, const std::string& text, std::string* bytes);

  std::unique_ptr<frontend::ResponseWriter> writer_;
  std::vector<Sample> samples_;
  frontend::Usage usage_;
  bool begun_ = false, done_ = false;
  std::string finish_name_;
};

// The parser's finish for an engine finish.
frontend::FinishReason FinishReasonFor(engine::FinishKind kind);

}  // namespace ladle::server
