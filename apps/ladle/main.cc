// `ladle`: one binary, one subcommand per job.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "ladle/core/logging.h"

namespace ladle::app {
std::vector<RegisterFn>& CommandRegistry() {
  static std::vector<RegisterFn> registry;
  return registry;
}
}  // namespace ladle::app

int main(int argc, char** argv) {
  CLI::App app{"Ladle: DeepSeek inference serving"};
  app.require_subcommand(1);
  std::string log_format = "text", log_level = "info";
  app.add_option("--log-format", log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", log_level, "debug, info, warn or error");

  ladle::app::RunFn run;
  for (auto fn : ladle::app::CommandRegistry()) fn(app, &run);

  CLI11_PARSE(app, argc, argv);
  ladle::log::Init(ladle::log::ParseFormat(log_format), ladle::log::ParseLevel(log_level));
  return run ? run() : 2;
}
