// Subcommands of the single `ladle` binary. Each cmd_*.cc registers itself with
// LADLE_REGISTER_COMMAND; its Register function adds the CLI11 subcommand and, when that
// subcommand is chosen, sets *run to the function that executes it (returning the exit code).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ladle::app {

using RunFn = std::function<int()>;
using RegisterFn = void (*)(CLI::App& app, RunFn* run);

// Every registered subcommand, in registration order.
std::vector<RegisterFn>& CommandRegistry();

struct CommandRegistrar {
  explicit CommandRegistrar(RegisterFn fn) { CommandRegistry().push_back(fn); }
};

#define LADLE_REGISTER_COMMAND(fn) static ::ladle::app::CommandRegistrar ladle_registrar_##fn(&fn)

// The tokenizer a command uses when --tokenizer is not given: $LADLE_TOKENIZER, else the
// file scripts/setup fetched into the cache.
std::string DefaultTokenizerPath();

}  // namespace ladle::app
