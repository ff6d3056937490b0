// Python bindings for Ladle (module `ladle`).
//
// Rules every binding here follows:
//   * Arguments are converted to C++ values while the GIL is held; the real work then runs
//     under py::gil_scoped_release, and results are turned back into Python objects after the
//     GIL is re-acquired. Tokenizer methods are const and thread-safe, so Python threads really
//     do encode in parallel.
//   * A non-OK ladle::Status becomes a Python exception in exactly one place: ThrowStatus().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ladle/core/result.h"
#include "ladle/core/status.h"
#include "ladle/core/thread_pool.h"
#include "ladle/tokenizer/tokenizer.h"
#include "module_registry.h"

namespace py = pybind11;

namespace ladle::python {
namespace {

using tokenizer::EncodedSegments;
using tokenizer::IncrementalDecoder;
using tokenizer::Segment;
using tokenizer::TokenId;
using tokenizer::Tokenizer;

// ---------------------------------------------------------------------------------------------
// Status → Python exception. The only place that decides which exception a code becomes.
// The switch has no default so that a code added to LADLE_STATUS_CODES warns (-Wswitch) here.
PyObject* ExceptionTypeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
    case StatusCode::kParseError:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
    case StatusCode::kPayloadTooLarge:
      return PyExc_ValueError;
    case StatusCode::kNotFound:
      return PyExc_FileNotFoundError;
    case StatusCode::kOutOfRange:
      return PyExc_IndexError;
    case StatusCode::kIoError:
      return PyExc_OSError;
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return PyExc_PermissionError;
    case StatusCode::kDeadlineExceeded:
      return PyExc_TimeoutError;
    case StatusCode::kResourceExhausted:
    case StatusCode::kOverloaded:
    case StatusCode::kCancelled:
    case StatusCode::kUnavailable:
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
    case StatusCode::kOk:  // never thrown; see ThrowStatus
      return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

// Raises the Python exception for a non-OK status; message = status.ToString(). The exception
// also carries `status_code` (e.g. "OutOfRange") so callers can tell codes apart that share a
// Python type. Must be called with the GIL held.
[[noreturn]] void ThrowStatus(const Status& status) {
  if (status.ok()) {
    throw std::logic_error("ladle: ThrowStatus called with an OK status");
  }
  const std::string message = status.ToString();
  PyObject* type = ExceptionTypeFor(status.code());
  // Messages may quote raw input (paths, token text): never let a bad byte hide the error.
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  if (!text) throw py::error_already_set();
  py::object exc = py::reinterpret_borrow<py::object>(type)(text);
  const std::string_view name = StatusCodeName(status.code());
  exc.attr("status_code") = py::str(name.data(), name.size());
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

template <typename T>
T Unwrap(Result<T>&& r) {
  if (!r.ok()) ThrowStatus(r.status());
  return std::move(r).value();
}

// ---------------------------------------------------------------------------------------------
// Conversions (GIL held).

// Any iterable of integers (list, tuple, range, numpy array, ...) → token ids. An integer that
// cannot be a TokenId at all (negative, ≥ 2^32) is reported like an unknown id: OutOfRange.
std::vector<TokenId> ToIds(const py::handle& obj) {
  if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr())) {
    throw py::type_error("ids must be an iterable of int, not str/bytes");
  }
  std::vector<TokenId> ids;
  if (PySequence_Check(obj.ptr())) {
    const Py_ssize_t n = PySequence_Size(obj.ptr());
    if (n < 0) throw py::error_already_set();
    ids.reserve(static_cast<size_t>(n));
  }
  for (const py::handle item : py::iter(obj)) {
    if (PyBool_Check(item.ptr())) throw py::type_error("token ids must be int, not bool");
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
    if (!index) throw py::error_already_set();  // TypeError: not an integer
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow != 0 || v < 0 || v > static_cast<long long>(UINT32_MAX)) {
      ThrowStatus(OutOfRange("token id " + py::str(index).cast<std::string>() +
                             " is not a valid token id"));
    }
    ids.push_back(static_cast<TokenId>(v));
  }
  return ids;
}

// Python int → TokenId for a special segment; same range rule as ToIds.
TokenId ToSpecialId(const py::handle& item) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < 0 || v > static_cast<long long>(UINT32_MAX)) {
    ThrowStatus(InvalidArgument("special segment id " + py::str(item).cast<std::string>() +
                                " is not a token id"));
  }
  return static_cast<TokenId>(v);
}

