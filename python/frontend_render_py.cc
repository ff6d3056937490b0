// ladle.render(): a protocol request body → (prompt text, token ids, special positions) for one
// DeepSeek model version, through the same adapters and encoders as the server.
//
// The GIL is released for adapting, rendering and encoding; only argument conversion and the
// building of the result objects hold it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ladle/frontend/encoder.h"
#include "ladle/frontend/model_version.h"
#include "ladle/frontend/request_adapters.h"
#include "ladle/tokenizer/tokenizer.h"
#include "module_registry.h"

namespace py = pybind11;

namespace ladle::python {
namespace {

using frontend::ModelVersion;
using tokenizer::Tokenizer;

// Per-version tokenizer views cost a few milliseconds to build, so the last few are kept. Each
// entry holds its base tokenizer, which keeps the base's tables alive and so its address unique.
class ViewCache {
 public:
  Result<Tokenizer> Get(const Tokenizer& base, ModelVersion v) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (&e.base.impl() == &base.impl() && e.version == v) return e.view;
    }
    LADLE_ASSIGN_OR_RETURN(Tokenizer view, frontend::TokenizerForVersion(base, v));
    if (entries_.size() == kMaxEntries) entries_.erase(entries_.begin());
    entries_.push_back(Entry{base, v, view});
    return view;
  }

 private:
  struct Entry {
    Tokenizer base;
    ModelVersion version;
    Tokenizer view;
  };
  static constexpr size_t kMaxEntries = 8;
  std::mutex mu_;
  std::vector<Entry> entries_;
};

ViewCache& Views() {
  static ViewCache* cache = new ViewCache();  // never destroyed: safe at interpreter exit
  return *cache;
}

// $LADLE_TOKENIZER, else <$LADLE_CACHE_DIR or $LADLE_CACHE>/tokenizers/deepseek-v3/tokenizer.json,
// loaded once.
Result<Tokenizer> DefaultTokenizer() {
  static std::mutex mu;
  static std::optional<Tokenizer> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) return *loaded;
  std::string path;
  if (const char* env = std::getenv("LADLE_TOKENIZER"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    const char* cache = std::getenv("LADLE_CACHE_DIR");
    if (cache == nullptr || *cache == '\0') cache = std::getenv("LADLE_CACHE");
    if (cache != nullptr && *cache != '\0') path = std::string(cache) + "/tokenizers/deepseek-v3/tokenizer.json";
  }
  if (path.empty() || !std::filesystem::exists(path)) {
    return NotFound("no tokenizer given and none found (set LADLE_TOKENIZER or LADLE_CACHE_DIR, or pass "
                    "tokenizer=ladle.Tokenizer.from_file(...))" +
                    (path.empty() ? std::string() : ": " + path));
  }
  LADLE_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromFile(path));
  loaded = tok;
  return tok;
}

py::tuple Render(const std::string& request_json, const std::string& api_name, const std::string& version_name,
                 const Tokenizer* tok) {
  const std::optional<frontend::Api> api = frontend::ParseApiName(api_name);
  if (!api) RaiseStatus(InvalidArgument("unknown api '" + api_name + "' (chat, responses, messages)"));
  auto version = frontend::ParseModelVersion(version_name);
  if (!version.ok()) RaiseStatus(version.status());

  std::optional<Tokenizer> base;
  if (tok != nullptr) base = *tok;
  Result<frontend::EncodedPrompt> result = [&]() -> Result<frontend::EncodedPrompt> {
    py::gil_scoped_release nogil;
    if (!base) {
      LADLE_ASSIGN_OR_RETURN(Tokenizer loaded, DefaultTokenizer());
      base = loaded;
    }
    frontend::Adapted adapted = frontend::Adapt(*api, request_json);
    // The protocol's own error JSON is the message, so callers see exactly what a server sends.
    if (!adapted.ok()) return InvalidArgument(frontend::ErrorJson(*api, adapted.error));
    LADLE_ASSIGN_OR_RETURN(frontend::Prompt prompt, frontend::RenderPrompt(*adapted.request, *version));
    LADLE_ASSIGN_OR_RETURN(Tokenizer view, Views().Get(*base, *version));
    return frontend::EncodePrompt(prompt, view);
  }();
  if (!result.ok()) RaiseStatus(result.status());
  const frontend::EncodedPrompt& enc = *result;
  py::list ids(enc.ids.size());
  for (size_t i = 0; i < enc.ids.size(); ++i) ids[i] = py::int_(enc.ids[i]);
  py::list positions(enc.special_positions.size());
  for (size_t i = 0; i < enc.special_positions.size(); ++i) positions[i] = py::int_(enc.special_positions[i]);
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(enc.text.data(), static_cast<Py_ssize_t>(enc.text.size()), "replace"));
  if (!text) throw py::error_already_set();
  return py::make_tuple(text, ids, positions);
}

void AddRender(py::module_& m) {
  m.def(
      "render",
      [](const std::string& request_json, const std::string& api, const std::string& version,
         const Tokenizer* tokenizer) { return Render(request_json, api, version, tokenizer); },
      py::arg("request_json"), py::arg("api"), py::arg("version"), py::arg("tokenizer") = py::none(),
      "Render a request body (api: 'chat', 'responses' or 'messages') into the prompt of a DeepSeek model "
      "version ('v3', 'r1', 'v3.1', 'v3.2-exp', 'v3.2', 'v4') and encode it. Returns (text, ids, "
      "special_positions). tokenizer: the DeepSeek-V3 tokenizer.json as a ladle.Tokenizer (the version's view "
      "is derived from it); when None, $LADLE_TOKENIZER or the set-up cache is used. A request the protocol "
      "rejects raises ValueError whose message is the protocol's error JSON.");
}

}  // namespace

LADLE_REGISTER_PY_EXTENSION(AddRender);

}  // namespace ladle::python
