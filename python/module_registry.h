// Parts of the `ladle` Python module defined in other files register here and are added to
// the module when it is imported (ladle_py.cc), so each module area keeps its own file.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "ladle/core/status.h"

namespace ladle::python {

// Raises the Python exception mapped from `status` (the module's one Status → exception map,
// in ladle_py.cc). Call with the GIL held; never returns.
[[noreturn]] void RaiseStatus(const Status& status);

using ExtensionFn = void (*)(pybind11::module_& m);
std::vector<ExtensionFn>& ModuleExtensions();

struct ExtensionRegistrar {
  explicit ExtensionRegistrar(ExtensionFn fn) { ModuleExtensions().push_back(fn); }
};

#define LADLE_REGISTER_PY_EXTENSION(fn) static ::ladle::python::ExtensionRegistrar ladle_py_registrar_##fn(&fn)

}  // namespace ladle::python
