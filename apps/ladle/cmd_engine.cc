// `ladle engine`: the reference engine with R DP ranks behind gRPC (SMG's VllmEngine protocol
// plus Ladle's LadleEngine service), for `ladle entrypoint` or any SMG-protocol router.
//
//   ladle engine --role prefill --dp 2 --listen 127.0.0.1:7001 --kv-fetcher socket:/run/kvf.sock
#include <fmt/format.h>
#include <signal.h>

#include <fstream>

#include "commands.h"
#include "ladle/cluster/engine_server.h"
#include "ladle/core/logging.h"
#include "ladle/structured/compile_service.h"
#include "ladle/structured/mask_provider.h"
#include "serve_common.h"

namespace ladle::app {

namespace {

struct EngineOpts {
  ServeOpts serve;
  std::string role = "both";
  int dp = 1;
  std::string listen = "127.0.0.1:0";
  std::string name;
  std::string port_file;
};

// Builds mask providers from constraints sent as data, with this process's compile service.
cluster::MaskFactory MakeMaskFactory(std::shared_ptr<structured::CompileService> svc, frontend::ModelVersion version,
                                     const tokenizer::Tokenizer* version_tok) {
  return [svc, version, version_tok](cluster::RemoteConstraint c, cluster::MaskCallback done) {
    structured::ConstraintSpec spec;
    structured::MaskOptions mo;
    if (!c.wire.empty()) {
      auto w = structured::ParseConstraintWire(c.wire);
      if (!w.ok()) return done(w.status());
      spec = std::move(w->spec);
      mo = std::move(w->opts);
    } else {
      // Another gateway's standard field: the whole output constrained, JSON budget-aware.
      auto kind = structured::ParseConstraintKind(c.kind == "grammar" ? "ebnf" : c.kind);
      if (!kind.ok()) return done(kind.status());
      spec.kind = *kind;
      spec.payload = c.payload;
      spec.version = version;
      spec.param = "sampling_params." + c.kind;
      const bool json = spec.kind == structured::ConstraintKind::kJsonSchema || spec.kind == structured::ConstraintKind::kJsonObject;
      mo = structured::MaskOptionsFor(version, *version_tok, false, c.n, static_cast<uint32_t>(std::max(0, c.max_tokens)), json);
    }
    svc->GetAsync(spec, [done, mo](const structured::CompileResult& r) {
      if (!r.ok()) return done(r.status());
      done(std::shared_ptr<engine::MaskProvider>(std::make_shared<structured::StructuredMaskProvider>(*r, mo)));
    });
  };
}

int RunEngine(const EngineOpts& eo) {
  const ServeOpts& opts = eo.serve;
  // Signals are waited for by this thread; every thread started below inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto role = cluster::ParseRole(eo.role);
  if (!role.ok() || eo.dp < 1) {
    LADLE_LOG_ERROR("engine.failed error='{}'", role.ok() ? "--dp must be >= 1" : LogSafe(role.status().ToString()));
    return 2;
  }
  auto tok = LoadTokenizer(opts);
  if (!tok.ok()) {
    LADLE_LOG_ERROR("engine.failed error='{}'", LogSafe(tok.status().ToString()));
    return tok.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string name = eo.name.empty() ? fmt::format("engine-{}-{}", eo.role, ::getpid()) : eo.name;
  auto dir = std::make_shared<cluster::ForwardingSwaDirectory>();
  auto stack = BuildEngineStack(opts, *tok, eo.dp, dir, name);
  if (!stack.ok()) {
    LADLE_LOG_ERROR("engine.failed error='{}'", LogSafe(stack.status().ToString()));
    return 1;
  }
  std::shared_ptr<structured::CompileService> grammar;
  if (auto vocab = structured::VocabularyFor(*tok->version_tok, tok->version); vocab.ok()) {
    structured::CompileServiceOptions go;
    go.threads = static_cast<size_t>(opts.grammar_threads);
    go.max_entries = static_cast<size_t>(opts.grammar_cache_entries);
    go.max_bytes = static_cast<size_t>(opts.grammar_cache_mb) << 20;
    go.compile.max_compile_ms = static_cast<uint32_t>(opts.grammar_compile_ms);
    go.workers = opts.grammar_workers;
    auto svc = structured::CompileService::Create(std::move(vocab).value(), go);
    if (svc.ok()) grammar = std::move(svc).value();
  }
  cluster::EngineServerOptions so;
  so.listen = eo.listen;
  cluster::EngineInfo& info = so.info;
  info.name = name;
  info.role = *role;
  info.served_model_name = opts.served_model_names.empty() ? "ladle" : opts.served_model_names[0];
  info.block_size = (*stack)->model_config.block_size;
  info.key_extras = (*stack)->key_extras;
  info.cost = (*stack)->cost;
  info.max_model_len = (*stack)->config.max_model_len;
  info.eos_token_id = static_cast<int>((*stack)->config.eos_id);
  info.vocab_size = static_cast<int>((*stack)->model_config.vocab_size);
  so.swa_pool = (*stack)->config.swa_pool;
  if (grammar) so.mask_factory = MakeMaskFactory(grammar, tok->version, tok->version_tok.get());
  auto srv = cluster::EngineServer::Start(std::move(so), (*stack)->Ranks());
  if (!srv.ok()) {
    LADLE_LOG_ERROR("engine.failed error='{}'", LogSafe(srv.status().ToString()));
    return 1;
  }
  dir->Attach(srv->get());
  if (!eo.port_file.empty()) {
    // Written whole, then renamed, so a reader never sees a partial port.
    const std::string tmp = eo.port_file + ".tmp";
    std::ofstream(tmp) << (*srv)->port() << "\n";
    std::rename(tmp.c_str(), eo.port_file.c_str());
  }
  LADLE_LOG_INFO("engine.ready name={} role={} dp={} port={}", name, eo.role, eo.dp, (*srv)->port());
  int sig = 0;
  sigwait(&sigs, &sig);
  LADLE_LOG_INFO("engine.stopping signal={}", sig);
  dir->Attach(nullptr);
  (*srv)->Shutdown(opts.drain_deadline_ms);
  srv->reset();
  stack->reset();
  grammar.reset();
  LADLE_LOG_INFO("engine.exit code=0");
  return 0;
}

void RegisterEngine(CLI::App& app, RunFn* run) {
  auto eo = std::make_shared<EngineOpts>();
  auto* cmd = app.add_subcommand("engine", "Serve the reference engine's DP ranks over gRPC for `ladle entrypoint`");
  AddCommonFlags(cmd, &eo->serve);
  AddEngineFlags(cmd, &eo->serve);
  cmd->add_option("--role", eo->role, "prefill, decode or both")->capture_default_str()->check(CLI::IsMember({"prefill", "decode", "both"}));
  cmd->add_option("--dp", eo->dp, "DP ranks: engine loops, each with its own KV pool")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--listen", eo->listen, "host:port of the gRPC server (port 0: any free one)")->capture_default_str();
  cmd->add_option("--name", eo->name, "this engine's id in the fleet (default: engine-ROLE-PID)");
  cmd->add_option("--port-file", eo->port_file, "write the port here once serving");
  cmd->add_option("--served-model-name", eo->serve.served_model_names, "the model name reported to routers")->delimiter(',');
  cmd->callback([run, eo, cmd] {
    *run = [eo, cmd] {
      if (!FinishFlags(cmd, eo->serve, "engine")) return 2;
      return RunEngine(*eo);
    };
  });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterEngine);

}  // namespace ladle::app
