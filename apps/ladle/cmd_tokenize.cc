// `ladle tokenize` and `ladle detokenize`: the tokenizer from the shell.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <sstream>

#include "commands.h"
#include "ladle/core/logging.h"
#include "ladle/tokenizer/tokenizer.h"

namespace ladle::app {

std::string DefaultTokenizerPath() {
  if (const char* env = std::getenv("LADLE_TOKENIZER")) return env;
  const char* cache = std::getenv("LADLE_CACHE");
  return fmt::format("{}/tokenizers/deepseek-v3/tokenizer.json", cache ? cache : LADLE_DEFAULT_CACHE_DIR);
}

namespace {

std::string ReadStdin() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

Result<tokenizer::Tokenizer> Load(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = tokenizer::Tokenizer::FromFile(path);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (tok.ok()) LADLE_LOG_INFO("tokenizer.load path={} vocab={} ms={:.1f}", path, tok->VocabSize(), ms);
  return tok;
}

}  // namespace

namespace {

void RegisterTokenize(CLI::App& app, RunFn* run) {
  struct Opts {
    std::string path = DefaultTokenizerPath();
    bool plain = false, trusted = false, json = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("tokenize", "Read text on stdin, print token ids");
  cmd->add_option("--tokenizer", opts->path, "tokenizer.json path")->capture_default_str();
  auto* plain = cmd->add_flag("--plain", opts->plain, "byte-level BPE only: added-token text stays ordinary (default)");
  cmd->add_flag("--trusted", opts->trusted, "match added tokens as Hugging Face does (template text only)")
      ->excludes(plain);
  cmd->add_flag("--json", opts->json, "print a JSON array instead of one id per line");
  cmd->callback([run, opts] {
    *run = [opts] {
      auto tok = Load(opts->path);
      if (!tok.ok()) {
        LADLE_LOG_ERROR("tokenize.failed error=\"{}\"", tok.status().ToString());
        return 1;
      }
      const std::string text = ReadStdin();
      const auto t0 = std::chrono::steady_clock::now();
      auto ids = opts->trusted ? tok->EncodeTrusted(text) : tok->EncodePlain(text);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::string out;
      out.reserve(ids.size() * 7 + 2);
      if (opts->json) {
        out += '[';
        for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? "," : "", ids[i]);
        out += "]\n";
      } else {
        for (auto id : ids) fmt::format_to(std::back_inserter(out), "{}\n", id);
      }
      std::cout << out;
      LADLE_LOG_INFO("tokenize.done bytes={} tokens={} ms={:.3f} mode={}", text.size(), ids.size(), ms,
                     opts->trusted ? "trusted" : "plain");
      return 0;
    };
  });
}

void RegisterDetokenize(CLI::App& app, RunFn* run) {
  auto path = std::make_shared<std::string>(DefaultTokenizerPath());
  auto* cmd = app.add_subcommand("detokenize", "Read token ids on stdin (whitespace, commas or a JSON array), print text");
  cmd->add_option("--tokenizer", *path, "tokenizer.json path")->capture_default_str();
  cmd->callback([run, path] {
    *run = [path] {
      auto tok = Load(*path);
      if (!tok.ok()) {
        LADLE_LOG_ERROR("detokenize.failed error=\"{}\"", tok.status().ToString());
        return 1;
      }
      std::string in = ReadStdin();
      std::vector<tokenizer::TokenId> ids;
      size_t i = 0;
      while (i < in.size()) {
        char c = in[i];
        if (c >= '0' && c <= '9') {
          unsigned long v = 0;
          while (i < in.size() && in[i] >= '0' && in[i] <= '9' && v <= 0xFFFFFFFFul) v = v * 10 + (in[i++] - '0');
          if (v > 0xFFFFFFFFul) {
            LADLE_LOG_ERROR("detokenize.failed error=\"id out of range\"");
            return 1;
          }
          ids.push_back(static_cast<tokenizer::TokenId>(v));
        } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',' || c == '[' || c == ']') {
          ++i;
        } else {
          LADLE_LOG_ERROR("detokenize.failed error=\"unexpected character '{}' at byte {}\"", c, i);
          return 1;
        }
      }
      auto text = tok->Decode(ids);
      if (!text.ok()) {
        LADLE_LOG_ERROR("detokenize.failed error=\"{}\"", text.status().ToString());
        return 1;
      }
      std::cout << *text;
      return 0;
    };
  });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterTokenize);
LADLE_REGISTER_COMMAND(RegisterDetokenize);

}  // namespace ladle::app