py::list IdsToList(const std::vector<TokenId>& ids) {
  py::list out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    PyObject* v = PyLong_FromUnsignedLong(ids[i]);
    if (!v) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), v);  // steals v
  }
  return out;
}

template <typename Int>
py::list IntsToList(const std::vector<Int>& v) {
  py::list out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* o = PyLong_FromUnsignedLongLong(static_cast<unsigned long long>(v[i]));
    if (!o) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), o);
  }
  return out;
}

// Raw bytes → str, invalid UTF-8 replaced by U+FFFD (Python's errors="replace").
py::str BytesToStr(const std::string& bytes) {
  PyObject* s =
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// str → UTF-8 bytes, bytes/bytearray → as they are (lets callers encode arbitrary bytes).
std::string ToText(const py::handle& obj) {
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
    if (!data) throw py::error_already_set();  // e.g. lone surrogates
    return std::string(data, static_cast<size_t>(size));
  }
  if (PyBytes_Check(obj.ptr())) {
    return std::string(PyBytes_AS_STRING(obj.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(obj.ptr())));
  }
  if (PyByteArray_Check(obj.ptr())) {
    return std::string(PyByteArray_AS_STRING(obj.ptr()),
                       static_cast<size_t>(PyByteArray_GET_SIZE(obj.ptr())));
  }
  throw py::type_error(std::string("expected str or bytes, got ") + Py_TYPE(obj.ptr())->tp_name);
}

std::vector<TokenId> EncodeOne(const Tokenizer& tok, std::string_view text, bool plain) {
  return plain ? tok.EncodePlain(text) : tok.EncodeTrusted(text);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer methods.

Tokenizer FromFile(const std::filesystem::path& path) {
  const std::string p = path.string();
  Result<Tokenizer> r = [&] {
    py::gil_scoped_release nogil;
    return Tokenizer::FromFile(p);
  }();
  return Unwrap(std::move(r));
}

Tokenizer FromJson(const py::handle& json) {
  const std::string text = ToText(json);
  Result<Tokenizer> r = [&] {
    py::gil_scoped_release nogil;
    return Tokenizer::FromJson(text);
  }();
  return Unwrap(std::move(r));
}

py::list Encode(const Tokenizer& tok, const py::handle& text, bool plain) {
  const std::string t = ToText(text);
  std::vector<TokenId> ids;
  {
    py::gil_scoped_release nogil;
    ids = EncodeOne(tok, t, plain);
  }
  return IdsToList(ids);
}

py::list EncodeBatch(const Tokenizer& tok, const py::iterable& texts, bool plain) {
  std::vector<std::string> inputs;
  for (const py::handle t : texts) inputs.push_back(ToText(t));
  std::vector<std::vector<TokenId>> outputs(inputs.size());
  {
    py::gil_scoped_release nogil;
    // One item per text; a long text still splits internally (nested ParallelFor is safe: the
    // calling thread always works through its own items).
    SharedPool().ParallelFor(inputs.size(), [&](size_t i) {
      outputs[i] = EncodeOne(tok, inputs[i], plain);
    });
  }
  py::list out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) out[i] = IdsToList(outputs[i]);
  return out;
}

py::tuple EncodeSegmentsPy(const Tokenizer& tok, const py::iterable& segments) {
  // Texts are stored first, views taken after, so no reallocation invalidates a view.
  struct Item {
    bool special;
    TokenId id;
    size_t text_index;
  };
  std::vector<std::string> texts;
  std::vector<Item> items;
  for (const py::handle s : segments) {
    if (PyUnicode_Check(s.ptr()) || PyBytes_Check(s.ptr()) || PyByteArray_Check(s.ptr())) {
      items.push_back({false, 0, texts.size()});
      texts.push_back(ToText(s));
    } else if (PyLong_Check(s.ptr()) && !PyBool_Check(s.ptr())) {
      items.push_back({true, ToSpecialId(s), 0});
    } else {
      throw py::type_error(std::string("a segment must be str (text) or int (special token id), "
                                       "got ") +
                           Py_TYPE(s.ptr())->tp_name);
    }
  }
  std::vector<Segment> segs;
  segs.reserve(items.size());
  for (const Item& it : items) {
    segs.push_back(it.special ? Segment::Special(it.id) : Segment::Text(texts[it.text_index]));
  }
  Result<EncodedSegments> r = [&] {
    py::gil_scoped_release nogil;
    return tok.EncodeSegments(segs);
  }();
  EncodedSegments enc = Unwrap(std::move(r));
  return py::make_tuple(IdsToList(enc.ids), IntsToList(enc.special_positions));
}

