// Helpers for the response-writer tests: event builders, a writer driver, and an SSE splitter
// that parses every frame's JSON with json::Parse (a frame that does not parse fails the test).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/frontend/response_writers.h"
#include "ladle/json/json.h"

namespace ladle::frontend::writer_test {

inline Event Reasoning(std::string t) {
  Event e;
  e.kind = Event::Kind::kReasoning;
  e.text = std::move(t);
  return e;
}
inline Event Content(std::string t) {
  Event e;
  e.kind = Event::Kind::kContent;
  e.text = std::move(t);
  return e;
}
inline Event ToolStart(int index, std::string id, std::string name) {
  Event e;
  e.kind = Event::Kind::kToolCallStart;
  e.tool_index = index;
  e.tool_id = std::move(id);
  e.tool_name = std::move(name);
  return e;
}
inline Event ToolArgs(int index, std::string t) {
  Event e;
  e.kind = Event::Kind::kToolCallArgs;
  e.tool_index = index;
  e.text = std::move(t);
  return e;
}
inline Event ToolEnd(int index) {
  Event e;
  e.kind = Event::Kind::kToolCallEnd;
  e.tool_index = index;
  return e;
}
inline Event Finish(FinishReason r, std::string text = "", bool malformed = false) {
  Event e;
  e.kind = Event::Kind::kFinish;
  e.finish = r;
  e.text = std::move(text);
  e.malformed = malformed;
  return e;
}

// The representative sequences every writer is tested with.
inline std::vector<Event> ReasoningThenText() {
  return {Reasoning("Think "), Reasoning("hard."), Content("Hel"), Content("lo \"you\"\n"), Finish(FinishReason::kStop)};
}
inline std::vector<Event> TextThenTwoTools() {
  return {Content("Checking."),
          ToolStart(0, "call_a", "get_weather"),
          ToolArgs(0, "{\"city\": "),
          ToolArgs(0, "\"Par"),
          ToolArgs(0, "is\"}"),
          ToolEnd(0),
          ToolStart(1, "call_b", "get_time"),
          ToolArgs(1, "{\"tz\":"),
          ToolArgs(1, " \"UTC\"}"),
          ToolEnd(1),
          Finish(FinishReason::kToolCalls)};
}
inline std::vector<Event> MaxTokens() { return {Reasoning("Hmm"), Content("The answer"), Finish(FinishReason::kLength)}; }
inline std::vector<Event> Malformed() {
  return {Content("<\xEF\xBD\x9C" "DSML\xEF\xBD\x9Cinvoke name=\"x\">oops"), Finish(FinishReason::kStop, "", true)};
}

inline Usage TestUsage() { return Usage{.prompt_tokens = 50, .completion_tokens = 20, .cached_tokens = 32, .reasoning_tokens = 7}; }

inline ResponseMeta TestMeta(Api api, bool stream) {
  ResponseMeta m;
  m.api = api;
  m.id = api == Api::kChat ? "chatcmpl-abc" : api == Api::kResponses ? "resp_abc" : "msg_abc";
  m.model = "deepseek-v3.2";
  m.created = 1700000000;
  m.stream = stream;
  m.include_usage = true;
  m.system_fingerprint = "fp_test";
  return m;
}

// Begin, every event (choice 0), End: all bytes in order.
inline std::string Drive(ResponseWriter& w, const std::vector<Event>& events, const Usage& usage = TestUsage()) {
  std::string out = w.Begin(usage);
  for (const Event& e : events) out += w.OnEvent(e);
  out += w.End(usage);
  return out;
}
inline std::string Drive(const ResponseMeta& meta, const std::vector<Event>& events, const Usage& usage = TestUsage()) {
  auto w = MakeResponseWriter(meta);
  return Drive(*w, events, usage);
}

struct Frame {
  std::string event;  // "" for unnamed (Chat) frames
  std::string data;   // raw data text
  json::Value json;   // parsed data (null for [DONE])
};

// Splits SSE bytes into frames; every frame must be `[event: X\n]data: …\n\n` with one data
// line, and every data except [DONE] must parse.
inline std::vector<Frame> SplitSse(std::string_view bytes) {
  std::vector<Frame> frames;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t end = bytes.find("\n\n", pos);
    if (end == std::string_view::npos) {
      ADD_FAILURE() << "unterminated frame: " << bytes.substr(pos);
      break;
    }
    std::string_view frame = bytes.substr(pos, end - pos);
    pos = end + 2;
    Frame f;
    if (frame.starts_with("event: ")) {
      size_t nl = frame.find('\n');
      f.event = std::string(frame.substr(7, nl - 7));
      frame = frame.substr(nl + 1);
    }
    if (!frame.starts_with("data: ") || frame.find('\n') != std::string_view::npos) {
      ADD_FAILURE() << "bad frame: " << frame;
      continue;
    }
    f.data = std::string(frame.substr(6));
    if (f.data != "[DONE]") {
      auto parsed = json::Parse(f.data);
      if (!parsed.ok()) {
        ADD_FAILURE() << "frame does not parse: " << f.data;
      } else {
        f.json = std::move(parsed).value();
      }
    }
    frames.push_back(std::move(f));
  }
  return frames;
}

inline json::Value ParseBody(std::string_view body) {
  auto parsed = json::Parse(body);
  EXPECT_TRUE(parsed.ok()) << "body does not parse: " << body;
  return parsed.ok() ? std::move(parsed).value() : json::Value();
}

// Member access for tests: v["a"]["b"] as a chain of Find calls; a missing key is a failure
// reported once and reads as null from then on.
inline const json::Value& At(const json::Value& v, std::string_view key) {
  static const json::Value kNull;
  const json::Value* m = v.Find(key);
  if (!m) {
    ADD_FAILURE() << "missing key '" << key << "' in " << json::Dump(v);
    return kNull;
  }
  return *m;
}
inline const json::Value& At(const json::Value& v, size_t i) {
  static const json::Value kNull;
  if (!v.is_array() || i >= v.as_array().size()) {
    ADD_FAILURE() << "no element " << i << " in " << json::Dump(v);
    return kNull;
  }
  return v.as_array()[i];
}
inline std::string Str(const json::Value& v) { return v.as_string(); }
inline int64_t Int(const json::Value& v) {
  auto r = v.as_int64();
  EXPECT_TRUE(r.ok()) << json::Dump(v);
  return r.ok() ? *r : -1;
}
// The object's keys in order, "a,b,c".
inline std::string Keys(const json::Value& v) {
  std::string k;
  for (const auto& [name, value] : v.as_object()) {
    if (!k.empty()) k += ',';
    k += name;
  }
  return k;
}

}  // namespace ladle::frontend::writer_test
