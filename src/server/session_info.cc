// The informational routes of a connection (models, token counting) and the context-limit
// check, kept out of session.cc, which holds the generation path.
#include <fmt/format.h>

#include "api_errors.h"
#include "image_stage.h"
#include "ladle/frontend/encoder.h"
#include "ladle/json/json.h"
#include "server_impl.h"
#include "session.h"

namespace ladle::server {

namespace asio = boost::asio;

using frontend::Api;

namespace {

// Every name the server answers to, the served name first.
std::vector<std::string> ModelNames(const ServerConfig& cfg) {
  std::vector<std::string> names{cfg.served_model_name};
  for (const auto& a : cfg.model_aliases)
    if (a != cfg.served_model_name) names.push_back(a);
  return names;
}

void AppendOpenAiModel(std::string_view id, std::string* out) {
  *out += R"({"id":)";
  json::AppendQuoted(id, out);
  *out += R"(,"object":"model","created":0,"owned_by":"ladle"})";
}

// Anthropic's model object; created_at is an RFC 3339 time (the server has no release date, so
// the epoch, as OpenAI's created is 0).
void AppendAnthropicModel(std::string_view id, std::string* out) {
  *out += R"({"type":"model","id":)";
  json::AppendQuoted(id, out);
  *out += R"(,"display_name":)";
  json::AppendQuoted(id, out);
  *out += R"(,"created_at":"1970-01-01T00:00:00Z"})";
}

}  // namespace

void Session::HandleModels(const Request& req, std::string_view path, const std::string& rid, bool keep_alive) {
  const auto& cfg = server_.config();
  // Anthropic's SDKs send anthropic-version on every call; OpenAI's never do.
  const bool anthropic = !req["anthropic-version"].empty();
  const Api api = anthropic ? Api::kMessages : Api::kChat;
  if (!cfg.keys.Allows(req[http::field::authorization], req["x-api-key"])) {
    RespondError(api, Unauthorized(api), rid, keep_alive);
    return;
  }
  const auto names = ModelNames(cfg);
  std::string body;
  if (path == "/v1/models" || path == "/v1/models/") {
    if (anthropic) {
      body = R"({"data":[)";
      for (size_t i = 0; i < names.size(); ++i) {
        if (i) body += ',';
        AppendAnthropicModel(names[i], &body);
      }
      body += R"(],"has_more":false,"first_id":)";
      json::AppendQuoted(names.front(), &body);
      body += R"(,"last_id":)";
      json::AppendQuoted(names.back(), &body);
      body += '}';
    } else {
      body = R"({"object":"list","data":[)";
      for (size_t i = 0; i < names.size(); ++i) {
        if (i) body += ',';
        AppendOpenAiModel(names[i], &body);
      }
      body += "]}";
    }
    Respond(200, "application/json", std::move(body), rid, keep_alive, "other");
    return;
  }
  const std::string_view id = path.substr(std::string_view("/v1/models/").size());
  if (!cfg.ServesModel(id)) {
    RespondError(api, ModelNotFound(api, id), rid, keep_alive);
    return;
  }
  if (anthropic) {
    AppendAnthropicModel(id, &body);
  } else {
    AppendOpenAiModel(id, &body);
  }
  Respond(200, "application/json", std::move(body), rid, keep_alive, "other");
}

void Session::HandleCountTokens(Request& req, const std::string& rid, bool keep_alive) {
  const auto& cfg = server_.config();
  const Api api = Api::kMessages;
  if (!cfg.keys.Allows(req[http::field::authorization], req["x-api-key"])) {
    RespondError(api, Unauthorized(api), rid, keep_alive);
    return;
  }
  // count_tokens takes a Messages request without max_tokens: supply one so the adapter's own
  // validation (the same errors as /v1/messages) applies to everything else.
  std::string body = req.body();
  if (auto doc = json::Parse(body, json::ParseOptions{cfg.limits.max_json_depth, cfg.limits.max_body_bytes});
      doc.ok() && doc->is_object() && doc->Find("max_tokens") == nullptr) {
    doc->Set("max_tokens", json::Value::Int(1));
    body = json::Dump(*doc);
  }
  frontend::Adapted adapted = frontend::Adapt(api, body, cfg.limits);
  if (!adapted.ok()) {
    RespondError(api, adapted.error, rid, keep_alive);
    return;
  }
  // Images count as their placeholders: measured from their headers (fetched if need be), not
  // decoded or encoded.
  auto request = std::make_shared<frontend::Request>(std::move(*adapted.request));
  std::vector<vision::ImageRef> refs = ImageRefs(api, request.get());
  if (refs.empty() || server_.images() == nullptr || !frontend::SpecialTokensFor(cfg.version).image) {
    FinishCountTokens(api, *request, rid, keep_alive);
    return;
  }
  server_.images()->Measure(std::move(refs), [self = shared_from_this(), request, api, rid, keep_alive](
                                                 Result<std::vector<vision::PreparedImage>> r) {
    asio::post(self->stream_.get_executor(), [self, request, api, rid, keep_alive, r = std::move(r)] {
      if (!r.ok()) {
        self->RespondError(api, ErrorFor(api, r.status()), rid, keep_alive);
        return;
      }
      SetPlaceholders(*r, request.get());
      self->FinishCountTokens(api, *request, rid, keep_alive);
    });
  });
}

void Session::FinishCountTokens(frontend::Api api, const frontend::Request& request, const std::string& rid,
                                bool keep_alive) {
  auto encoded = EncodeOrRespond(api, request, rid, keep_alive);
  if (!encoded) return;
  Respond(200, "application/json", fmt::format(R"({{"input_tokens":{}}})", encoded->ids.size()), rid, keep_alive,
          "messages");
}

std::optional<frontend::EncodedPrompt> Session::EncodeOrRespond(Api api, const frontend::Request& request,
                                                               const std::string& rid, bool keep_alive) {
  const auto& cfg = server_.config();
  if (!cfg.ServesModel(request.model)) {
    RespondError(api, ModelNotFound(api, request.model), rid, keep_alive);
    return std::nullopt;
  }
  auto prompt = frontend::RenderPrompt(request, cfg.version);
  if (!prompt.ok()) {
    RespondError(api, ErrorFor(api, prompt.status()), rid, keep_alive);
    return std::nullopt;
  }
  auto encoded = frontend::EncodePrompt(*prompt, server_.tokenizer());
  if (!encoded.ok()) {
    RespondError(api, ErrorFor(api, encoded.status()), rid, keep_alive);
    return std::nullopt;
  }
  return std::move(encoded).value();
}

std::optional<frontend::ApiError> Session::CheckContext(const frontend::Request& request, size_t prompt_tokens,
                                                        engine::SamplingParams* sampling) const {
  const int64_t limit = server_.config().max_model_len;
  if (limit <= 0) return std::nullopt;
  const auto n = static_cast<int64_t>(prompt_tokens);
  const bool explicit_max = request.sampling.max_tokens.has_value();
  // Output needs at least one token: a prompt that leaves none is too long whatever max_tokens.
  const bool prompt_too_long = n >= limit;
  if (!prompt_too_long && !explicit_max && n + sampling->max_tokens > limit) {
    sampling->max_tokens = static_cast<int>(limit - n);  // the request named no budget: give it what is left
    return std::nullopt;
  }
  if (!prompt_too_long && n + sampling->max_tokens <= limit) return std::nullopt;
  frontend::ApiError e = ErrorFor(request.api, InvalidArgument(""));
  if (request.api == Api::kMessages) {
    // Anthropic's words, which Claude Code and the SDKs match to compact the conversation.
    e.message = prompt_too_long
                    ? fmt::format("prompt is too long: {} tokens > {} maximum", n, limit - 1)
                    : fmt::format("input length and `max_tokens` exceed context limit: {} + {} > {}, decrease input "
                                  "length or `max_tokens` and try again",
                                  n, sampling->max_tokens, limit);
    return e;
  }
  e.code = "context_length_exceeded";
  e.param = request.api == Api::kChat ? "messages" : "input";
  e.message = fmt::format(
      "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} "
      "in the completion). Please reduce the length of the messages or completion.",
      limit, n + sampling->max_tokens, n, sampling->max_tokens);
  return e;
}

}  // namespace ladle::server
