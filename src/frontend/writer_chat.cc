// OpenAI Chat Completions: `chat.completion.chunk` SSE frames ending in `data: [DONE]`, or one
// `chat.completion` body. Choices are independent (n > 1 interleaves their chunks); usage is
// one per request. With meta.top_logprobs >= 0 each text chunk (and each choice of the body)
// carries `logprobs.content` from Event::logprobs; otherwise `"logprobs":null` as always.
#include <algorithm>
#include <vector>

#include "ladle/frontend/response_writers.h"
#include "ladle/json/json.h"
#include "writer_common.h"

namespace ladle::frontend {
namespace {

using namespace writer_internal;

struct ToolCallState {
  int parser_index = -1;
  std::string id, name, arguments;  // arguments only kept when not streaming
};

struct ChoiceState {
  std::string content, reasoning;  // only kept when not streaming
  // Not streaming, logprobs requested: the `logprobs.content` entries so far, comma-separated.
  std::string logprobs;
  size_t logprob_count = 0;
  std::vector<ToolCallState> calls;
  bool finished = false;
  FinishReason finish = FinishReason::kStop;
};

class ChatWriter final : public ResponseWriter {
 public:
  explicit ChatWriter(const ResponseMeta& meta) : ResponseWriter(meta.stream), meta_(meta) {
    choices_.resize(static_cast<size_t>(std::max(1, meta.n)));
    // Every chunk repeats the same envelope; build it once.
    prefix_ = "data: {\"id\":";
    json::AppendQuoted(meta.id, &prefix_);
    prefix_ += ",\"object\":\"chat.completion.chunk\",\"created\":";
    AppendInt(meta.created, &prefix_);
    prefix_ += ",\"model\":";
    json::AppendQuoted(meta.model, &prefix_);
    prefix_ += ",\"system_fingerprint\":";
    AppendQuotedOrNull(meta.system_fingerprint, &prefix_);
    prefix_ += ",\"choices\":[";
  }

  void AppendBegin(const Usage&, std::string* out) override {
    if (!stream_) return;
    // The role comes first, one chunk per choice, as OpenAI sends it (content "" included).
    for (size_t i = 0; i < choices_.size(); ++i) {
      BeginChunk(static_cast<int>(i), out);
      out->append("\"role\":\"assistant\",\"content\":\"\"");
      EndChunk(nullptr, out);
    }
  }

  void AppendEvent(const Event& e, int choice, std::string* out) override {
    if (failed_ || choice < 0 || choice >= static_cast<int>(choices_.size())) return;
    ChoiceState& c = choices_[choice];
    if (c.finished) return;
    switch (e.kind) {
      case Event::Kind::kReasoning:
        if (e.text.empty()) return;
        if (!stream_) {
          c.reasoning += e.text;
          KeepLogprobs(c, e);
          return;
        }
        BeginChunk(choice, out);
        json::AppendQuoted(meta_.reasoning_field, out);
        out->push_back(':');
        json::AppendQuoted(e.text, out);
        EndChunk(nullptr, out, &e.logprobs);
        return;
      case Event::Kind::kContent:
        if (e.text.empty()) return;
        if (!stream_) {
          c.content += e.text;
          KeepLogprobs(c, e);
          return;
        }
        BeginChunk(choice, out);
        out->append("\"content\":");
        json::AppendQuoted(e.text, out);
        EndChunk(nullptr, out, &e.logprobs);
        return;
      case Event::Kind::kToolCallStart:
        StartCall(choice, e.tool_index, e.tool_id, e.tool_name, out);
        return;
      case Event::Kind::kToolCallArgs: {
        if (e.text.empty()) return;
        int k = FindCall(c, e.tool_index);
        // Arguments for a call that never started: start it nameless rather than lose them.
        if (k < 0) k = StartCall(choice, e.tool_index, "", "", out);
        if (!stream_) {
          c.calls[k].arguments += e.text;
          return;
        }
        BeginChunk(choice, out);
        out->append("\"tool_calls\":[{\"index\":");
        AppendInt(k, out);
        out->append(",\"function\":{\"arguments\":");
        json::AppendQuoted(e.text, out);
        out->append("}}]");
        EndChunk(nullptr, out);
        return;
      }
      case Event::Kind::kToolCallEnd:
        return;  // Chat has no per-call end; the next call or the finish says it.
      case Event::Kind::kFinish:
        Finish(choice, e, out);
        return;
    }
  }

