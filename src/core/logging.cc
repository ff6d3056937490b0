#include "ladle/core/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdio>

namespace ladle::log {
namespace {

// %* in JSON mode: the message, escaped so every line stays one valid JSON object whatever
// the message contains (quotes, backslashes, control characters from user input).
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static const char* kHex = "0123456789abcdef";
    for (char ch : std::string_view(msg.payload.data(), msg.payload.size())) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(ch);
      } else if (c < 0x20) {
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        dest.append(esc, esc + sizeof(esc));
      } else {
        dest.push_back(ch);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonEscapedMessage>(); }
};

}  // namespace

void Init(Format format, spdlog::level::level_enum level, spdlog::sink_ptr sink) {
  // Not registered by name, so Init can run again (tests, re-configuration) without clashing.
  auto logger = std::make_shared<spdlog::logger>(
      "ladle", sink ? sink : std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  spdlog::set_default_logger(logger);
  if (format == Format::kJson) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,"msg":"%*"})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(level);
  spdlog::set_level(level);
}

Format ParseFormat(std::string_view s) { return s == "json" ? Format::kJson : Format::kText; }

spdlog::level::level_enum ParseLevel(std::string_view s) {
  if (s == "debug") return spdlog::level::debug;
  if (s == "warn") return spdlog::level::warn;
  if (s == "error") return spdlog::level::err;
  return spdlog::level::info;
}

void CheckFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "CHECK failed: %s at %s:%d\n", cond, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ladle::log
