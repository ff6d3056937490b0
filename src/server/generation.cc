#include "generation.h"

#include <algorithm>
#include <span>
#include <string_view>

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
  if (meta.top_logprobs >= 0 && meta.api != frontend::Api::kMessages) {
    g->tok_ = tok;
    g->top_logprobs_ = meta.top_logprobs;
  }
  return g;
}

void Generation::Begin(std::string* bytes) {
  if (begun_) return;
  begun_ = true;
  frontend::Usage prompt = usage_;
  prompt.completion_tokens = 0;
  writer_->AppendBegin(prompt, bytes);
}

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

int TrackOf(Event::Kind k) {
  if (k == Event::Kind::kReasoning) return 0;
  if (k == Event::Kind::kContent) return 1;
  return -1;
}

// Appends `e`, joining it to the last event when both are text of the same kind (the parser's
// output is the same under any chunking, so per-token pushes rejoin into the usual events).
void AppendJoined(Event e, std::vector<Event>* events) {
  if (!events->empty() && TrackOf(e.kind) >= 0 && events->back().kind == e.kind) {
    events->back().text += e.text;
    return;
  }
  events->push_back(std::move(e));
}

}  // namespace

frontend::TokenLogprob Generation::LogprobFor(const engine::TokenEvent& t) const {
  frontend::TokenLogprob lp;
  // An id outside the vocabulary decodes to nothing; its number is still the engine's.
  if (auto b = tok_->Decode(std::span(&t.token, 1)); b.ok()) lp.bytes = std::move(b).value();
  lp.logprob = t.logprob;
  const size_t k = std::min(t.top_logprobs.size(), static_cast<size_t>(top_logprobs_));
  lp.top.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    frontend::TopLogprob& top = lp.top.emplace_back();
    if (auto b = tok_->Decode(std::span(&t.top_logprobs[i].first, 1)); b.ok()) top.bytes = std::move(b).value();
    top.logprob = t.top_logprobs[i].second;
  }
  return lp;
}

// Mirrors StopFilter::Push's UTF-8 repair: a sequence left incomplete when its run of text
// ends becomes one U+FFFD in that run.
void Generation::CountParsed(Sample& s, const std::vector<Event>& events) {
  for (const Event& e : events) {
    const int track = TrackOf(e.kind);
    if (!s.utf8_tail.empty() && track != s.tail_track) {
      s.tracks[s.tail_track].in += static_cast<int64_t>(kReplacement.size());
      s.utf8_tail.clear();
    }
    if (track < 0) continue;
    std::string valid;
    StopFilter::RepairUtf8(e.text, &s.utf8_tail, &valid);
    s.tracks[track].in += static_cast<int64_t>(valid.size());
    s.tail_track = track;
  }
}

std::vector<Event> Generation::PushWithLogprobs(Sample& s, const engine::Output& out, size_t begin, size_t end) {
  std::vector<Event> joined;
  for (size_t i = begin; i < end; ++i) {
    const engine::TokenEvent& t = out.tokens[i];
    const int64_t reasoning_before = s.parser->reasoning_tokens();
    std::vector<Event> events = s.parser->Push(std::span(&t.token, 1));
    // The parser counts the ids it consumed while reasoning: that says the token's stream.
    TextTrack& track = s.tracks[s.parser->reasoning_tokens() > reasoning_before ? 0 : 1];
    track.pending.push_back({track.in, LogprobFor(t)});
    CountParsed(s, events);
    for (auto& e : events) AppendJoined(std::move(e), &joined);
  }
  return joined;
}

void Generation::Emit(int index, std::vector<Event> events, std::string* bytes) {
  Sample& s = samples_[index];
  std::vector<Event> filtered;
  for (auto& e : events) s.filter->Push(std::move(e), &filtered);
  for (auto& e : filtered) {
    if (s.leading && e.kind == Event::Kind::kContent) {
      if (e.text.find_first_not_of(" \t\r\n") == std::string::npos) {
        s.held.push_back(std::move(e));
        continue;
      }
      s.leading = false;
    } else if (s.leading && e.kind == Event::Kind::kToolCallStart) {
      // Whitespace before a tool call is no answer: its text (and the tokens that made it)
      // goes nowhere, as tool-call syntax does.
      s.leading = false;
      if (tok_) {
        for (const Event& h : s.held) PassText(s, h, nullptr);
      }
      s.held.clear();
    } else if (s.leading && e.kind != Event::Kind::kReasoning) {
      s.leading = false;  // the finish (or the end of a call): what was held is the answer
    }
    if (!s.leading && !s.held.empty()) {
      std::vector<Event> held = std::move(s.held);
      s.held.clear();
      for (auto& h : held) Send(index, std::move(h), bytes);
    }
    Send(index, std::move(e), bytes);
  }
  // The text ended at a stop string the engine has not stopped on: the sample ends here, as
  // it would have had the engine stopped (its later tokens are not counted).
  if (s.filter->stopped() && !s.finished) FinishSample(index, FinishReason::kStop, s.filter->matched(), bytes);
}

void Generation::Send(int index, Event e, std::string* bytes) {
  Sample& s = samples_[index];
  // The tokens whose text starts before what has now gone out ride on this event.
  if (tok_ && TrackOf(e.kind) >= 0) PassText(s, e, &e.logprobs);
  if (e.kind == Event::Kind::kFinish && index == 0) finish_name_ = frontend::FinishReasonName(e.finish);
  writer_->AppendEvent(e, index, bytes);
}

void Generation::PassText(Sample& s, const Event& e, std::vector<frontend::TokenLogprob>* out) {
  TextTrack& t = s.tracks[TrackOf(e.kind)];
  t.out += static_cast<int64_t>(e.text.size());
  while (!t.pending.empty() && t.pending.front().start < t.out) {
    if (out) out->push_back(std::move(t.pending.front().logprob));
    t.pending.pop_front();
  }
}

void Generation::FinishSample(int index, FinishReason reason, const std::string& text, std::string* bytes) {
  Sample& s = samples_[index];
  if (s.finished) return;
  s.finished = true;
  auto events = s.parser->Finish(reason);
  if (tok_) CountParsed(s, events);
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
    const size_t begin = i;
    ids.clear();
    while (i < out.tokens.size() && out.tokens[i].index == index) ids.push_back(out.tokens[i++].token);
    if (index < 0 || index >= static_cast<int>(samples_.size()) || samples_[index].finished) continue;
    usage_.completion_tokens += static_cast<int64_t>(ids.size());
    if (tok_) {
      Emit(index, PushWithLogprobs(samples_[index], out, begin, i), bytes);
    } else {
      Emit(index, samples_[index].parser->Push(ids), bytes);
    }
  }
  if (out.finished && out.finished_index >= 0 && out.finished_index < static_cast<int>(samples_.size())) {
    Sample& fs = samples_[out.finished_index];
    if (!fs.engine_finished) {
      fs.engine_finished = true;
      ++engine_finished_;
    }
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
