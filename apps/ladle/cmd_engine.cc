// `ladle engine`: the reference engine with R DP ranks behind gRPC (SMG's VllmEngine protocol
// plus Ladle's LadleEngine service), for `ladle entrypoint` or any SMG-protocol router.
//
//   ladle engine --role prefill --dp 2 --listen 127.0.0.1:7001 --kv-fetcher socket:/run/kvf.sock
//   ladle engine --role decode --listen 0.0.0.0:9002 --etcd http://10.0.0.5:2379   # registers itself
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "commands.h"
#include "ladle/cluster/engine_server.h"
#include "ladle/cluster/etcd.h"
#include "ladle/cluster/kv_event_log.h"
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
  // Discovery (docs/cluster.md): registered under <etcd_prefix><name> while serving.
  std::string etcd;
  std::string etcd_prefix = "/ladle/engines/";
  int64_t etcd_ttl_s = 10;
  std::string advertise;  // host[:port] entrypoints dial; default: the listen host and port
};

// The address entrypoints dial: --advertise (its port defaulting to the bound one), else the
// listen host with the bound port, the machine's host name when listening on every address.
std::string AdvertisedAddress(const EngineOpts& eo, int port) {
  auto host_of = [](std::string_view hp) -> std::pair<std::string, std::string> {
    if (!hp.empty() && hp.front() == '[') {  // [v6]:port
      const size_t close = hp.find(']');
      if (close != std::string_view::npos) {
        const std::string_view rest = hp.substr(close + 1);
        return {std::string(hp.substr(0, close + 1)), rest.size() > 1 && rest[0] == ':' ? std::string(rest.substr(1)) : ""};
      }
    }
    const size_t colon = hp.rfind(':');
    if (colon == std::string_view::npos || hp.find(':') != colon) return {std::string(hp), ""};
    return {std::string(hp.substr(0, colon)), std::string(hp.substr(colon + 1))};
  };
  if (!eo.advertise.empty()) {
    auto [host, p] = host_of(eo.advertise);
    return fmt::format("{}:{}", host, p.empty() || p == "0" ? std::to_string(port) : p);
  }
  std::string host = host_of(eo.listen).first;
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {0};
    host = ::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0' ? name : "127.0.0.1";
  }
  return fmt::format("{}:{}", host, port);
}

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
  auto kv_events = std::make_shared<cluster::KvEventLog>(eo.dp);  // SglangScheduler.SubscribeKvEvents
  auto stack = BuildEngineStack(opts, *tok, eo.dp, dir, name, [&](int r) { return cluster::KvEventLog::Hook(kv_events, r); });
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
  so.kv_events = kv_events;
  if (grammar) so.mask_factory = MakeMaskFactory(grammar, tok->version, tok->version_tok.get());
  auto srv = cluster::EngineServer::Start(std::move(so), (*stack)->Ranks());
  if (!srv.ok()) {
    LADLE_LOG_ERROR("engine.failed error='{}'", LogSafe(srv.status().ToString()));
    return 1;
  }
  dir->Attach(srv->get());
  std::unique_ptr<cluster::EtcdRegistration> reg;
  if (!eo.etcd.empty()) {
    cluster::EtcdRegistrationOptions ro;
    ro.etcd.endpoints = eo.etcd;
    ro.prefix = eo.etcd_prefix;
    ro.name = name;
    ro.address = AdvertisedAddress(eo, (*srv)->port());
    ro.role = eo.role;
    ro.dp = eo.dp;
    ro.ttl_s = eo.etcd_ttl_s;
    auto r = cluster::EtcdRegistration::Start(std::move(ro));
    if (!r.ok()) {
      LADLE_LOG_ERROR("engine.failed error='{}'", LogSafe(r.status().ToString()));
      dir->Attach(nullptr);
      (*srv)->Shutdown(0);
      return 2;
    }
    reg = std::move(r).value();
  }
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
  // A graceful leave first: entrypoints watching etcd stop routing here at once.
  if (reg) reg->Stop(/*revoke=*/true);
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
  cmd->add_option("--etcd", eo->etcd,
                  "register in etcd (http://host:port, comma-separated for several) under --etcd-prefix with a lease, "
                  "kept alive while serving and revoked on shutdown");
  cmd->add_option("--etcd-prefix", eo->etcd_prefix, "key prefix of the fleet's engines in etcd")->capture_default_str();
  cmd->add_option("--etcd-ttl-s", eo->etcd_ttl_s, "lease TTL: a crashed engine leaves the fleet this long after")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{3600}));
  cmd->add_option("--advertise", eo->advertise,
                  "host[:port] entrypoints dial (default: the --listen host, or this machine's host name when listening "
                  "on 0.0.0.0, with the bound port)");
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
