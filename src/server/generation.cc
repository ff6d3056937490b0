#include "generation.h"

namespace ladle::server {

using frontend::Event;
using frontend::FinishReason;

FinishReason FinishReasonFor(engine::FinishKind kind) {
  switch (kind) {
    case engine::FinishKind::kEos:
    case engine::FinishKind::kStopString:
    case engine::FinishKind::kStopToken:
      return FinishReason::kStop;
    case engine::FinishKind::kLength:
      return FinishReason::kLength;
    case engine::FinishKind::kCancelled:
      return FinishReason::kCancelled;
    case engine::FinishKind::kError:
      break;
  }
  return FinishReason::kError;
}

Result<std::unique_ptr<Generation>> Generation::Create(frontend::ModelVersion version, const tokenizer::Tokenizer& tok,
                                                       bool starts_in_reasoning, const frontend::ResponseMeta& meta,
                                                       std::vector<std::string> stops, int64_t prompt_tokens) {
  std::unique_ptr<Generation> g(new Generation());
  g->writer_ = frontend::MakeResponseWriter(meta);
  const int n = meta.api == frontend::Api::kChat ? std::max(1, meta.n) : 1;
  for (int i = 0; i < n; ++i) {
    auto parser = frontend::StreamParser::Create(version, tok, starts_in_reasoning);
    if (!parser.ok()) return parser.status();
    Sample s;
    s.parser = std::make_unique<frontend::StreamParser>(std::move(parser).value());
    s.filter = std::make_unique<StopFilter>(stops);
    g->samples_.push_back(std::move(s));
  }
  g->usage_.prompt_tokens = prompt_tokens;
  return g;
}

void Generation::Begin(std::string* bytes) {
  if (begun_) return;
  begun_ = true;
  frontend::Usage prompt = usage_;
  prompt.completion_tokens = 0;
  writer_->AppendBegin(prompt, bytes);
}

void Generation::Emit(int index, std::vector<Event> events, std::string* bytes) {
  std::vector<Event> filtered;
  for (auto& e : events) samples_[index].filter->Push(std::move(e), &filtered);
  for (const auto& e : filtered) {
    if (e.kind == Event::Kind::kFinish && index == 0) finish_name_ = frontend::FinishReasonName(e.finish);
    writer_->AppendEvent(e, index, bytes);
  }
}

void Generation::FinishSample(int index, FinishReason reason, const std::string& text, std::string* bytes) {
  Sample& s = samples_[index];
  if (s.finished) return;
  s.finished = true;
  auto events = s.parser->Finish(reason);
  // The engine's stop string (or error message) travels in the kFinish text.
  for (auto& e : events) {
    if (e.kind == Event::Kind::kFinish && !text.empty() && e.text.empty()) e.text = text;
  }
  usage_.reasoning_tokens += s.parser->reasoning_tokens();
  Emit(index, std::move(events), bytes);
  for (const auto& other : samples_) {
    if (!other.finished) return;
  }
  done_ = true;
  writer_->AppendEnd(usage_, bytes);
}

void Generation::Consume(const engine::Output& out, std::string* bytes) {
  if (done_) return;
  if (out.prompt_tokens > 0) usage_.prompt_tokens = out.prompt_tokens;
  usage_.cached_tokens = std::max<int64_t>(usage_.cached_tokens, out.cached_tokens);
  Begin(bytes);
  // Tokens of one sample go to its parser together: fewer, larger events.
  std::vector<tokenizer::TokenId> ids;
  for (size_t i = 0; i < out.tokens.size();) {
    const int index = out.tokens[i].index;
    ids.clear();
    while (i < out.tokens.size() && out.tokens[i].index == index) ids.push_back(out.tokens[i++].token);
    if (index < 0 || index >= static_cast<int>(samples_.size()) || samples_[index].finished) continue;
    usage_.completion_tokens += static_cast<int64_t>(ids.size());
    Emit(index, samples_[index].parser->Push(ids), bytes);
  }
  if (out.finished && out.finished_index >= 0 && out.finished_index < static_cast<int>(samples_.size())) {
    const std::string& text = out.finish == engine::FinishKind::kStopString ? out.stop_matched : out.error;
    FinishSample(out.finished_index, FinishReasonFor(out.finish), text, bytes);
  }
}

void Generation::Abort(FinishReason reason, const std::string& message, std::string* bytes) {
  if (done_) return;
  Begin(bytes);
  for (size_t i = 0; i < samples_.size(); ++i) FinishSample(static_cast<int>(i), reason, message, bytes);
}

}  // namespace ladle::server
