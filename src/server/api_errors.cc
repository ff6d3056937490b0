#include "api_errors.h"

namespace ladle::server {

using frontend::Api;
using frontend::ApiError;

namespace {

std::string TypeFor(Api api, int http) {
  if (api == Api::kMessages) {
    switch (http) {
      case 400: return "invalid_request_error";
      case 401: return "authentication_error";
      case 403: return "permission_error";
      case 404: return "not_found_error";
      case 413: return "request_too_large";
      case 429: return "rate_limit_error";
      case 503:
      case 529: return "overloaded_error";
      case 504: return "timeout_error";
      default: return http < 500 ? "invalid_request_error" : "api_error";
    }
  }
  switch (http) {
    case 401: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return http < 500 ? "invalid_request_error" : "server_error";
  }
}

}  // namespace

ApiError ErrorFor(Api api, const Status& status, std::string code) {
  ApiError e;
  e.status = status.code();
  // Anthropic answers an overloaded server with 529, not 429 (its rate limits are per key).
  if (api == Api::kMessages && status.code() == StatusCode::kResourceExhausted) e.status = StatusCode::kOverloaded;
  e.type = TypeFor(api, e.http_status());
  e.message = status.message();
  e.code = std::move(code);
  return e;
}

ApiError Unauthorized(Api api) {
  return ErrorFor(api, Status(StatusCode::kUnauthenticated, "invalid or missing API key"), "invalid_api_key");
}

ApiError ModelNotFound(Api api, std::string_view asked) {
  return ErrorFor(api, NotFound("The model `" + std::string(asked) + "` does not exist."), "model_not_found");
}

ApiError Overloaded(Api api) {
  return ErrorFor(api, ResourceExhausted("the server is overloaded; retry later"), "rate_limit_exceeded");
}

Api ApiForPath(std::string_view path) {
  if (path == "/v1/messages") return Api::kMessages;
  if (path == "/v1/responses") return Api::kResponses;
  return Api::kChat;
}

}  // namespace ladle::server
