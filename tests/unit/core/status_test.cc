#include <gtest/gtest.h>

#include "ladle/core/result.h"
#include "ladle/core/status.h"

namespace ladle {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  LADLE_ASSIGN_OR_RETURN(int h, Half(x));
  LADLE_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status Check(int x) {
  LADLE_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(Status, CodesNamesAndHttp) {
  EXPECT_TRUE(Status().ok());
  Status s = NotFound("no such model");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: no such model");
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(StatusCodeName(StatusCode::kDataLoss), "DataLoss");
  EXPECT_EQ(s.WithContext("loading").message(), "loading: no such model");
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(Quarter(8).value(), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Check(4).ok());
  EXPECT_FALSE(Check(3).ok());
}

}  // namespace
}  // namespace ladle

#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "ladle/core/logging.h"
#include "ladle/json/json.h"

namespace ladle {
namespace {

TEST(Logging, JsonLinesStayValidJson) {
  std::ostringstream out;
  log::Init(log::Format::kJson, spdlog::level::info, std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  LADLE_LOG_INFO("event key=\"quoted\" path=C:\\dir\nnext {}", 1);
  std::string line = out.str();
  ASSERT_FALSE(line.empty());
  line.pop_back();  // newline
  auto v = json::Parse(line);
  ASSERT_TRUE(v.ok()) << line;
  EXPECT_EQ(v->Find("msg")->as_string(), "event key=\"quoted\" path=C:\\dir\nnext 1");
  EXPECT_EQ(v->Find("level")->as_string(), "info");
  log::Init(log::Format::kText);
}

}  // namespace
}  // namespace ladle
