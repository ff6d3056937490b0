// Writes the response writers' output for a fixed set of event sequences, for every API, both
// streaming and not, into a directory that check_writers.mjs then feeds to the official SDKs.
//
//   gen_writer_samples <out_dir>
//
// Layout: <out_dir>/<scenario>.<api>.sse and <scenario>.<api>.json, plus manifest.json listing
// each file with the HTTP status it is served with. The scenarios' expected results live in
// check_writers.mjs, written independently of the writers.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ladle/frontend/response_writers.h"
#include "ladle/json/json.h"

namespace {

using ladle::frontend::Api;
using ladle::frontend::Event;
using ladle::frontend::FinishReason;
using ladle::frontend::Usage;

Event Reasoning(std::string t) {
  Event e;
  e.kind = Event::Kind::kReasoning;
  e.text = std::move(t);
  return e;
}
Event Content(std::string t) {
  Event e;
  e.kind = Event::Kind::kContent;
  e.text = std::move(t);
  return e;
}
Event ToolStart(int index, std::string id, std::string name) {
  Event e;
  e.kind = Event::Kind::kToolCallStart;
  e.tool_index = index;
  e.tool_id = std::move(id);
  e.tool_name = std::move(name);
  return e;
}
Event ToolArgs(int index, std::string t) {
  Event e;
  e.kind = Event::Kind::kToolCallArgs;
  e.tool_index = index;
  e.text = std::move(t);
  return e;
}
Event ToolEnd(int index) {
  Event e;
  e.kind = Event::Kind::kToolCallEnd;
  e.tool_index = index;
  return e;
}
Event Finish(FinishReason r, std::string text = "", bool malformed = false) {
  Event e;
  e.kind = Event::Kind::kFinish;
  e.finish = r;
  e.text = std::move(text);
  e.malformed = malformed;
  return e;
}

struct Scenario {
  std::string name;
  std::vector<std::pair<int, Event>> steps;  // (choice, event)
  Usage usage;
  int n = 1;
  bool chat_only = false;
  int top_logprobs = -1;  // >= 0: the request asked for logprobs
};

Event WithLogprobs(Event e, std::vector<ladle::frontend::TokenLogprob> lps) {
  e.logprobs = std::move(lps);
  return e;
}
ladle::frontend::TokenLogprob Lp(std::string bytes, float v, std::string alt, float alt_v) {
  return {.bytes = bytes, .logprob = v, .top = {{.bytes = bytes, .logprob = v}, {.bytes = alt, .logprob = alt_v}}};
}

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> s;
  s.push_back({"reasoning_text",
               {{0, Reasoning("The user greets me. ")},
                {0, Reasoning("I should answer")},
                {0, Reasoning(" politely.")},
                {0, Content("Hello")},
                {0, Content(", w\xC3\xB6rld! ")},
                {0, Content("\"quoted\"\n\\ \xF0\x9F\x98\x80 done.")},
                {0, Finish(FinishReason::kStop)}},
               {42, 17, 32, 6}});
  s.push_back({"text_tools",
               {{0, Content("Let me check both.")},
                {0, ToolStart(0, "call_weather_1", "get_weather")},
                {0, ToolArgs(0, "{\"city\": ")},
                {0, ToolArgs(0, "\"Par")},
                {0, ToolArgs(0, "is\", \"unit\"")},
                {0, ToolArgs(0, ": \"celsius\"}")},
                {0, ToolEnd(0)},
                {0, ToolStart(1, "", "get_time")},  // no id: the writer derives one
                {0, ToolArgs(1, "{\"tz\":")},
                {0, ToolArgs(1, " \"Europe/Paris\"}")},
                {0, ToolEnd(1)},
                {0, Finish(FinishReason::kToolCalls)}},
               {100, 40, 0, 0}});
  s.push_back({"reasoning_tool",
               {{0, Reasoning("Need the weather.")},
                {0, ToolStart(0, "call_oslo", "get_weather")},
                {0, ToolArgs(0, "{\"city\":\"Oslo\"}")},
                {0, ToolEnd(0)},
                {0, Finish(FinishReason::kToolCalls)}},
               {30, 12, 0, 4}});
  s.push_back({"max_tokens",
               {{0, Reasoning("Thinking hard")}, {0, Content("The answer is")}, {0, Finish(FinishReason::kLength)}},
               {10, 8, 0, 3}});
  s.push_back({"tool_truncated",
               {{0, ToolStart(0, "call_cut", "get_weather")},
                {0, ToolArgs(0, "{\"city\": \"Ber")},
                {0, Finish(FinishReason::kLength)}},
               {10, 8, 0, 0}});
  s.push_back({"malformed",
               {{0, Content("Calling <\xEF\xBD\x9C" "DSML\xEF\xBD\x9Cinvoke name=\"x\"> broken")},
                {0, Finish(FinishReason::kStop, "", /*malformed=*/true)}},
               {5, 9, 0, 0}});
  // A call the parser had to close early: its name was out, its arguments broke.
  s.push_back({"broken_call",
               {{0, ToolStart(0, "call_broken", "get_weather")},
                {0, ToolArgs(0, "{\"city\":")},
                {0, ToolEnd(0)},
                {0, Finish(FinishReason::kStop, "", /*malformed=*/true)}},
               {6, 4, 0, 0}});
  s.push_back({"stop_sequence", {{0, Content("one two")}, {0, Finish(FinishReason::kStop, "three")}}, {5, 3, 0, 0}});
  s.push_back({"error", {{0, Content("partial")}, {0, Finish(FinishReason::kError, "engine crashed")}}, {5, 1, 0, 0}});
  Scenario n2{"chat_n2",
              {{0, Content("A")},
               {1, Content("B")},
               {1, ToolStart(0, "call_b", "lookup")},
               {0, Content("a")},
               {1, ToolArgs(0, "{\"q\":1}")},
               {1, ToolEnd(0)},
               {0, Finish(FinishReason::kStop)},
               {1, Finish(FinishReason::kToolCalls)}},
              {7, 6, 0, 0}};
  n2.n = 2;
  n2.chat_only = true;
  s.push_back(std::move(n2));
  // Logprobs (k = 2) on reasoning and content, one token a partial code point ("😀" in two).
  Scenario lp{"logprobs",
              {{0, WithLogprobs(Reasoning("Hm"), {Lp("Hm", -0.5f, "Ok", -1.5f)})},
               {0, WithLogprobs(Content("Hi "), {Lp("Hi", -0.25f, "Hey", -2.0f), Lp(" ", -0.125f, "!", -3.0f)})},
               {0, WithLogprobs(Content("\xF0\x9F\x98\x80"),
                                {Lp("\xF0\x9F", -1.0f, "\xF0", -4.0f), Lp("\x98\x80", 0.0f, "\x98", -5.0f)})},
               {0, Finish(FinishReason::kStop)}},
              {4, 5, 0, 1}};
  lp.top_logprobs = 2;
  s.push_back(std::move(lp));
  return s;
}

