// `ladle serve`: the reference engine behind the OpenAI/Anthropic-compatible HTTP server.
// Flags can also come from `--config FILE`, a JSON object with the flag names as keys
// (without dashes, e.g. {"port": 8080, "served-model-name": "ladle"}); a flag given on the
// command line wins over the file.
#include "commands.h"
#include "ladle/core/logging.h"
#include "serve_common.h"
#include "vision_common.h"

namespace ladle::app {

namespace {

int RunServe(const ServeOpts& opts, const VisionOpts& vopts) {
  auto tok = LoadTokenizer(opts);
  if (!tok.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(tok.status().ToString()));
    return tok.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  auto stack = BuildEngineStack(opts, *tok, 1);
  if (!stack.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(stack.status().ToString()));
    return 1;
  }
  const engine::EngineConfig& ec = (*stack)->config;
  // The context limit clients see: the engine's model length, and no more than the KV pool holds.
  const int64_t max_len = std::min<int64_t>(ec.max_model_len, int64_t{ec.num_blocks} * (*stack)->model_config.block_size);
  auto sc = BuildServerConfig(opts, tok->version, max_len);
  if (!sc.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(sc.status().ToString()));
    return 2;
  }
  auto images = BuildImagePipeline(vopts, (*stack)->model_config, opts.model);
  if (!images.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(images.status().ToString()));
    return 1;
  }
  sc->images = std::move(images).value();  // the server owns it: see ~ServerImpl
  engine::Engine* eng = (*stack)->ranks[0].get();
  auto srv = server::Server::Create(std::move(sc).value(), eng, *tok->base);
  if (!srv.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(srv.status().ToString()));
    return 1;
  }
  Status run = (*srv)->Run();
  // The engine goes first: its threads hold sinks that post into the server's io context.
  eng->Shutdown();
  (*stack)->ranks.clear();
  srv->reset();
  stack->reset();  // drains the store's writes, then stops the fetcher
  if (!run.ok()) {
    LADLE_LOG_ERROR("serve.failed error='{}'", LogSafe(run.ToString()));
    return 1;
  }
  LADLE_LOG_INFO("serve.exit code=0");
  return 0;
}

void RegisterServe(CLI::App& app, RunFn* run) {
  auto opts = std::make_shared<ServeOpts>();
  auto vopts = std::make_shared<VisionOpts>();
  auto* cmd = app.add_subcommand("serve", "Serve the engine over OpenAI- and Anthropic-compatible HTTP");
  AddCommonFlags(cmd, opts.get());
  AddServerFlags(cmd, opts.get());
  AddEngineFlags(cmd, opts.get());
  AddVisionFlags(cmd, vopts.get());
  cmd->callback([run, opts, vopts, cmd] {
    *run = [opts, vopts, cmd] {
      if (!FinishFlags(cmd, *opts, "serve")) return 2;
      return RunServe(*opts, *vopts);
    };
  });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterServe);

}  // namespace ladle::app
