// OpenAI Responses: named SSE events with a sequence_number each, or one `response` object.
// Output is a list of items — reasoning (content part `reasoning_text`, as the SDK's
// ResponseReasoningItem carries raw reasoning), message (part `output_text`) and
// function_call — each opened with output_item.added and closed with output_item.done before
// the next one opens.
#include <vector>

#include "ladle/frontend/response_writers.h"
#include "ladle/json/json.h"
#include "writer_common.h"

namespace ladle::frontend {
namespace {

using namespace writer_internal;
using Kind = OutputItem::Kind;

class ResponsesWriter final : public ResponseWriter {
 public:
  explicit ResponsesWriter(const ResponseMeta& meta) : ResponseWriter(meta.stream), meta_(meta) {}

  void AppendBegin(const Usage&, std::string* out) override {
    if (!stream_) return;
    BeginEvent("response.created", out);
    out->append(",\"response\":");
    AppendResponse("in_progress", nullptr, out);
    EndEvent(out);
    BeginEvent("response.in_progress", out);
    out->append(",\"response\":");
    AppendResponse("in_progress", nullptr, out);
    EndEvent(out);
  }

  void AppendEvent(const Event& e, int, std::string* out) override {
    if (finished_) return;
    switch (e.kind) {
      case Event::Kind::kReasoning:
      case Event::Kind::kContent: {
        if (e.text.empty()) return;
        Kind kind = e.kind == Event::Kind::kReasoning ? Kind::kReasoning : Kind::kText;
        OutputItem* item = items_.open();
        if (!item || item->kind != kind) item = &OpenItem(kind, -1, "", "", out);
        item->text += e.text;
        // Only output_text has logprobs in this API; reasoning tokens are not reported.
        const bool logprobs = kind == Kind::kText && meta_.top_logprobs >= 0;
        if (logprobs) AppendLogprobEntries(e.logprobs, &item->logprob_count, &item->logprobs);
        if (!stream_) return;
        BeginEvent(kind == Kind::kReasoning ? "response.reasoning_text.delta" : "response.output_text.delta", out);
        AppendItemRef(*item, out);
        out->append(",\"content_index\":0,\"delta\":");
        json::AppendQuoted(e.text, out);
        if (kind == Kind::kText) {
          out->append(",\"logprobs\":[");
          size_t count = 0;
          if (logprobs) AppendLogprobEntries(e.logprobs, &count, out);
          out->push_back(']');
        }
        EndEvent(out);
        return;
      }
      case Event::Kind::kToolCallStart:
        OpenItem(Kind::kToolCall, e.tool_index, e.tool_id, e.tool_name, out);
        return;
      case Event::Kind::kToolCallArgs: {
        if (e.text.empty()) return;
        OutputItem* item = items_.open();
        if (!item || item->kind != Kind::kToolCall || item->tool_index != e.tool_index) {
          // Arguments for a call that is not open: start it nameless rather than lose them.
          item = &OpenItem(Kind::kToolCall, e.tool_index, "", "", out);
        }
        item->text += e.text;
        if (!stream_) return;
        BeginEvent("response.function_call_arguments.delta", out);
        AppendItemRef(*item, out);
        out->append(",\"delta\":");
        json::AppendQuoted(e.text, out);
        EndEvent(out);
        return;
      }
      case Event::Kind::kToolCallEnd: {
        OutputItem* item = items_.open();
        if (item && item->kind == Kind::kToolCall && item->tool_index == e.tool_index) CloseOpen("completed", out);
        return;
      }
      case Event::Kind::kFinish:
        finished_ = true;
        finish_ = e.finish;
        if (e.malformed) malformed_ = true;
        if (IsFailure(e.finish)) {
          failure_message_ = FailureMessage(e);
          if (!stream_) status_ = FailureStatus(e.finish);
          return;  // the failed response object shows the open item as it stood
        }
        // Max tokens cut the open item short.
        CloseOpen(e.finish == FinishReason::kLength ? "incomplete" : "completed", out);
        return;
    }
  }

  void AppendEnd(const Usage& usage, std::string* out) override {
    if (!finished_) {
      finished_ = true;
      finish_ = FinishReason::kError;
      Event e;
      e.kind = Event::Kind::kFinish;
      e.finish = FinishReason::kError;
      failure_message_ = FailureMessage(e);
      if (!stream_) status_ = FailureStatus(finish_);
    }
    const char* status = StatusName();
    if (!stream_) {
      if (IsFailure(finish_)) {
        AppendOpenAiError(failure_message_, out);
      } else {
        AppendResponse(status, &usage, out);
      }
      return;
    }
    BeginEvent(IsFailure(finish_) ? "response.failed"
               : finish_ == FinishReason::kLength ? "response.incomplete"
                                                  : "response.completed",
               out);
    out->append(",\"response\":");
    AppendResponse(status, &usage, out);
    EndEvent(out);
  }