const char* ApiName(Api api) {
  return api == Api::kChat ? "chat" : api == Api::kResponses ? "responses" : "messages";
}

ladle::frontend::ResponseMeta Meta(Api api, const Scenario& sc, bool stream) {
  ladle::frontend::ResponseMeta m;
  m.api = api;
  m.id = api == Api::kChat ? "chatcmpl-" + sc.name : api == Api::kResponses ? "resp_" + sc.name : "msg_" + sc.name;
  m.model = "deepseek-v3.2";
  m.created = 1700000000;
  m.stream = stream;
  m.include_usage = true;
  m.system_fingerprint = "fp_ladle";
  m.n = sc.n;
  m.top_logprobs = sc.top_logprobs;
  m.echo.temperature = 0.6;
  m.echo.max_output_tokens = 256;
  return m;
}

bool WriteFile(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out_dir>\n", argv[0]);
    return 2;
  }
  std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  ladle::json::Value::Array manifest;
  for (const Scenario& sc : Scenarios()) {
    for (Api api : {Api::kChat, Api::kResponses, Api::kMessages}) {
      if (sc.chat_only && api != Api::kChat) continue;
      for (bool stream : {true, false}) {
        auto w = ladle::frontend::MakeResponseWriter(Meta(api, sc, stream));
        Usage prompt = sc.usage;
        std::string bytes = w->Begin(prompt);
        for (const auto& [choice, e] : sc.steps) bytes += w->OnEvent(e, choice);
        bytes += w->End(sc.usage);
        std::string file = sc.name + "." + ApiName(api) + (stream ? ".sse" : ".json");
        if (!WriteFile(dir / file, bytes)) {
          std::fprintf(stderr, "cannot write %s\n", (dir / file).c_str());
          return 1;
        }
        manifest.push_back(ladle::json::Value::MakeObject({
            {"scenario", ladle::json::Value::String(sc.name)},
            {"api", ladle::json::Value::String(ApiName(api))},
            {"stream", ladle::json::Value::Bool(stream)},
            {"file", ladle::json::Value::String(file)},
            {"status", ladle::json::Value::Int(w->http_status())},
            {"content_type", ladle::json::Value::String(std::string(w->content_type()))},
        }));
      }
    }
  }
  if (!WriteFile(dir / "manifest.json", ladle::json::Dump(ladle::json::Value::MakeArray(std::move(manifest)),
                                                          ladle::json::Style::kPython))) {
    std::fprintf(stderr, "cannot write manifest\n");
    return 1;
  }
  return 0;
}
