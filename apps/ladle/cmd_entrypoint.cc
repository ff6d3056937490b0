// `ladle entrypoint`: the public HTTP server (the three APIs, auth, limits, metrics, structured
// output) in front of engines over gRPC: `ladle engine` processes or any worker speaking SMG's
// VllmEngine protocol (`vllm serve --grpc`).
//
//   ladle entrypoint --engine 127.0.0.1:7001 --engine 127.0.0.1:7002 --port 8000
//   ladle entrypoint --etcd http://10.0.0.5:2379 --port 8000   # the engines registered in etcd
#include "entrypoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "commands.h"
#include "ladle/cluster/etcd.h"
#include "ladle/core/logging.h"
#include "ladle/kvcache/fetcher_store.h"

namespace ladle::app {

void AddEntrypointFlags(CLI::App* cmd, EntrypointOpts* eo) {
  cmd->add_option("--engine", eo->engines, "host:port (or grpc://host:port) of an engine, sglang://host:port of an SGLang worker; repeatable")->delimiter(',');
  cmd->add_option("--kv-check", eo->kv_check,
                  "the shared block store in CHECK role, as socket:PATH of the machine's kv-fetcher: the PD hand-off "
                  "waits until the prefill's blocks are visible");
  cmd->add_option("--policy", eo->policy, "routing: balanced (the recipe's balancers), round-robin or least-requests")
      ->capture_default_str()->check(CLI::IsMember({"balanced", "round-robin", "least-requests"}));
  cmd->add_option("--prefill-quota-ms", eo->prefill_quota_ms,
                  "Prefill Load Balancer: compute-quota (ms of the engines' fitted prefill cost) a prefill rank may hold "
                  "before it pulls no more work (an idle rank always takes one)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--wait-engines-ms", eo->wait_engines_ms, "at start, wait this long for an engine to answer")->capture_default_str();
  cmd->add_option("--dead-after-ms", eo->dead_after_ms, "an engine silent this long is dead and its requests move")->capture_default_str();
  cmd->add_option("--name", eo->name, "this entrypoint's id (request ids start with it)")->capture_default_str();
  cmd->add_option("--etcd", eo->etcd,
                  "discover engines in etcd (http://host:port, comma-separated for several): every engine registered "
                  "under --etcd-prefix joins, and leaves when its key goes");
  cmd->add_option("--etcd-prefix", eo->etcd_prefix, "key prefix of the fleet's engines in etcd")->capture_default_str();
  cmd->add_option("--directory-listen", eo->directory_listen,
                  "host:port to serve this entrypoint's shard of the SWA directory on (sharded by key over the live "
                  "entrypoints); unset: the directory is this entrypoint's alone");
  cmd->add_option("--directory-advertise", eo->directory_advertise,
                  "this entrypoint's directory address as the others dial it (default: the listen host and port)");
  cmd->add_option("--directory-peer", eo->directory_peers, "another entrypoint's directory address; repeatable")
      ->delimiter(',');
  cmd->add_option("--directory-etcd-prefix", eo->directory_etcd_prefix,
                  "with --etcd and --directory-listen: where entrypoints register their directory addresses")
      ->capture_default_str();
  cmd->add_option("--directory-lookup-ms", eo->directory_lookup_ms,
                  "deadline of one SWA directory lookup across owners (a late owner is a miss, then a replay)")
      ->capture_default_str();
}

namespace {

// The image stage of an entrypoint: the served model's tower (its config from --model or
// --model-config, as the engines build theirs), for a version with an image token.
Result<std::shared_ptr<vision::ImagePipeline>> EntrypointImages(const EntrypointOpts& eo, frontend::ModelVersion v) {
  if (!frontend::SpecialTokensFor(v).image) return std::shared_ptr<vision::ImagePipeline>();
  const ServeOpts& o = eo.serve;
  engine::ModelConfig mc;
  if (!o.model_config.empty()) {
    LADLE_ASSIGN_OR_RETURN(mc, engine::ModelConfig::FromFile(o.model_config));
  } else if (!o.model.empty()) {
    LADLE_ASSIGN_OR_RETURN(mc, engine::ModelConfig::FromFile(o.model + "/config.json"));
  }
  return BuildImagePipeline(eo.vision, mc, o.model);
}

}  // namespace

int RunEntrypoint(const EntrypointOpts& eo, std::function<void(server::Server*)> on_ready) {
  const ServeOpts& opts = eo.serve;
  auto tok = LoadTokenizer(opts);
  if (!tok.ok()) {
    LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(tok.status().ToString()));
    return tok.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  cluster::RoutedEngineOptions ro;
  ro.engines = eo.engines;
  ro.policy = eo.policy;
  ro.name = eo.name;
  ro.dead_after_ms = eo.dead_after_ms;
  ro.prefill_rank_quota_ns = eo.prefill_quota_ms * 1e6;
  ro.directory_listen = eo.directory_listen;
  ro.directory_advertise = eo.directory_advertise;
  ro.directory_peers = eo.directory_peers;
  ro.directory_lookup_ms = eo.directory_lookup_ms;
  if (eo.kv_check.rfind("socket:", 0) == 0) {
    const std::string path = eo.kv_check.substr(7);
    auto store = kvcache::FetcherStore::Create(
        [path] { return kvcache::FetcherClient::Connect(path, std::chrono::milliseconds(10000)); });
    if (!store.ok()) {
      LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(store.status().ToString()));
      return 1;
    }
    ro.store = std::move(store).value();
  } else if (!eo.kv_check.empty()) {
    LADLE_LOG_ERROR("entrypoint.failed error='--kv-check takes socket:PATH'");
    return 2;
  }
  auto routed = cluster::RoutedEngine::Create(ro, eo.etcd.empty() ? eo.wait_engines_ms : 0);
  if (!routed.ok()) {
    LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(routed.status().ToString()));
    return 1;
  }
  std::unique_ptr<cluster::EtcdWatcher> watcher, directory_watcher;
  std::unique_ptr<cluster::EtcdRegistration> directory_reg;
  if (!eo.etcd.empty()) {
    cluster::EtcdWatcherOptions wo;
    wo.etcd.endpoints = eo.etcd;
    wo.prefix = eo.etcd_prefix;
    auto w = cluster::EtcdWatcher::Start(std::move(wo), routed->get());
    if (!w.ok()) {
      LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(w.status().ToString()));
      return 2;
    }
    watcher = std::move(w).value();
    if (!eo.directory_listen.empty()) {
      // The other entrypoints' directory shards: register this one, watch for the rest.
      cluster::EtcdRegistrationOptions reg;
      reg.etcd.endpoints = eo.etcd;
      reg.prefix = eo.directory_etcd_prefix;
      reg.name = eo.name;
      reg.address = (*routed)->directory_member();
      reg.role = "entrypoint";
      auto r = cluster::EtcdRegistration::Start(std::move(reg));
      cluster::EtcdWatcherOptions dw;
      dw.etcd.endpoints = eo.etcd;
      dw.prefix = eo.directory_etcd_prefix;
      cluster::RoutedEngine* re = routed->get();
      cluster::EtcdWatcher::Members m;
      m.add = [re](const std::string& a) { re->AddDirectoryPeer(a); };
      m.remove = [re](const std::string& a) { re->RemoveDirectoryPeer(a); };
      auto pw = cluster::EtcdWatcher::Start(std::move(dw), std::move(m));
      if (!r.ok() || !pw.ok()) {
        LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe((!r.ok() ? r.status() : pw.status()).ToString()));
        return 2;
      }
      directory_reg = std::move(r).value();
      directory_watcher = std::move(pw).value();
    }
    // As with a static list: wait (bounded) for one discovered engine to answer.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(eo.wait_engines_ms);
    while (std::chrono::steady_clock::now() < until) {
      const auto cs = (*routed)->GetClusterStats();
      if (std::any_of(cs.engines.begin(), cs.engines.end(), [](const auto& e) { return e.alive; })) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  auto sc = BuildServerConfig(opts, tok->version, opts.max_model_len);
  if (!sc.ok()) {
    LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(sc.status().ToString()));
    return 2;
  }
  auto images = EntrypointImages(eo, tok->version);
  if (!images.ok()) {
    LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(images.status().ToString()));
    return 1;
  }
  sc->images = std::move(images).value();
  auto srv = server::Server::Create(std::move(sc).value(), routed->get(), *tok->base);
  if (!srv.ok()) {
    LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(srv.status().ToString()));
    return 1;
  }
  LADLE_LOG_INFO("entrypoint.ready port={} engines={}", (*srv)->port(), (*routed)->GetClusterStats().engines.size());
  if (on_ready) on_ready(srv->get());
  Status run = (*srv)->Run();
  if (watcher) watcher->Stop();
  if (directory_watcher) directory_watcher->Stop();
  if (directory_reg) directory_reg->Stop(true);  // a graceful leave: the others re-shard at once
  (*routed)->Shutdown();
  routed->reset();
  srv->reset();
  if (!run.ok()) {
    LADLE_LOG_ERROR("entrypoint.failed error='{}'", LogSafe(run.ToString()));
    return 1;
  }
  LADLE_LOG_INFO("entrypoint.exit code=0");
  return 0;
}

namespace {

void RegisterEntrypoint(CLI::App& app, RunFn* run) {
  auto eo = std::make_shared<EntrypointOpts>();
  auto* cmd = app.add_subcommand("entrypoint", "Serve the OpenAI/Anthropic APIs in front of `ladle engine` workers over gRPC");
  AddCommonFlags(cmd, &eo->serve);
  AddServerFlags(cmd, &eo->serve);
  AddEntrypointFlags(cmd, eo.get());
  AddVisionFlags(cmd, &eo->vision);
  cmd->add_option("--model", eo->serve.model, "the served model's weights folder: its vision tower encodes images here");
  cmd->add_option("--model-config", eo->serve.model_config, "config.json of the served built-in model (its vision tower)");
  cmd->callback([run, eo, cmd] {
    *run = [eo, cmd] {
      if (!FinishFlags(cmd, eo->serve, "entrypoint")) return 2;
      if (eo->engines.empty() && eo->etcd.empty()) {
        LADLE_LOG_ERROR("entrypoint.failed error='no --engine or --etcd given'");
        return 2;
      }
      return RunEntrypoint(*eo, nullptr);
    };
  });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterEntrypoint);

}  // namespace ladle::app
