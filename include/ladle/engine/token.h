// The token id type shared by the reference model (model.h) and the engine (engine.h). It lives
// in its own header so that the model, the lower module, does not include the engine's: the
// module DAG (docs/architecture.md) has engine -> model and never the reverse.
#pragma once

#include <cstdint>

namespace ladle::engine {

using TokenId = uint32_t;

}  // namespace ladle::engine
