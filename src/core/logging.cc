#include "ladle/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdio>

namespace ladle::log {

void Init(Format format, spdlog::level::level_enum level) {
  // Not registered by name, so Init can run again (tests, re-configuration) without clashing.
  auto logger = std::make_shared<spdlog::logger>("ladle", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  spdlog::set_default_logger(logger);
  if (format == Format::kJson) {
    // %v is the event text; escaping of quotes in it is the caller's business (events are
    // identifiers plus key=value pairs without quotes).
    logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,"msg":"%v"})",
                        spdlog::pattern_time_type::utc);
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
