// Anthropic Messages: message_start, ping, content blocks (thinking, text, tool_use) opened,
// streamed and stopped one at a time with sequential indices, then message_delta and
// message_stop; or one message object. A thinking block always gets a signature_delta just
// before its stop, as the API sends one and clients echo it back.
#include <vector>

#include "ladle/frontend/response_writers.h"
#include "ladle/json/json.h"
#include "writer_common.h"

namespace ladle::frontend {
namespace {

using namespace writer_internal;
using Kind = OutputItem::Kind;

class MessagesWriter final : public ResponseWriter {
 public:
  explicit MessagesWriter(const ResponseMeta& meta) : ResponseWriter(meta.stream), meta_(meta) {}

  void AppendBegin(const Usage& prompt, std::string* out) override {
    if (!stream_) return;
    BeginNamedFrame("message_start", out);
    out->append("{\"type\":\"message_start\",\"message\":");
    AppendMessageHead(out);
    out->append("[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
    Usage start = prompt;
    start.completion_tokens = 0;
    AppendMessagesUsage(start, /*final=*/false, out);
    out->append("}}");
    EndFrame(out);
    // The API pings early in every stream; clients must tolerate it, so send it here too.
    BeginNamedFrame("ping", out);
    out->append("{\"type\":\"ping\"}");
    EndFrame(out);
  }

  void AppendEvent(const Event& e, int, std::string* out) override {
    if (finished_) return;
    switch (e.kind) {
      case Event::Kind::kReasoning:
      case Event::Kind::kContent: {
        if (e.text.empty()) return;
        Kind kind = e.kind == Event::Kind::kReasoning ? Kind::kReasoning : Kind::kText;
        OutputItem* block = blocks_.open();
        if (!block || block->kind != kind) block = &OpenBlock(kind, -1, "", "", out);
        block->text += e.text;
        if (kind == Kind::kReasoning) signature_.Update(e.text);
        if (!stream_) return;
        BeginDelta(out);
        if (kind == Kind::kReasoning) {
          out->append("{\"type\":\"thinking_delta\",\"thinking\":");
        } else {
          out->append("{\"type\":\"text_delta\",\"text\":");
        }
        json::AppendQuoted(e.text, out);
        out->append("}}");
        EndFrame(out);
        return;
      }
      case Event::Kind::kToolCallStart:
        OpenBlock(Kind::kToolCall, e.tool_index, e.tool_id, e.tool_name, out);
        return;
      case Event::Kind::kToolCallArgs: {
        if (e.text.empty()) return;
        OutputItem* block = blocks_.open();
        if (!block || block->kind != Kind::kToolCall || block->tool_index != e.tool_index) {
          // Arguments for a call that is not open: start it nameless rather than lose them.
          block = &OpenBlock(Kind::kToolCall, e.tool_index, "", "", out);
        }
        block->text += e.text;
        if (!stream_) return;
        BeginDelta(out);
        out->append("{\"type\":\"input_json_delta\",\"partial_json\":");
        json::AppendQuoted(e.text, out);
        out->append("}}");
        EndFrame(out);
        return;
      }
      case Event::Kind::kToolCallEnd: {
        OutputItem* block = blocks_.open();
        if (block && block->kind == Kind::kToolCall && block->tool_index == e.tool_index) CloseBlock(out);
        return;
      }
      case Event::Kind::kFinish:
        finished_ = true;
        finish_ = e.finish;
        if (e.malformed) malformed_ = true;
        if (IsFailure(e.finish)) {
          Fail(e, out);
          return;
        }
        stop_sequence_ = e.finish == FinishReason::kStop ? e.text : "";
        CloseBlock(out);
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
      Fail(e, out);
    }
    if (failed_) {
      // A stream already carries its error event, and nothing may follow it.
      if (!stream_) AppendAnthropicError(failure_message_, out);
      return;
    }
    if (!stream_) {
      AppendMessageHead(out);
      AppendContent(out);
      out->append(",\"stop_reason\":\"");
      out->append(StopReason());
      out->append("\",\"stop_sequence\":");
      AppendStopSequence(out);
      out->append(",\"usage\":");
      AppendMessagesUsage(usage, /*final=*/true, out);
      out->push_back('}');
      return;
    }
    BeginNamedFrame("message_delta", out);
    out->append("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"");
    out->append(StopReason());
    out->append("\",\"stop_sequence\":");
    AppendStopSequence(out);
    out->append("},\"usage\":");
    AppendMessagesUsage(usage, /*final=*/true, out);
    out->push_back('}');
    EndFrame(out);
    BeginNamedFrame("message_stop", out);
    out->append("{\"type\":\"message_stop\"}");
    EndFrame(out);
  }

 private:
  const char* StopReason() const {
    if (finish_ == FinishReason::kLength) return "max_tokens";
    // As in Chat: only a completely parsed call (the parser's kToolCalls) asks for tool results.
    if (finish_ == FinishReason::kToolCalls && blocks_.tool_count() > 0) return "tool_use";
    return stop_sequence_.empty() ? "end_turn" : "stop_sequence";
  }
  void AppendStopSequence(std::string* out) const {
    if (StopReason() == std::string_view("stop_sequence")) {
      json::AppendQuoted(stop_sequence_, out);
    } else {
      out->append("null");
    }
  }

  // The message object up to its content: `{"id":…,…,"content":`.
  void AppendMessageHead(std::string* out) const {
    out->append("{\"id\":");
    json::AppendQuoted(meta_.id, out);
    out->append(",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    json::AppendQuoted(meta_.model, out);
    out->append(",\"content\":");
  }

  // Closes the open block, then opens a new one with its content_block_start.
  OutputItem& OpenBlock(Kind kind, int tool_index, const std::string& id, const std::string& name, std::string* out) {
    CloseBlock(out);
    int index = static_cast<int>(blocks_.items().size());
    OutputItem& block = blocks_.Open(kind);
    block.tool_index = tool_index;
    block.name = name;
    if (kind == Kind::kToolCall) {
      if (!id.empty()) {
        block.call_id = id;
      } else {
        block.call_id = "toolu_";
        block.call_id += IdBody(meta_.id);
        block.call_id += '_';
        block.call_id += std::to_string(index);
      }
    }
    if (kind == Kind::kReasoning) signature_.Reset();
    if (!stream_) return block;
    BeginNamedFrame("content_block_start", out);
    out->append("{\"type\":\"content_block_start\",\"index\":");
    AppendInt(index, out);
    out->append(",\"content_block\":");
    switch (kind) {
      case Kind::kReasoning: out->append("{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"); break;
      case Kind::kText: out->append("{\"type\":\"text\",\"text\":\"\"}"); break;
      case Kind::kToolCall:
        out->append("{\"type\":\"tool_use\",\"id\":");
        json::AppendQuoted(block.call_id, out);
        out->append(",\"name\":");
        json::AppendQuoted(block.name, out);
        out->append(",\"input\":{}}");
        break;
    }
    out->push_back('}');
    EndFrame(out);
    return block;
  }

  void CloseBlock(std::string* out) {
    OutputItem* block = blocks_.open();
    if (!block) return;
    if (block->kind == Kind::kReasoning) {
      block->signature = signature_.Finish();
      if (stream_) {
        BeginDelta(out);
        out->append("{\"type\":\"signature_delta\",\"signature\":");
        json::AppendQuoted(block->signature, out);
        out->append("}}");
        EndFrame(out);
      }
    }
    if (stream_) {
      BeginNamedFrame("content_block_stop", out);
      out->append("{\"type\":\"content_block_stop\",\"index\":");
      AppendInt(blocks_.open_index(), out);
      out->push_back('}');
      EndFrame(out);
    }
    blocks_.CloseOpen();
  }

  // `event: content_block_delta … "delta":` for the open block; the caller adds the delta.
  void BeginDelta(std::string* out) const {
    BeginNamedFrame("content_block_delta", out);
    out->append("{\"type\":\"content_block_delta\",\"index\":");
    AppendInt(blocks_.open_index(), out);
    out->append(",\"delta\":");
  }

  void Fail(const Event& e, std::string* out) {
    failed_ = true;
    failure_message_ = FailureMessage(e);
    if (stream_) {
      BeginNamedFrame("error", out);
      AppendAnthropicError(failure_message_, out);
      EndFrame(out);
    } else {
      status_ = FailureStatus(e.finish);
    }
  }

  void AppendContent(std::string* out) const {
    out->push_back('[');
    const auto& blocks = blocks_.items();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const OutputItem& b = blocks[i];
      if (i) out->push_back(',');
      switch (b.kind) {
        case Kind::kReasoning:
          out->append("{\"type\":\"thinking\",\"thinking\":");
          json::AppendQuoted(b.text, out);
          out->append(",\"signature\":");
          json::AppendQuoted(b.signature, out);
          out->push_back('}');
          break;
        case Kind::kText:
          out->append("{\"type\":\"text\",\"text\":");
          json::AppendQuoted(b.text, out);
          out->push_back('}');
          break;
        case Kind::kToolCall:
          out->append("{\"type\":\"tool_use\",\"id\":");
          json::AppendQuoted(b.call_id, out);
          out->append(",\"name\":");
          json::AppendQuoted(b.name, out);
          out->append(",\"input\":");
          AppendToolInput(b.text, out);
          out->push_back('}');
          break;
      }
    }
    out->push_back(']');
  }

  // `input` must be an object. Arguments cut short by max_tokens (or otherwise not an object)
  // become {} here; the stream carried the raw fragments for clients that want them.
  static void AppendToolInput(std::string_view args, std::string* out) {
    auto parsed = json::Parse(args);
    if (parsed.ok() && parsed->is_object()) {
      json::DumpTo(*parsed, json::Style::kCompact, out);
    } else {
      out->append("{}");
    }
  }

  ResponseMeta meta_;
  OutputItems blocks_;
  ThinkingSignature signature_;
  bool finished_ = false;
  bool failed_ = false;
  FinishReason finish_ = FinishReason::kStop;
  std::string stop_sequence_;
  std::string failure_message_;
};

}  // namespace

std::unique_ptr<ResponseWriter> MakeMessagesWriter(const ResponseMeta& meta) {
  return std::make_unique<MessagesWriter>(meta);
}

}  // namespace ladle::frontend