std::string DecodeRaw(const Tokenizer& tok, const py::handle& ids_obj) {
  const std::vector<TokenId> ids = ToIds(ids_obj);
  Result<std::string> r = [&] {
    py::gil_scoped_release nogil;
    return tok.Decode(ids);
  }();
  return Unwrap(std::move(r));
}

// ---------------------------------------------------------------------------------------------
// IncrementalDecoder. One Push is a few table lookups, far cheaper than a GIL hand-off, and a
// decoder is stateful (not thread-safe), so its methods keep the GIL: it is what stops two
// Python threads from pushing into the same decoder at once.

std::string PushRaw(IncrementalDecoder& dec, const py::handle& id_obj) {
  if (PyBool_Check(id_obj.ptr())) throw py::type_error("token id must be int, not bool");
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(id_obj.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < 0 || v > static_cast<long long>(UINT32_MAX)) {
    ThrowStatus(OutOfRange("token id " + py::str(index).cast<std::string>() +
                           " is not a valid token id"));
  }
  std::string out;
  Status st = dec.Push(static_cast<TokenId>(v), &out);
  if (!st.ok()) ThrowStatus(st);
  return out;
}

}  // namespace
}  // namespace ladle::python

namespace ladle::python {
void RaiseStatus(const Status& status) { ThrowStatus(status); }

std::vector<ExtensionFn>& ModuleExtensions() {
  static std::vector<ExtensionFn> fns;
  return fns;
}
}  // namespace ladle::python

