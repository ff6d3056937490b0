// Subcommands of the single `ladle` binary. Each Register* adds its CLI11 subcommand and
// sets *run to the function that executes it (returning the process exit code).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace ladle::app {

using RunFn = std::function<int()>;

// The tokenizer a command uses when --tokenizer is not given: $LADLE_TOKENIZER, else the
// file scripts/setup fetched into the cache.
std::string DefaultTokenizerPath();

void RegisterTokenize(CLI::App& app, RunFn* run);
void RegisterDetokenize(CLI::App& app, RunFn* run);

}  // namespace ladle::app