 private:
  const char* StatusName() const {
    switch (finish_) {
      case FinishReason::kLength: return "incomplete";
      case FinishReason::kError: return "failed";
      case FinishReason::kCancelled: return "cancelled";
      default: return "completed";
    }
  }

  // Closes whatever is open, then opens a new item with its added events.
  OutputItem& OpenItem(Kind kind, int tool_index, const std::string& call_id, const std::string& name,
                       std::string* out) {
    CloseOpen("completed", out);
    int output_index = static_cast<int>(items_.items().size());
    OutputItem& item = items_.Open(kind);
    item.tool_index = tool_index;
    item.name = name;
    item.item_id = kind == Kind::kReasoning ? "rs_" : kind == Kind::kText ? "msg_" : "fc_";
    item.item_id += IdBody(meta_.id);
    item.item_id += '_';
    item.item_id += std::to_string(output_index);
    if (kind == Kind::kToolCall) {
      if (!call_id.empty()) {
        item.call_id = call_id;
      } else {
        item.call_id = "call_";
        item.call_id += IdBody(meta_.id);
        item.call_id += '_';
        item.call_id += std::to_string(output_index);
      }
    }
    if (!stream_) return item;
    BeginEvent("response.output_item.added", out);
    out->append(",\"output_index\":");
    AppendInt(output_index, out);
    out->append(",\"item\":");
    AppendItem(item, "in_progress", /*with_content=*/false, out);
    EndEvent(out);
    if (kind != Kind::kToolCall) {
      BeginEvent("response.content_part.added", out);
      AppendItemRef(item, out);
      out->append(",\"content_index\":0,\"part\":");
      AppendPart(kind, "", "", out);
      EndEvent(out);
    }
    return item;
  }

  // The done events for the open item (text/part/item), with the final status.
  void CloseOpen(const char* status, std::string* out) {
    OutputItem* item = items_.open();
    if (!item) return;
    item_status_.resize(items_.items().size());
    item_status_[items_.open_index()] = status;
    if (stream_) {
      if (item->kind == Kind::kToolCall) {
        BeginEvent("response.function_call_arguments.done", out);
        AppendItemRef(*item, out);
        out->append(",\"name\":");
        json::AppendQuoted(item->name, out);
        out->append(",\"arguments\":");
        json::AppendQuoted(item->text, out);
        EndEvent(out);
      } else {
        BeginEvent(item->kind == Kind::kReasoning ? "response.reasoning_text.done" : "response.output_text.done", out);
        AppendItemRef(*item, out);
        out->append(",\"content_index\":0,\"text\":");
        json::AppendQuoted(item->text, out);
        if (item->kind == Kind::kText) {
          out->append(",\"logprobs\":[");
          out->append(item->logprobs);
          out->push_back(']');
        }
        EndEvent(out);
        BeginEvent("response.content_part.done", out);
        AppendItemRef(*item, out);
        out->append(",\"content_index\":0,\"part\":");
        AppendPart(item->kind, item->text, item->logprobs, out);
        EndEvent(out);
      }
      BeginEvent("response.output_item.done", out);
      out->append(",\"output_index\":");
      AppendInt(items_.open_index(), out);
      out->append(",\"item\":");
      AppendItem(*item, status, /*with_content=*/true, out);
      EndEvent(out);
    }
    items_.CloseOpen();
  }

  // `event: <type>\ndata: {"type":…,"sequence_number":N` — the caller adds members.
  void BeginEvent(std::string_view type, std::string* out) {
    BeginNamedFrame(type, out);
    out->append("{\"type\":\"");
    out->append(type);
    out->append("\",\"sequence_number\":");
    AppendInt(sequence_++, out);
  }
  static void EndEvent(std::string* out) {
    out->push_back('}');
    EndFrame(out);
  }

  void AppendItemRef(const OutputItem& item, std::string* out) const {
    out->append(",\"item_id\":");
    json::AppendQuoted(item.item_id, out);
    out->append(",\"output_index\":");
    AppendInt(static_cast<int64_t>(&item - items_.items().data()), out);
  }

  // `logprobs`: the part's output_text.logprobs entries, comma-separated ("" → []).
  static void AppendPart(Kind kind, std::string_view text, std::string_view logprobs, std::string* out) {
    if (kind == Kind::kReasoning) {
      out->append("{\"type\":\"reasoning_text\",\"text\":");
      json::AppendQuoted(text, out);
      out->push_back('}');
    } else {
      out->append("{\"type\":\"output_text\",\"text\":");
      json::AppendQuoted(text, out);
      out->append(",\"annotations\":[],\"logprobs\":[");
      out->append(logprobs);
      out->append("]}");
    }
  }

