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
