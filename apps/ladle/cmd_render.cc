// `ladle render`: a protocol request body on stdin → the DeepSeek prompt of one model version,
// as text (byte for byte, no newline added) or, with --ids, as token ids.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {
namespace {

struct RenderOpts {
  std::string version;
  std::string api = "chat";
  std::string tokenizer = DefaultTokenizerPath();
  bool ids = false;
  bool keep_reasoning = false;
};

// Errors after adaptation (a conversation the version cannot take) are request errors too, so
// they are reported in the protocol's own error shape.
void PrintProtocolError(frontend::Api api, const Status& status) {
  frontend::ApiError e;
  e.status = status.code();
  e.message = status.message();
  std::cerr << frontend::ErrorJson(api, e) << "\n";
}

int RunRender(const RenderOpts& o) {
  auto version = frontend::ParseModelVersion(o.version);
  if (!version.ok()) {
    std::cerr << version.status().message() << "\n";
    return 2;
  }
  auto api = frontend::ParseApiName(o.api);
  if (!api) {
    std::cerr << fmt::format("unknown api '{}' (chat, responses, messages)\n", o.api);
    return 2;
  }
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  const std::string body = ss.str();

  const auto t0 = std::chrono::steady_clock::now();
  frontend::Adapted adapted = frontend::Adapt(*api, body);
  if (!adapted.ok()) {
    std::cerr << frontend::ErrorJson(*api, adapted.error) << "\n";
    return 1;
  }
  frontend::RenderOptions ropts;
  ropts.drop_thinking = !o.keep_reasoning;
  auto prompt = frontend::RenderPrompt(*adapted.request, *version, ropts);
  if (!prompt.ok()) {
    PrintProtocolError(*api, prompt.status());
    return 1;
  }
  const double render_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!o.ids) {
    std::cout << frontend::PromptText(*prompt);
    std::cout.flush();
    LADLE_LOG_INFO("render.done version={} api={} bytes={} ends_in_thinking={} ms={:.3f}", o.version, o.api,
                   prompt->text.size(), prompt->ends_in_thinking, render_ms);
    return 0;
  }

  auto base = tokenizer::Tokenizer::FromFile(o.tokenizer);
  if (!base.ok()) {
    LADLE_LOG_ERROR("render.failed error=\"{}\"", base.status().ToString());
    return 1;
  }
  auto tok = frontend::TokenizerForVersion(*base, *version);
  if (!tok.ok()) {
    LADLE_LOG_ERROR("render.failed error=\"{}\"", tok.status().ToString());
    return 1;
  }
  const auto t1 = std::chrono::steady_clock::now();
  auto enc = frontend::EncodePrompt(*prompt, *tok);
  if (!enc.ok()) {
    LADLE_LOG_ERROR("render.failed error=\"{}\"", enc.status().ToString());
    return 1;
  }
  const double encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  std::string out;
  out.reserve(enc->ids.size() * 7 + 2);
  out += '[';
  for (size_t i = 0; i < enc->ids.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? "," : "", enc->ids[i]);
  out += "]\n";
  std::cout << out;
  LADLE_LOG_INFO("render.done version={} api={} tokens={} special={} ends_in_thinking={} render_ms={:.3f} "
                 "encode_ms={:.3f}",
                 o.version, o.api, enc->ids.size(), enc->special_positions.size(), enc->ends_in_thinking, render_ms,
                 encode_ms);
  return 0;
}

void RegisterRender(CLI::App& app, RunFn* run) {
  auto opts = std::make_shared<RenderOpts>();
  auto* cmd = app.add_subcommand("render", "Read a request body on stdin, print the model version's prompt");
  cmd->add_option("--version", opts->version, "model version: v3, r1, v3.1 (v3.2-exp), v3.2, v4")->required();
  cmd->add_option("--api", opts->api, "request protocol: chat, responses or messages")
      ->capture_default_str()
      ->check(CLI::IsMember({"chat", "responses", "messages"}));
  cmd->add_flag("--ids", opts->ids, "print the token ids as a JSON array instead of the text");
  cmd->add_option("--tokenizer", opts->tokenizer, "tokenizer.json path (for --ids)")->capture_default_str();
  cmd->add_flag("--keep-reasoning", opts->keep_reasoning,
                "V3.2/V4: keep reasoning (and developer turns) from before the last user turn");
  cmd->callback([run, opts] { *run = [opts] { return RunRender(*opts); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterRender);

}  // namespace ladle::app