  void AppendEnd(const Usage& usage, std::string* out) override {
    // A choice the engine never finished is not known to be complete: fail the request.
    if (!failed_) {
      for (const ChoiceState& c : choices_) {
        if (!c.finished) {
          Event e;
          e.kind = Event::Kind::kFinish;
          e.finish = FinishReason::kError;
          Fail(e, out);
          break;
        }
      }
    }
    if (stream_) {
      if (meta_.include_usage && !failed_) {
        out->append(prefix_);
        out->append("],\"usage\":");
        AppendChatUsage(usage, out);
        out->push_back('}');
        EndFrame(out);
      }
      out->append("data: [DONE]\n\n");
      return;
    }
    if (failed_) {
      AppendOpenAiError(failure_message_, out);
      return;
    }
    AppendBody(usage, out);
  }

 private:
  void KeepLogprobs(ChoiceState& c, const Event& e) const {
    if (meta_.top_logprobs >= 0) AppendLogprobEntries(e.logprobs, &c.logprob_count, &c.logprobs);
  }

  static int FindCall(const ChoiceState& c, int parser_index) {
    for (size_t i = 0; i < c.calls.size(); ++i) {
      if (c.calls[i].parser_index == parser_index) return static_cast<int>(i);
    }
    return -1;
  }

  // Chat numbers a choice's calls 0, 1, … in order whatever the parser's indices are.
  int StartCall(int choice, int parser_index, const std::string& id, const std::string& name, std::string* out) {
    ChoiceState& c = choices_[choice];
    int k = static_cast<int>(c.calls.size());
    ToolCallState& call = c.calls.emplace_back();
    call.parser_index = parser_index;
    call.name = name;
    if (!id.empty()) {
      call.id = id;
    } else {
      call.id = "call_";
      call.id += IdBody(meta_.id);
      call.id += '_';
      call.id += std::to_string(choice);
      call.id += '_';
      call.id += std::to_string(k);
    }
    if (stream_) {
      BeginChunk(choice, out);
      out->append("\"tool_calls\":[{\"index\":");
      AppendInt(k, out);
      out->append(",\"id\":");
      json::AppendQuoted(call.id, out);
      out->append(",\"type\":\"function\",\"function\":{\"name\":");
      json::AppendQuoted(call.name, out);
      out->append(",\"arguments\":\"\"}}]");
      EndChunk(nullptr, out);
    }
    return k;
  }

  // tool_calls only when the parser says a call was parsed completely (a broken call it
  // closed early finishes with kStop) and the choice indeed started one.
  static const char* FinishName(const ChoiceState& c) {
    if (c.finish == FinishReason::kLength) return "length";
    return c.finish == FinishReason::kToolCalls && !c.calls.empty() ? "tool_calls" : "stop";
  }

  void Finish(int choice, const Event& e, std::string* out) {
    if (e.malformed) malformed_ = true;
    if (IsFailure(e.finish)) {
      Fail(e, out);
      return;
    }
    ChoiceState& c = choices_[choice];
    c.finished = true;
    c.finish = e.finish;
    if (stream_) {
      BeginChunk(choice, out);
      EndChunk(FinishName(c), out);
    }
  }

  // Ends the whole request with an error: a stream gets an error frame (the SDKs raise it),
  // a body becomes the error JSON.
  void Fail(const Event& e, std::string* out) {
    failed_ = true;
    failure_message_ = FailureMessage(e);
    if (stream_) {
      BeginDataFrame(out);
      AppendOpenAiError(failure_message_, out);
      EndFrame(out);
    } else {
      status_ = FailureStatus(e.finish);
    }
  }

