// Errors in each protocol's own shape. Every error the server sends is built from a Status
// through ErrorFor, so the one Status → HTTP mapping (HttpStatusFor in core) decides the
// code; the only protocol adjustment is Anthropic's 529 "overloaded_error" for a full queue.
// Internal to the server.
#pragma once

#include <string>
#include <string_view>

#include "ladle/core/status.h"
#include "ladle/frontend/request_adapters.h"

namespace ladle::server {

// `code` becomes OpenAI's error.code ("" → null).
frontend::ApiError ErrorFor(frontend::Api api, const Status& status, std::string code = "");

frontend::ApiError Unauthorized(frontend::Api api);
frontend::ApiError ModelNotFound(frontend::Api api, std::string_view asked);
frontend::ApiError Overloaded(frontend::Api api);

// The API a path belongs to, for the shape of its errors (OpenAI's for everything but
// /v1/messages).
frontend::Api ApiForPath(std::string_view path);

}  // namespace ladle::server
