#include "structured_hook.h"

#include <fmt/format.h>

#include "api_errors.h"
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
  e.http_status = 400;
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
  server.grammar()->GetAsync(s, [api, s, mo, ready = std::move(ready)](const structured::CompileResult& r) {
    ConstraintOutcome o;
    if (!r.ok() && s.lazy) {
      // tool_choice auto: the model may answer in text anyway; a tool set the call grammar
      // cannot express leaves the turn unconstrained rather than failing the request.
    } else if (!r.ok()) {
      o.error = CompileError(api, s, r.status());
    } else {
      o.mask = std::make_shared<structured::StructuredMaskProvider>(*r, mo);
    }
    ready(std::move(o));
  });
  return true;
}

}  // namespace ladle::server