  // `data: {envelope,"choices":[{"index":i,"delta":{` — the caller writes the delta members.
  void BeginChunk(int choice, std::string* out) {
    out->append(prefix_);
    out->append("{\"index\":");
    AppendInt(choice, out);
    out->append(",\"delta\":{");
  }
  // `logprobs`: the tokens this chunk's text delivers. A chunk without any (the role chunk,
  // tool calls, the finish, or a request without logprobs) says null, as OpenAI's do.
  void EndChunk(const char* finish_reason, std::string* out, const std::vector<TokenLogprob>* logprobs = nullptr) {
    if (meta_.top_logprobs >= 0 && logprobs && !logprobs->empty()) {
      out->append("},\"logprobs\":{\"content\":[");
      size_t count = 0;
      AppendLogprobEntries(*logprobs, &count, out);
      out->append("],\"refusal\":null},\"finish_reason\":");
    } else {
      out->append("},\"logprobs\":null,\"finish_reason\":");
    }
    if (finish_reason) {
      out->push_back('"');
      out->append(finish_reason);
      out->push_back('"');
    } else {
      out->append("null");
    }
    out->append("}]}\n\n");
  }

  void AppendBody(const Usage& usage, std::string* out) {
    out->append("{\"id\":");
    json::AppendQuoted(meta_.id, out);
    out->append(",\"object\":\"chat.completion\",\"created\":");
    AppendInt(meta_.created, out);
    out->append(",\"model\":");
    json::AppendQuoted(meta_.model, out);
    out->append(",\"system_fingerprint\":");
    AppendQuotedOrNull(meta_.system_fingerprint, out);
    out->append(",\"choices\":[");
    for (size_t i = 0; i < choices_.size(); ++i) {
      const ChoiceState& c = choices_[i];
      if (i) out->push_back(',');
      out->append("{\"index\":");
      AppendInt(static_cast<int64_t>(i), out);
      out->append(",\"message\":{\"role\":\"assistant\",\"content\":");
      // OpenAI sends null content for a turn that only calls tools.
      if (c.content.empty() && !c.calls.empty()) {
        out->append("null");
      } else {
        json::AppendQuoted(c.content, out);
      }
      if (!c.reasoning.empty()) {
        out->push_back(',');
        json::AppendQuoted(meta_.reasoning_field, out);
        out->push_back(':');
        json::AppendQuoted(c.reasoning, out);
      }
      if (!c.calls.empty()) {
        out->append(",\"tool_calls\":[");
        for (size_t k = 0; k < c.calls.size(); ++k) {
          if (k) out->push_back(',');
          out->append("{\"id\":");
          json::AppendQuoted(c.calls[k].id, out);
          out->append(",\"type\":\"function\",\"function\":{\"name\":");
          json::AppendQuoted(c.calls[k].name, out);
          out->append(",\"arguments\":");
          json::AppendQuoted(c.calls[k].arguments, out);
          out->append("}}");
        }
        out->push_back(']');
      }
      out->append("},\"logprobs\":");
      if (meta_.top_logprobs >= 0) {
        out->append("{\"content\":[");
        out->append(c.logprobs);
        out->append("],\"refusal\":null}");
      } else {
        out->append("null");
      }
      out->append(",\"finish_reason\":\"");
      out->append(FinishName(c));
      out->append("\"}");
    }
    out->append("],\"usage\":");
    AppendChatUsage(usage, out);
    out->push_back('}');
  }

  ResponseMeta meta_;
  std::string prefix_;
  std::vector<ChoiceState> choices_;
  bool failed_ = false;
  std::string failure_message_;
};

}  // namespace

std::unique_ptr<ResponseWriter> MakeChatWriter(const ResponseMeta& meta) { return std::make_unique<ChatWriter>(meta); }

}  // namespace ladle::frontend