PYBIND11_MODULE(ladle, m) {
  using namespace ladle::python;
  using ladle::tokenizer::AddedToken;
  using ladle::tokenizer::IncrementalDecoder;
  using ladle::tokenizer::TokenId;
  using ladle::tokenizer::Tokenizer;

  m.doc() = "Ladle: DeepSeek tokenizer bindings (byte-level BPE with Hugging Face parity).";

  py::class_<AddedToken>(m, "AddedToken", "An entry of tokenizer.json's added_tokens.")
      .def_readonly("id", &AddedToken::id)
      .def_readonly("content", &AddedToken::content)
      .def_readonly("special", &AddedToken::special)
      .def_readonly("normalized", &AddedToken::normalized)
      .def_readonly("lstrip", &AddedToken::lstrip)
      .def_readonly("rstrip", &AddedToken::rstrip)
      .def_readonly("single_word", &AddedToken::single_word)
      .def("__repr__", [](const AddedToken& t) {
        return "AddedToken(id=" + std::to_string(t.id) + ", content=" +
               py::repr(py::str(t.content)).cast<std::string>() +
               (t.special ? ", special=True)" : ", special=False)");
      });

  py::class_<Tokenizer>(m, "Tokenizer",
                        "A loaded tokenizer. Immutable and thread-safe; every encode/decode "
                        "releases the GIL.")
      .def_static("from_file", &FromFile, py::arg("path"),
                  "Load a Hugging Face tokenizer.json (str or os.PathLike).")
      .def_static("from_json", &FromJson, py::arg("json"),
                  "Load a tokenizer from the text of a tokenizer.json.")
      .def(
          "encode",
          [](const Tokenizer& tok, const py::handle& text, bool plain) {
            return Encode(tok, text, plain);
          },
          py::arg("text"), py::kw_only(), py::arg("plain") = true,
          "Encode str (or bytes). plain=True: byte-level BPE only, never an added-token id "
          "(for user/tool text). plain=False: added tokens in the text become their ids "
          "(Hugging Face behaviour; for trusted template text).")
      .def(
          "encode_batch",
          [](const Tokenizer& tok, const py::iterable& texts, bool plain) {
            return EncodeBatch(tok, texts, plain);
          },
          py::arg("texts"), py::kw_only(), py::arg("plain") = true,
          "Encode many texts in parallel on Ladle's shared thread pool.")
      .def(
          "_encode_plain_serial",
          [](const Tokenizer& tok, const py::handle& text) {
            const std::string t = ToText(text);
            std::vector<TokenId> ids;
            {
              py::gil_scoped_release nogil;
              ids = tok.EncodePlainSerial(t);
            }
            return IdsToList(ids);
          },
          py::arg("text"),
          "The serial reference path of encode(plain=True) (for tests and parity checks).")
      .def("encode_segments", &EncodeSegmentsPy, py::arg("segments"),
           "Encode a prompt given as a sequence of str (text, encoded plain) and int (special "
           "token id). Returns (ids, special_positions).")
      .def(
          "decode",
          [](const Tokenizer& tok, const py::handle& ids) {
            return BytesToStr(DecodeRaw(tok, ids));
          },
          py::arg("ids"),
          "Decode ids to str; bytes that are not valid UTF-8 become U+FFFD. Raises IndexError "
          "on an unknown id.")
      .def(
          "decode_bytes",
          [](const Tokenizer& tok, const py::handle& ids) {
            return py::bytes(DecodeRaw(tok, ids));
          },
          py::arg("ids"), "Decode ids to the exact bytes they stand for.")
      .def_property_readonly("vocab_size", &Tokenizer::VocabSize,
                             "Largest id + 1 over vocabulary and added tokens.")
      .def("__len__", &Tokenizer::VocabSize)
      .def(
          "token_to_id",
          [](const Tokenizer& tok, const std::string& token) -> std::optional<TokenId> {
            return tok.TokenToId(token);
          },
          py::arg("token"),
          "Exact lookup of a vocabulary string (byte-level alphabet, e.g. 'Ġthe') or an added "
          "token; None when absent.")
      .def(
          "id_to_token",
          [](const Tokenizer& tok, long long id) -> std::optional<std::string> {
            if (id < 0 || id > static_cast<long long>(UINT32_MAX)) return std::nullopt;
            return tok.IdToToken(static_cast<TokenId>(id));
          },
          py::arg("id"), "The vocabulary/added-token string of an id; None when absent.")
      .def(
          "is_valid_id",
          [](const Tokenizer& tok, long long id) {
            return id >= 0 && id <= static_cast<long long>(UINT32_MAX) &&
                   tok.IsValidId(static_cast<TokenId>(id));
          },
          py::arg("id"))
      .def(
          "is_added_token",
          [](const Tokenizer& tok, long long id) {
            return id >= 0 && id <= static_cast<long long>(UINT32_MAX) &&
                   tok.IsAddedToken(static_cast<TokenId>(id));
          },
          py::arg("id"))
      .def_property_readonly(
          "added_tokens",
          [](const Tokenizer& tok) {
            auto span = tok.AddedTokens();
            return std::vector<AddedToken>(span.begin(), span.end());
          })
      .def_property_readonly("memory_bytes", &Tokenizer::MemoryBytes)
      .def("__repr__", [](const Tokenizer& tok) {
        return "<ladle.Tokenizer vocab_size=" + std::to_string(tok.VocabSize()) +
               " added_tokens=" + std::to_string(tok.AddedTokens().size()) + ">";
      });

  py::class_<IncrementalDecoder>(m, "IncrementalDecoder",
                                 "Streaming decoder: push ids one at a time, get only complete "
                                 "UTF-8 code points back. push()+...+flush() == decode(ids).")
      .def(py::init<Tokenizer>(), py::arg("tokenizer"))
      .def(
          "push",
          [](IncrementalDecoder& dec, const py::handle& id) { return BytesToStr(PushRaw(dec, id)); },
          py::arg("id"),
          "Push one id; returns the newly complete text (possibly ''). IndexError on an "
          "unknown id.")
      .def(
          "push_bytes",
          [](IncrementalDecoder& dec, const py::handle& id) { return py::bytes(PushRaw(dec, id)); },
          py::arg("id"), "Like push(), returning the raw bytes.")
      .def(
          "flush", [](IncrementalDecoder& dec) { return BytesToStr(dec.Flush()); },
          "Return whatever is still held (an incomplete tail) and reset.")
      .def(
          "flush_bytes", [](IncrementalDecoder& dec) { return py::bytes(dec.Flush()); },
          "Like flush(), returning the raw bytes.")
      .def_property_readonly("pending_bytes", &IncrementalDecoder::pending_bytes);
  for (auto fn : ladle::python::ModuleExtensions()) fn(m);
}
