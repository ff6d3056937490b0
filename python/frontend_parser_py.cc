// ladle.StreamParser: the streaming output parser from Python.
//
//   p = ladle.StreamParser("v3.2", tok, start_in_reasoning=True)
//   events = p.push(ids)            # list of dicts, in order
//   events += p.finish("stop")      # ends with {"type": "finish", ...}
//
// `tok` is the DeepSeek-V3 tokenizer (ladle.Tokenizer); the version's view of it (its think
// and DSML token ids) is applied here, so a view already built for the version works too.
// Parsing runs with the GIL released; event dicts are built after it is re-acquired.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ladle/frontend/model_version.h"
#include "ladle/frontend/output_parser.h"
#include "ladle/tokenizer/tokenizer.h"
#include "module_registry.h"

namespace py = pybind11;

namespace ladle::python {
namespace {

using frontend::Event;
using frontend::StreamParser;
using tokenizer::TokenId;
using tokenizer::Tokenizer;

// Text as str; bytes that are not UTF-8 (the parser passes impossible sequences on) become
// U+FFFD rather than an exception in the middle of a stream.
py::str Str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list ToPython(const std::vector<Event>& events) {
  py::list out;
  for (const Event& e : events) {
    py::dict d;
    switch (e.kind) {
      case Event::Kind::kReasoning:
        d["type"] = "reasoning";
        d["text"] = Str(e.text);
        break;
      case Event::Kind::kContent:
        d["type"] = "content";
        d["text"] = Str(e.text);
        break;
      case Event::Kind::kToolCallStart:
        d["type"] = "tool_call_start";
        d["index"] = e.tool_index;
        d["id"] = Str(e.tool_id);
        d["name"] = Str(e.tool_name);
        break;
      case Event::Kind::kToolCallArgs:
        d["type"] = "tool_call_args";
        d["index"] = e.tool_index;
        d["text"] = Str(e.text);
        break;
      case Event::Kind::kToolCallEnd:
        d["type"] = "tool_call_end";
        d["index"] = e.tool_index;
        break;
      case Event::Kind::kFinish:
        d["type"] = "finish";
        d["reason"] = std::string(frontend::FinishReasonName(e.finish));
        d["malformed"] = e.malformed;
        break;
    }
    out.append(std::move(d));
  }
  return out;
}

std::vector<TokenId> IdsFrom(const py::iterable& ids) {
  std::vector<TokenId> out;
  for (py::handle item : ids) {
    if (PyBool_Check(item.ptr())) throw py::type_error("token ids must be int, not bool");
    const long long v = item.cast<long long>();
    if (v < 0 || v > 0xFFFFFFFFll) throw py::value_error("token id out of range: " + std::to_string(v));
    out.push_back(static_cast<TokenId>(v));
  }
  return out;
}

// One parser per Python object; the mutex keeps two threads from feeding it at once (pushes
// run without the GIL).
struct PyStreamParser {
  std::mutex mu;
  std::unique_ptr<StreamParser> parser;
};

std::unique_ptr<PyStreamParser> Make(const std::string& version_name, const Tokenizer& base, bool start_in_reasoning,
                                     const std::string& tool_id_prefix) {
  auto version = frontend::ParseModelVersion(version_name);
  if (!version.ok()) RaiseStatus(version.status());
  Result<StreamParser> parser = [&]() -> Result<StreamParser> {
    py::gil_scoped_release nogil;
    LADLE_ASSIGN_OR_RETURN(Tokenizer view, frontend::TokenizerForVersion(base, *version));
    frontend::StreamParserOptions opts;
    opts.tool_id_prefix = tool_id_prefix;
    return StreamParser::Create(*version, view, start_in_reasoning, opts);
  }();
  if (!parser.ok()) RaiseStatus(parser.status());
  auto p = std::make_unique<PyStreamParser>();
  p->parser = std::make_unique<StreamParser>(std::move(parser).value());
  return p;
}

void AddParser(py::module_& m) {
  py::class_<PyStreamParser>(m, "StreamParser",
                             "Streaming DeepSeek output parser: token ids in, events (dicts) out.\n\n"
                             "Event dicts: {'type': 'reasoning'|'content', 'text'}, {'type': 'tool_call_start', "
                             "'index', 'id', 'name'}, {'type': 'tool_call_args', 'index', 'text'}, "
                             "{'type': 'tool_call_end', 'index'}, {'type': 'finish', 'reason', 'malformed'}.")
      .def(py::init(&Make), py::arg("version"), py::arg("tokenizer"), py::arg("start_in_reasoning") = false,
           py::arg("tool_id_prefix") = "",
           "version: v3, r1, v3.1, v3.2-exp, v3.2 or v4. tokenizer: the DeepSeek-V3 ladle.Tokenizer. "
           "start_in_reasoning: the prompt ended by opening reasoning (<think>). tool_id_prefix: tool call "
           "ids are this plus the call index (default: random per parser).")
      .def(
          "push",
          [](PyStreamParser& self, const py::iterable& ids) {
            const std::vector<TokenId> v = IdsFrom(ids);
            std::vector<Event> events;
            {
              py::gil_scoped_release nogil;
              std::lock_guard<std::mutex> lock(self.mu);
              events = self.parser->Push(v);
            }
            return ToPython(events);
          },
          py::arg("ids"), "Feeds the next ids (any number); returns the events they complete.")
      .def(
          "finish",
          [](PyStreamParser& self, const std::string& reason) {
            auto r = frontend::ParseFinishReason(reason);
            if (!r.ok()) RaiseStatus(r.status());
            std::vector<Event> events;
            {
              py::gil_scoped_release nogil;
              std::lock_guard<std::mutex> lock(self.mu);
              events = self.parser->Finish(*r);
            }
            return ToPython(events);
          },
          py::arg("reason") = "stop",
          "Ends the stream (reason: why the engine stopped: stop, length, cancelled, error); returns the "
          "remaining events, the last being the finish. Later calls return [].")
      .def_property_readonly("finished", [](PyStreamParser& self) { return self.parser->finished(); })
      .def_property_readonly("reasoning_tokens", [](PyStreamParser& self) { return self.parser->reasoning_tokens(); })
      .def_property_readonly("invalid_ids", [](PyStreamParser& self) { return self.parser->invalid_ids(); });

  m.def(
      "prompt_opens_reasoning",
      [](const std::string& version_name, const Tokenizer& base, const py::iterable& prompt_ids) {
        auto version = frontend::ParseModelVersion(version_name);
        if (!version.ok()) RaiseStatus(version.status());
        const std::vector<TokenId> ids = IdsFrom(prompt_ids);
        Result<bool> r = [&]() -> Result<bool> {
          py::gil_scoped_release nogil;
          LADLE_ASSIGN_OR_RETURN(Tokenizer view, frontend::TokenizerForVersion(base, *version));
          return frontend::PromptOpensReasoning(*version, view, ids);
        }();
        if (!r.ok()) RaiseStatus(r.status());
        return *r;
      },
      py::arg("version"), py::arg("tokenizer"), py::arg("prompt_ids"),
      "Whether the prompt ends by opening reasoning (<think>): the start_in_reasoning for StreamParser.");
}

}  // namespace

LADLE_REGISTER_PY_EXTENSION(AddParser);

}  // namespace ladle::python
