#include "structured_hook.h"

#include <fmt/format.h>

#include <mutex>
#include <optional>
#include <utility>

#include "api_errors.h"
#include "ladle/core/logging.h"
#include "server_impl.h"

namespace ladle::server {

namespace {

using structured::ConstraintKind;

// A constraint the compiler refused is the client's mistake (400), whatever the compiler's
// code: an unsupported keyword, a parse error, or a schema over the compile budget.
frontend::ApiError CompileError(frontend::Api api, const structured::ConstraintSpec& spec, const Status& s) {
  if (s.code() == StatusCode::kInternal || s.code() == StatusCode::kIoError || s.code() == StatusCode::kUnavailable) {
    return ErrorFor(api, s);
  }
  frontend::ApiError e = ErrorFor(api, InvalidArgument(""));
  e.status = StatusCode::kInvalidArgument;
  e.param = spec.param;
  e.code = spec.kind == ConstraintKind::kJsonSchema || spec.kind == ConstraintKind::kToolCall ? "invalid_schema"
                                                                                               : "invalid_grammar";
  e.message = fmt::format("{}: cannot be enforced: {}", spec.param, s.message());
  return e;
}

bool BudgetFor(const ServerImpl& server, ConstraintKind kind, std::string_view header) {
  if (header == "off") return false;
  if (header == "on") return true;
  // On by default where truncation means invalid JSON; regex and EBNF languages may have no
  // meaningful "shortest" answer a client wants.
  const bool json = kind == ConstraintKind::kJsonObject || kind == ConstraintKind::kJsonSchema ||
                    kind == ConstraintKind::kToolCall;
  return json && server.config().grammar_budget_aware;
}

}  // namespace

bool PrepareConstraint(ServerImpl& server, const frontend::Request& req, bool ends_in_thinking,
                       const engine::SamplingParams& sampling, std::string_view budget_header,
                       std::function<void(ConstraintOutcome)> ready) {
  const auto& cfg = server.config();
  auto spec = structured::SpecFromRequest(req, cfg.version, ends_in_thinking);
  if (spec.ok() && !spec->has_value()) return false;
  if (!spec.ok()) {
    ConstraintOutcome o;
    o.error = ErrorFor(req.api, spec.status());
    ready(std::move(o));
    return true;
  }
  structured::ConstraintSpec s = std::move(**spec);
  if (s.kind != ConstraintKind::kToolCall) s.whitespace = cfg.grammar_whitespace;
  if (server.grammar() == nullptr) {
    ConstraintOutcome o;
    o.error = ErrorFor(req.api, Status(StatusCode::kUnavailable, "structured output is not available on this server"));
    ready(std::move(o));
    return true;
  }
  structured::MaskOptions mo = structured::MaskOptionsFor(
      cfg.version, server.tokenizer(), ends_in_thinking && structured::UsesReasoningTrigger(s), sampling.n,
      static_cast<uint32_t>(std::max(0, sampling.max_tokens)), BudgetFor(server, s.kind, budget_header));
  const frontend::Api api = req.api;
  // Whichever comes first, the compile or the deadline, answers the request; the other finds
  // `ready` already taken. The compile itself is bounded by its own budget; this bounds the
  // wait in the queue and on workers too, so no constrained request waits forever.
  struct Once {
    std::mutex mu;
    std::function<void(ConstraintOutcome)> ready;
    std::optional<boost::asio::steady_timer> timer;
    std::function<void(ConstraintOutcome)> Take() {
      std::lock_guard lock(mu);
      if (timer) timer->cancel();
      return std::exchange(ready, nullptr);
    }
  };
  auto once = std::make_shared<Once>();
  once->ready = std::move(ready);
  const int64_t deadline_ms = cfg.grammar_deadline_ms > 0
                                  ? cfg.grammar_deadline_ms
                                  : int64_t{cfg.grammar_service.compile.max_compile_ms} + 10'000;
  {
    std::lock_guard lock(once->mu);
    once->timer.emplace(server.io(), std::chrono::milliseconds(deadline_ms));
    once->timer->async_wait([once, api, param = s.param, deadline_ms](boost::system::error_code ec) {
      if (ec) return;  // cancelled: the compile answered first
      std::function<void(ConstraintOutcome)> f;
      {
        std::lock_guard lock(once->mu);
        f = std::exchange(once->ready, nullptr);
      }
      if (!f) return;
      LADLE_LOG_WARN("grammar.deadline param={} waited_ms={}", param, deadline_ms);
      ConstraintOutcome o;
      o.error = ErrorFor(api, Status(StatusCode::kDeadlineExceeded,
                                     fmt::format("{}: the constraint did not compile within {} ms", param, deadline_ms)));
      f(std::move(o));
    });
  }
  server.grammar()->GetAsync(s, [api, s, mo, once](const structured::CompileResult& r) {
    auto ready = once->Take();
    if (!ready) return;  // the deadline answered already
    ConstraintOutcome o;
    if (!r.ok() && s.lazy) {
      // tool_choice auto: the model may answer in text anyway; a tool set the call grammar
      // cannot express leaves the turn unconstrained rather than failing the request.
    } else if (!r.ok()) {
      o.error = CompileError(api, s, r.status());
    } else {
      auto mask = std::make_shared<structured::StructuredMaskProvider>(*r, mo);
      mask->set_wire(structured::ConstraintWire(s, mo));  // for an engine in another process
      if (s.kind == ConstraintKind::kToolCall && !s.lazy && mo.budget_aware && mask->MinTokens() > mo.max_tokens) {
        // A forced call that cannot fit would come back cut off, which no client can use:
        // say up front how much room it needs.
        const char* param = api == frontend::Api::kResponses ? "max_output_tokens" : "max_tokens";
        o.error = ErrorFor(api, InvalidArgument(fmt::format(
                                    "{} ({}) is too small for the forced tool call: the shortest complete call "
                                    "needs {} tokens; raise {} to at least {}",
                                    param, mo.max_tokens, mask->MinTokens(), param, mask->MinTokens())));
        o.error->param = param;
      } else {
        o.mask = std::move(mask);
      }
    }
    ready(std::move(o));
  });
  return true;
}

}  // namespace ladle::server
