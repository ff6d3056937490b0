// `ladle parse`: model output ids on stdin → the streaming parser's events as JSON lines.
//
//   ladle render --version v3.2 --ids < req.json   (the prompt; its tail says think or not)
//   ladle parse --version v3.2 --prompt-tail think < output_ids.json
//
// Ids are a JSON array or separated by whitespace/commas. They are pushed in chunks of
// --chunk ids (default: all at once); the events, joined, do not depend on the chunk size.
#include <fmt/format.h>

#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/frontend/model_version.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/json/json.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {
namespace {

struct ParseOpts {
  std::string version;
  std::string prompt_tail;
  std::string tokenizer = DefaultTokenizerPath();
  std::string finish = "stop";
  std::string tool_id_prefix;
  size_t chunk = 0;
};

Result<std::vector<tokenizer::TokenId>> ReadIds(std::string_view in) {
  std::vector<tokenizer::TokenId> ids;
  size_t i = 0;
  while (i < in.size()) {
    const char c = in[i];
    if (c >= '0' && c <= '9') {
      uint64_t v = 0;
      while (i < in.size() && in[i] >= '0' && in[i] <= '9') {
        v = v * 10 + static_cast<uint64_t>(in[i++] - '0');
        if (v > 0xFFFFFFFFull) return InvalidArgument(fmt::format("id out of range near byte {}", i));
      }
      ids.push_back(static_cast<tokenizer::TokenId>(v));
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',' || c == '[' || c == ']') {
      ++i;
    } else {
      return InvalidArgument(fmt::format("unexpected character '{}' at byte {}", c, i));
    }
  }
  return ids;
}

// JSON needs UTF-8; the parser passes on bytes that can never form a code point, so those
// print as U+FFFD here.
void AppendText(std::string_view s, std::string* out) {
  if (tokenizer::IsValidUtf8(s)) {
    json::AppendQuoted(s, out);
    return;
  }
  std::string clean;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + len <= s.size() && tokenizer::IsValidUtf8(s.substr(i, len))) {
      clean.append(s.substr(i, len));
      i += len;
    } else {
      clean.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  json::AppendQuoted(clean, out);
}

void AppendEventLine(const frontend::Event& e, std::string* out) {
  using K = frontend::Event::Kind;
  switch (e.kind) {
    case K::kReasoning:
    case K::kContent:
      *out += e.kind == K::kReasoning ? R"({"type":"reasoning","text":)" : R"({"type":"content","text":)";
      AppendText(e.text, out);
      break;
    case K::kToolCallStart:
      fmt::format_to(std::back_inserter(*out), R"({{"type":"tool_call_start","index":{},"id":)", e.tool_index);
      AppendText(e.tool_id, out);
      *out += R"(,"name":)";
      AppendText(e.tool_name, out);
      break;
    case K::kToolCallArgs:
      fmt::format_to(std::back_inserter(*out), R"({{"type":"tool_call_args","index":{},"text":)", e.tool_index);
      AppendText(e.text, out);
      break;
    case K::kToolCallEnd:
      fmt::format_to(std::back_inserter(*out), R"({{"type":"tool_call_end","index":{})", e.tool_index);
      break;
    case K::kFinish:
      fmt::format_to(std::back_inserter(*out), R"({{"type":"finish","reason":"{}","malformed":{})",
                     frontend::FinishReasonName(e.finish), e.malformed ? "true" : "false");
      break;
  }
  *out += "}\n";
}

int RunParse(const ParseOpts& o) {
  auto version = frontend::ParseModelVersion(o.version);
  if (!version.ok()) {
    std::cerr << version.status().message() << "\n";
    return 2;
  }
  auto finish = frontend::ParseFinishReason(o.finish);
  if (!finish.ok()) {
    std::cerr << finish.status().message() << "\n";
    return 2;
  }
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  auto ids = ReadIds(ss.str());
  if (!ids.ok()) {
    std::cerr << "parse: " << ids.status().message() << "\n";
    return 1;
  }
  auto base = tokenizer::Tokenizer::FromFile(o.tokenizer);
  if (!base.ok()) {
    LADLE_LOG_ERROR("parse.failed error=\"{}\"", base.status().ToString());
    return 1;
  }
  auto tok = frontend::TokenizerForVersion(*base, *version);
  if (!tok.ok()) {
    LADLE_LOG_ERROR("parse.failed error=\"{}\"", tok.status().ToString());
    return 1;
  }
  frontend::StreamParserOptions popts;
  popts.tool_id_prefix = o.tool_id_prefix;
  auto parser = frontend::StreamParser::Create(*version, *tok, o.prompt_tail == "think", popts);
  if (!parser.ok()) {
    LADLE_LOG_ERROR("parse.failed error=\"{}\"", parser.status().ToString());
    return 1;
  }
  std::string out;
  const std::span<const tokenizer::TokenId> all(*ids);
  const size_t step = o.chunk == 0 ? std::max<size_t>(all.size(), 1) : o.chunk;
  for (size_t at = 0; at < all.size(); at += step) {
    for (const auto& e : parser->Push(all.subspan(at, std::min(step, all.size() - at)))) AppendEventLine(e, &out);
  }
  for (const auto& e : parser->Finish(*finish)) AppendEventLine(e, &out);
  std::cout << out;
  if (parser->invalid_ids() > 0) LADLE_LOG_WARN("parse.invalid_ids count={}", parser->invalid_ids());
  return 0;
}

void RegisterParse(CLI::App& app, RunFn* run) {
  auto opts = std::make_shared<ParseOpts>();
  auto* cmd = app.add_subcommand("parse", "Read model output ids on stdin, print parser events as JSON lines");
  cmd->add_option("--version", opts->version, "model version: v3, r1, v3.1, v3.2-exp, v3.2, v4")->required();
  cmd->add_option("--prompt-tail", opts->prompt_tail,
                  "how the prompt ended: think (reasoning open) or nothink")
      ->required()
      ->check(CLI::IsMember({"think", "nothink"}));
  cmd->add_option("--tokenizer", opts->tokenizer, "DeepSeek-V3 tokenizer.json path")->capture_default_str();
  cmd->add_option("--finish", opts->finish, "why generation stopped: stop, length, cancelled, error")
      ->capture_default_str();
  cmd->add_option("--chunk", opts->chunk, "push this many ids at a time (0: all at once)")->capture_default_str();
  cmd->add_option("--tool-id-prefix", opts->tool_id_prefix, "tool call ids are this prefix + index (default random)");
  cmd->callback([run, opts] { *run = [opts] { return RunParse(*opts); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterParse);

}  // namespace ladle::app
