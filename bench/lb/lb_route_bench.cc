// lb_route_bench: what routing one request costs the entrypoint, at 64 engines (the issue's
// goal: under 50 µs). Fake engines: the loads are the balancers' own ledgers, pre-filled so a
// decision scans busy ranks, not an empty fleet. Each iteration is one request's whole life in
// the balancer: Submit + Pull + Release (prefill), Route + Grow + Release (decode).
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "ladle/lb/decode_lb.h"
#include "ladle/lb/hash_ring.h"
#include "ladle/lb/prefill_lb.h"

namespace {

using namespace ladle::lb;

// args: engines, DP ranks per engine.
void BM_PrefillRoute(benchmark::State& state, const char* policy) {
  const auto engines = static_cast<uint32_t>(state.range(0)), dp = static_cast<uint32_t>(state.range(1));
  PrefillLbConfig cfg;
  cfg.cost = {.a = 90e3, .b = 6, .d = 3, .e = 5e6};
  cfg.initial_demand = {0.5, 0.3, 0.15, 0.05};
  auto router = std::move(MakePrefillRouter(policy, cfg, Topology::Uniform(engines, dp))).value();
  std::mt19937_64 rng(1);
  RequestId id = 0;
  auto len = [&] { return static_cast<int64_t>(1000 + rng() % 100000); };
  // Every rank busy with a few requests.
  for (uint32_t k = 0; k < engines * dp * 4; ++k) router->Submit({++id, len(), 0});
  for (uint32_t e = 0; e < engines; ++e) (void)router->Pull(e, 1e18);
  RequestId oldest = 1;
  uint32_t engine = 0;
  for (auto _ : state) {
    router->Submit({++id, len(), static_cast<int64_t>(rng() % 1000)});
    benchmark::DoNotOptimize(router->Pull(engine, 1e18));
    engine = (engine + 1) % engines;
    router->Release(oldest++);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_DecodeRoute(benchmark::State& state, DecodePolicy policy) {
  const auto engines = static_cast<uint32_t>(state.range(0)), dp = static_cast<uint32_t>(state.range(1));
  DecodeBalancer lb(policy, DecodeLbConfig{.max_requests = 256, .max_kv_tokens = 4'000'000},
                    Topology::Uniform(engines, dp));
  std::mt19937_64 rng(2);
  RequestId id = 0;
  for (uint32_t k = 0; k < engines * dp * 32; ++k) (void)lb.Route(++id, static_cast<int64_t>(rng() % 30000));
  RequestId oldest = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(lb.Route(++id, static_cast<int64_t>(rng() % 30000)));
    lb.Grow(id, 1);
    lb.Release(oldest++);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_HashRingOwner(benchmark::State& state) {
  HashRing ring;
  for (int i = 0; i < state.range(0); ++i) (void)ring.Add("entrypoint-" + std::to_string(i));
  std::mt19937_64 rng(3);
  for (auto _ : state) benchmark::DoNotOptimize(ring.Owner({rng(), rng()}));
}

BENCHMARK_CAPTURE(BM_PrefillRoute, lb, "lb")->Args({64, 1})->Args({64, 8});
BENCHMARK_CAPTURE(BM_PrefillRoute, round_robin, "round-robin")->Args({64, 8});
BENCHMARK_CAPTURE(BM_PrefillRoute, least_requests, "least-requests")->Args({64, 8});
BENCHMARK_CAPTURE(BM_DecodeRoute, lb, DecodePolicy::kDualPath)->Args({64, 1})->Args({64, 8});
BENCHMARK_CAPTURE(BM_DecodeRoute, round_robin, DecodePolicy::kRoundRobin)->Args({64, 8});
BENCHMARK_CAPTURE(BM_DecodeRoute, least_requests, DecodePolicy::kLeastRequests)->Args({64, 8});
BENCHMARK(BM_HashRingOwner)->Arg(8)->Arg(64);

}  // namespace

BENCHMARK_MAIN();
