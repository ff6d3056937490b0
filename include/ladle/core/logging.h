// Structured logging over spdlog. Lines are either human text or one JSON object per line
// (`--log-format json`), always with a timestamp, level and event name, so log shippers can
// index them. CHECK is for invariants only: it aborts with the failed condition.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string_view>

namespace ladle::log {

enum class Format { kText, kJson };

// Configures the process-wide logger (stderr, or `sink` when given: tests). Safe to call
// more than once.
void Init(Format format, spdlog::level::level_enum level = spdlog::level::info, spdlog::sink_ptr sink = nullptr);
// Parses "text"/"json" and "debug"/"info"/"warn"/"error"; unknown values fall back to defaults.
Format ParseFormat(std::string_view s);
spdlog::level::level_enum ParseLevel(std::string_view s);

// The message should be an event name followed by key=value pairs, e.g.
//   LADLE_LOG_INFO("tokenizer.loaded vocab={} added={} ms={:.1f}", ...);
// In JSON mode the whole message goes into "msg"; keys stay greppable in both modes.
#define LADLE_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LADLE_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LADLE_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LADLE_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)

[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);

}  // namespace ladle::log

#define LADLE_CHECK(cond) \
  do {                    \
    if (!(cond)) ::ladle::log::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)
