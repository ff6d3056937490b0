// One generation request's output path, independent of sockets: engine Outputs → one
// StreamParser per sample → StopFilter → the API's ResponseWriter → bytes to send. Lives on
// the connection's strand; never touched by the engine thread. Internal to the server.
//
// Logprobs (meta.top_logprobs >= 0): each text event the writer gets carries the engine's
// logprobs of the tokens whose text it delivers (Event::logprobs). The parser and the stop
// filter only see text, so the ids go to the parser one at a time (chunking never changes
// its output) and each token is placed in the reasoning or content text at the offset its
// text starts at; once the stop filter has let text past that offset through, the token rides
// on the event that did. A token whose text never gets through (markers, tool-call syntax,
// EOS, a stop string) is reported nowhere.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
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
  // Whether the engine has finished every sample. A sample can be done here first: the stop
  // filter found a stop string the engine did not stop on (one that spans a re-route or a
  // hand-off, or a worker that ignores stop strings); its engine request is then cancelled.
  bool engine_done() const { return engine_finished_ == samples_.size(); }
  bool begun() const { return begun_; }
  const frontend::Usage& usage() const { return usage_; }
  int http_status() const { return writer_->http_status(); }
  std::string_view content_type() const { return writer_->content_type(); }
  // The finish of sample 0 ("stop", "length", ...), for logs.
  std::string_view finish_name() const { return finish_name_; }

 private:
  // One of a sample's two text streams (reasoning, content), measured in the bytes the stop
  // filter works on (after its UTF-8 repair).
  struct TextTrack {
    struct Pending {
      int64_t start;  // where the token's text starts in this stream
      frontend::TokenLogprob logprob;
    };
    int64_t in = 0;   // bytes the parser produced so far
    int64_t out = 0;  // bytes the stop filter let through so far
    std::deque<Pending> pending;
  };
  struct Sample {
    std::unique_ptr<frontend::StreamParser> parser;
    std::unique_ptr<StopFilter> filter;
    bool finished = false;
    bool engine_finished = false;
    // Logprobs only. tracks[0] reasoning, tracks[1] content; utf8_tail mirrors the filter's
    // held incomplete sequence so `in` counts what the filter will pass on.
    TextTrack tracks[2];
    std::string utf8_tail;
    int tail_track = 1;
    // An answer that is only whitespace so far is held back: dropped when a tool call follows
    // (models write a blank line before a DSML block; a client must not see it as the answer),
    // sent as it was when text or the finish follows.
    bool leading = true;
    std::vector<frontend::Event> held;
  };
  Generation() = default;
  void Begin(std::string* bytes);
  void Emit(int index, std::vector<frontend::Event> events, std::string* bytes);
  // One event past the stop filter to the writer, with the logprobs that ride on it.
  void Send(int index, frontend::Event e, std::string* bytes);
  // `e`'s text has gone out (or been dropped): its track moves past it, and the logprobs of the
  // tokens whose text starts before that go to `out` (nullptr: nowhere). Content or reasoning.
  void PassText(Sample& s, const frontend::Event& e, std::vector<frontend::TokenLogprob>* out);
  void FinishSample(int index, frontend::FinishReason reason, const std::string& text, std::string* bytes);
  // Logprobs: feeds `ids` one at a time, queueing each token's logprob on its track.
  std::vector<frontend::Event> PushWithLogprobs(Sample& s, const engine::Output& out, size_t begin, size_t end);
  // Logprobs: advances the tracks' `in` by the text of parser events (as the filter repairs it).
  static void CountParsed(Sample& s, const std::vector<frontend::Event>& events);
  frontend::TokenLogprob LogprobFor(const engine::TokenEvent& t) const;

  std::unique_ptr<frontend::ResponseWriter> writer_;
  std::optional<tokenizer::Tokenizer> tok_;  // set when logprobs were requested
  int top_logprobs_ = -1;
  std::vector<Sample> samples_;
  frontend::Usage usage_;
  bool begun_ = false, done_ = false;
  size_t engine_finished_ = 0;
  std::string finish_name_;
};

// The parser's finish for an engine finish.
frontend::FinishReason FinishReasonFor(engine::FinishKind kind);

}  // namespace ladle::server
