// Helpers shared by the request-adapter tests (adapter_*_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "ladle/frontend/request_adapters.h"
#include "ladle/json/json.h"

namespace ladle::frontend::testing {

// The adapted request, failing the test (with the error) when adapting failed.
inline const Request& Ok(const Adapted& a) {
  EXPECT_TRUE(a.ok()) << "adapter error: " << a.error.message << " (param " << a.error.param << ")";
  static const Request empty;
  return a.ok() ? *a.request : empty;
}

// Asserts a 400-style failure with the given param and code (OpenAI APIs).
inline ::testing::AssertionResult IsError(const Adapted& a, std::string_view param, std::string_view code,
                                          int status = 400) {
  if (a.ok()) return ::testing::AssertionFailure() << "adapted, but an error was expected";
  if (a.error.http_status() != status || a.error.param != param || a.error.code != code) {
    return ::testing::AssertionFailure()
           << "got status " << a.error.http_status() << " param '" << a.error.param << "' code '" << a.error.code
           << "' message: " << a.error.message;
  }
  if (a.error.message.empty()) return ::testing::AssertionFailure() << "empty error message";
  return ::testing::AssertionSuccess();
}

inline std::string PartText(const Message& m, size_t i) {
  return i < m.content.size() ? m.content[i].text : std::string("<missing part>");
}

inline std::string PyDump(const json::Value& v) { return json::Dump(v, json::Style::kPython); }

// Structural equality of two adapted conversations (for cross-API parity tests).
inline void ExpectSameMessages(const std::vector<Message>& a, const std::vector<Message>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    EXPECT_EQ(a[i].role, b[i].role);
    EXPECT_EQ(a[i].content_null, b[i].content_null);
    ASSERT_EQ(a[i].content.size(), b[i].content.size());
    for (size_t j = 0; j < a[i].content.size(); ++j) {
      EXPECT_EQ(a[i].content[j].kind, b[i].content[j].kind);
      EXPECT_EQ(a[i].content[j].text, b[i].content[j].text);
      EXPECT_EQ(a[i].content[j].image.url, b[i].content[j].image.url);
      EXPECT_EQ(a[i].content[j].image.media_type, b[i].content[j].image.media_type);
    }
    EXPECT_EQ(a[i].reasoning, b[i].reasoning);
    ASSERT_EQ(a[i].tool_calls.size(), b[i].tool_calls.size());
    for (size_t j = 0; j < a[i].tool_calls.size(); ++j) {
      EXPECT_EQ(a[i].tool_calls[j].id, b[i].tool_calls[j].id);
      EXPECT_EQ(a[i].tool_calls[j].name, b[i].tool_calls[j].name);
      EXPECT_EQ(a[i].tool_calls[j].arguments, b[i].tool_calls[j].arguments);
    }
    EXPECT_EQ(a[i].tool_call_id, b[i].tool_call_id);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].is_error, b[i].is_error);
  }
}

inline void ExpectSameTools(const std::vector<Tool>& a, const std::vector<Tool>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].description, b[i].description);
    EXPECT_EQ(a[i].has_description, b[i].has_description);
    EXPECT_EQ(PyDump(a[i].parameters), PyDump(b[i].parameters));
    EXPECT_EQ(a[i].strict, b[i].strict);
  }
}

}  // namespace ladle::frontend::testing
