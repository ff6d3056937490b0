// Structured output in the request path: a request's constraint → the compile service →
// a mask provider for the engine. The request waits for its compiled grammar here, before it
// enters the engine queue. Internal to the server; docs/structured_output.md.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "ladle/engine/engine.h"
#include "ladle/frontend/conversation.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/structured/mask_provider.h"

namespace ladle::server {

class ServerImpl;

struct ConstraintOutcome {
  std::shared_ptr<structured::StructuredMaskProvider> mask;
  std::optional<frontend::ApiError> error;  // a bad or uncompilable constraint: answer this
};

// Starts fetching the compiled constraint of `req`. Returns false, never calling `ready`, when
// the request is unconstrained. Otherwise `ready` runs exactly once: inline (cache hit, bad
// spec) or on a compile thread, so it must only hand off to the caller's executor.
// `budget_header` is the request's x-ladle-grammar-budget ("on", "off" or empty).
bool PrepareConstraint(ServerImpl& server, const frontend::Request& req, bool ends_in_thinking,
                       const engine::SamplingParams& sampling, std::string_view budget_header,
                       std::function<void(ConstraintOutcome)> ready);

}  // namespace ladle::server