  // An output item. Added events carry it empty (with_content false).
  void AppendItem(const OutputItem& item, std::string_view status, bool with_content, std::string* out) const {
    out->append("{\"id\":");
    json::AppendQuoted(item.item_id, out);
    switch (item.kind) {
      case Kind::kReasoning:
        out->append(",\"type\":\"reasoning\",\"summary\":[],\"content\":[");
        if (with_content) AppendPart(item.kind, item.text, item.logprobs, out);
        out->push_back(']');
        break;
      case Kind::kText:
        out->append(",\"type\":\"message\",\"role\":\"assistant\",\"content\":[");
        if (with_content) AppendPart(item.kind, item.text, item.logprobs, out);
        out->push_back(']');
        break;
      case Kind::kToolCall:
        out->append(",\"type\":\"function_call\",\"call_id\":");
        json::AppendQuoted(item.call_id, out);
        out->append(",\"name\":");
        json::AppendQuoted(item.name, out);
        out->append(",\"arguments\":");
        json::AppendQuoted(with_content ? std::string_view(item.text) : std::string_view(), out);
        break;
    }
    out->append(",\"status\":\"");
    out->append(status);
    out->append("\"}");
  }

  // The response object; `usage` null while in progress. Output lists every item so far.
  void AppendResponse(std::string_view status, const Usage* usage, std::string* out) const {
    const ResponsesEcho& echo = meta_.echo;
    out->append("{\"id\":");
    json::AppendQuoted(meta_.id, out);
    out->append(",\"object\":\"response\",\"created_at\":");
    AppendInt(meta_.created, out);
    out->append(",\"status\":\"");
    out->append(status);
    out->append("\",\"background\":false,\"error\":");
    if (finished_ && IsFailure(finish_)) {
      out->append("{\"code\":\"server_error\",\"message\":");
      json::AppendQuoted(failure_message_, out);
      out->push_back('}');
    } else {
      out->append("null");
    }
    out->append(",\"incomplete_details\":");
    out->append(status == "incomplete" ? "{\"reason\":\"max_output_tokens\"}" : "null");
    out->append(",\"instructions\":");
    json::DumpTo(echo.instructions, json::Style::kCompact, out);
    out->append(",\"max_output_tokens\":");
    if (echo.max_output_tokens) {
      AppendInt(*echo.max_output_tokens, out);
    } else {
      out->append("null");
    }
    out->append(",\"model\":");
    json::AppendQuoted(meta_.model, out);
    out->append(",\"output\":[");
    const auto& items = items_.items();
    if (usage) {  // created/in_progress carry no output yet
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out->push_back(',');
        std::string_view item_status = i < item_status_.size() && item_status_[i] ? item_status_[i] : "incomplete";
        AppendItem(items[i], item_status, /*with_content=*/true, out);
      }
    }
    out->append("],\"parallel_tool_calls\":");
    out->append(echo.parallel_tool_calls ? "true" : "false");
    out->append(",\"previous_response_id\":null,\"reasoning\":{\"effort\":");
    AppendQuotedOrNull(echo.reasoning_effort, out);
    out->append(meta_.echo.store ? ",\"summary\":null},\"store\":true,\"temperature\":"
                                 : ",\"summary\":null},\"store\":false,\"temperature\":");
    AppendOptionalDouble(echo.temperature, out);
    out->append(",\"text\":");
    if (echo.text.is_null()) {
      out->append("{\"format\":{\"type\":\"text\"}}");
    } else {
      json::DumpTo(echo.text, json::Style::kCompact, out);
    }
    out->append(",\"tool_choice\":");
    if (echo.tool_choice.is_null()) {
      out->append("\"auto\"");
    } else {
      json::DumpTo(echo.tool_choice, json::Style::kCompact, out);
    }
    out->append(",\"tools\":");
    if (echo.tools.is_null()) {
      out->append("[]");
    } else {
      json::DumpTo(echo.tools, json::Style::kCompact, out);
    }
    out->append(",\"top_p\":");
    AppendOptionalDouble(echo.top_p, out);
    out->append(",\"truncation\":\"disabled\",\"usage\":");
    if (usage) {
      AppendResponsesUsage(*usage, out);
    } else {
      out->append("null");
    }
    out->append(",\"user\":");
    AppendQuotedOrNull(echo.user, out);
    out->append(",\"metadata\":");
    if (echo.metadata.is_object()) {
      json::DumpTo(echo.metadata, json::Style::kCompact, out);
    } else {
      out->append("{}");
    }
    out->push_back('}');
  }

  static void AppendOptionalDouble(const std::optional<double>& v, std::string* out) {
    if (v) {
      AppendDouble(*v, out);
    } else {
      out->append("null");
    }
  }

  ResponseMeta meta_;
  OutputItems items_;
  std::vector<const char*> item_status_;  // final status per closed item
  int64_t sequence_ = 0;
  bool finished_ = false;
  FinishReason finish_ = FinishReason::kStop;
  std::string failure_message_;
};

}  // namespace

std::unique_ptr<ResponseWriter> MakeResponsesWriter(const ResponseMeta& meta) {
  return std::make_unique<ResponsesWriter>(meta);
}

}  // namespace ladle::frontend
