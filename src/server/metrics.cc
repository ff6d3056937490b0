#include "ladle/server/metrics.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <iterator>

namespace ladle::server {

namespace {

// This process's resident set from /proc/self/statm (pages); -1 where there is no /proc.
double ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long total = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &total, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) : -1;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(std::string_view name, std::string* out) const {
  auto it = std::back_inserter(*out);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    fmt::format_to(it, "{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  fmt::format_to(it, "{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  fmt::format_to(it, "{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      rate_at_(std::chrono::steady_clock::now()) {}

void Metrics::CountRequest(std::string_view api, int http_status) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(api), http_status}];
}
void Metrics::ObserveTtft(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.Observe(seconds);
}
void Metrics::ObserveInterToken(double seconds) {
  std::lock_guard lock(mu_);
  itl_.Observe(seconds);
}
void Metrics::AddTokens(int64_t prompt, int64_t completion) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}
void Metrics::SetInFlight(int64_t n) {
  std::lock_guard lock(mu_);
  in_flight_ = n;
}

std::string Metrics::Render(const engine::Stats& stats) {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - rate_at_).count();
  if (dt >= 1.0) {
    tokens_per_s_ = stats.generated_tokens >= rate_tokens_ ? (stats.generated_tokens - rate_tokens_) / dt : 0.0;
    rate_tokens_ = stats.generated_tokens;
    rate_at_ = now;
  }
  std::string out;
  auto it = std::back_inserter(out);
  out += "# HELP ladle_requests_total HTTP requests by API and status.\n# TYPE ladle_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    fmt::format_to(it, "ladle_requests_total{{api=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  }
  out += "# HELP ladle_time_to_first_token_seconds Time from request arrival to the first token.\n"
         "# TYPE ladle_time_to_first_token_seconds histogram\n";
  ttft_.Render("ladle_time_to_first_token_seconds", &out);
  out += "# HELP ladle_inter_token_latency_seconds Time between consecutive tokens of a request.\n"
         "# TYPE ladle_inter_token_latency_seconds histogram\n";
  itl_.Render("ladle_inter_token_latency_seconds", &out);
  auto gauge = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  gauge("ladle_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", prompt_tokens_);
  gauge("ladle_completion_tokens_total", "counter", "Completion tokens of finished requests.", completion_tokens_);
  gauge("ladle_requests_in_flight", "gauge", "Generation requests the server holds.", in_flight_);
  gauge("ladle_queue_depth", "gauge", "Requests waiting in the engine.", stats.queue_depth);
  gauge("ladle_running_batch", "gauge", "Sequences in the engine's running batch.", stats.running);
  gauge("ladle_kv_blocks_used", "gauge", "Global-KV blocks in use.", stats.kv_blocks_used);
  gauge("ladle_kv_blocks_total", "gauge", "Global-KV blocks in the pool.", stats.kv_blocks_total);
  gauge("ladle_prefix_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.", stats.prefix_hit_tokens);
  gauge("ladle_generated_tokens_total", "counter", "Tokens the engine generated.", stats.generated_tokens);
  gauge("ladle_kv_store_writes_total", "counter", "Blocks written to the persistent KV store.", stats.kv_store_writes);
  gauge("ladle_kv_store_writes_agent_total", "counter", "Blocks written to the KV store in the agent class.",
        stats.kv_store_writes_agent);
  gauge("ladle_kv_store_writes_chatbot_total", "counter", "Blocks written to the KV store in the chatbot class.",
        stats.kv_store_writes_chatbot);
  gauge("ladle_kv_store_write_drops_total", "counter", "Blocks not written: the KV store's writes in flight were at their bound.",
        stats.kv_store_write_drops);
  gauge("ladle_kv_store_write_errors_total", "counter", "Blocks the KV store failed to write.", stats.kv_store_write_errors);
  gauge("ladle_prefix_hit_tokens_store_total", "counter", "Prompt tokens whose KV blocks came from the persistent store.",
        stats.prefix_hit_tokens_store);
  gauge("ladle_kv_store_fetches_total", "counter", "Prefix reads started from the persistent store.", stats.kv_store_fetches);
  gauge("ladle_kv_store_fetch_blocks_total", "counter", "Blocks read from the persistent store into the pool.",
        stats.kv_store_fetch_blocks);
  gauge("ladle_kv_store_fetch_timeouts_total", "counter", "Store reads cut by their deadline (the rest recomputed).",
        stats.kv_store_fetch_timeouts);
  gauge("ladle_kv_store_fetch_seconds_total", "counter", "Time store reads took, summed.", stats.kv_store_fetch_seconds_total);
  if (stats.kv_fetcher) {
    gauge("ladle_kv_fetcher_up", "gauge", "1 while the engine is connected to its kv-fetcher process.",
          stats.kv_fetcher_connected ? 1 : 0);
    gauge("ladle_kv_fetcher_reconnects_total", "counter", "Reconnections to a restarted kv-fetcher.",
          stats.kv_fetcher_reconnects);
    gauge("ladle_kv_fetcher_shm_hit_blocks_total", "counter",
          "Fetched blocks the kv-fetcher served from its shared-memory pool (this fetcher's lifetime).",
          stats.kv_fetcher_shm_hit_blocks);
    gauge("ladle_kv_fetcher_store_read_blocks_total", "counter",
          "Fetched blocks the kv-fetcher read from the store (this fetcher's lifetime).", stats.kv_fetcher_store_read_blocks);
    gauge("ladle_kv_fetcher_shm_slots", "gauge", "Block slots of the kv-fetcher's shared-memory pool.", stats.kv_fetcher_slots);
    gauge("ladle_kv_fetcher_shm_slots_used", "gauge", "Slots holding a block.", stats.kv_fetcher_slots_used);
    gauge("ladle_kv_fetcher_shm_slots_pinned", "gauge", "Slots pinned by an engine copy in progress.",
          stats.kv_fetcher_slots_pinned);
    gauge("ladle_kv_fetcher_write_drops_total", "counter", "Blocks not written: the write queue or staging slots were full.",
          stats.kv_fetcher_write_drops);
  }
  gauge("ladle_kv_loading", "gauge", "Requests waiting for their prefix blocks to arrive from the store.", stats.kv_loading);
  gauge("ladle_swa_hits_total", "counter", "Prefix hits whose SWA KVCache entry was in the host pool (prefix skipped exactly).",
        stats.swa_hits);
  gauge("ladle_swa_misses_total", "counter", "Prefix hits without an SWA entry (the last window replayed).", stats.swa_misses);
  gauge("ladle_replayed_tokens_total", "counter", "Prompt tokens recomputed only to rebuild the SWA ring.", stats.replayed_tokens);
  gauge("ladle_handoff_exports_total", "counter", "PD hand-off: prefilled requests whose state was exported.",
        stats.handoff_exports);
  gauge("ladle_handoff_imports_total", "counter", "PD hand-off: requests continued from an exported state.",
        stats.handoff_imports);
  gauge("ladle_handoff_fallbacks_total", "counter",
        "PD hand-off: states that were missing or did not fit (the request took the hit policy).", stats.handoff_fallbacks);
  if (!stats.rank_loads.empty()) {
    // Per DP rank of the cluster's engines: what the balancers see (docs/cluster.md, "Metrics").
    struct Family {
      const char* name;
      const char* type;
      const char* help;
      double (*get)(const engine::RankLoad&);
    };
    static constexpr Family kFamilies[] = {
        {"ladle_rank_requests", "gauge", "Requests this entrypoint has on the rank.",
         [](const engine::RankLoad& r) { return static_cast<double>(r.requests); }},
        {"ladle_rank_kv_tokens", "gauge", "KV tokens of this entrypoint's requests on the rank (Decode Load Balancer).",
         [](const engine::RankLoad& r) { return static_cast<double>(r.kv_tokens); }},
        {"ladle_rank_quota_seconds", "gauge", "Prefill compute-quota outstanding on the rank (Prefill Load Balancer).",
         [](const engine::RankLoad& r) { return r.quota_seconds; }},
        {"ladle_rank_quota_seconds_total", "counter", "Prefill compute-quota dispatched to the rank.",
         [](const engine::RankLoad& r) { return r.quota_seconds_total; }},
        {"ladle_rank_running", "gauge", "Sequences running on the rank, as it last reported.",
         [](const engine::RankLoad& r) { return static_cast<double>(r.running); }},
        {"ladle_rank_waiting", "gauge", "Sequences waiting on the rank, as it last reported.",
         [](const engine::RankLoad& r) { return static_cast<double>(r.waiting); }},
    };
    for (const Family& f : kFamilies) {
      fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
      for (const auto& r : stats.rank_loads) {
        // Engine names come from the engines' own GetInfo: keep label values to safe bytes.
        std::string name = r.engine;
        for (char& c : name) {
          if (c == '"' || c == '\\' || c == '\n') c = '_';
        }
        fmt::format_to(it, "{}{{engine=\"{}\",role=\"{}\",rank=\"{}\"}} {}\n", f.name, name, r.role, r.rank, f.get(r));
      }
    }
  }
  if (!stats.handoff_latency_buckets.empty()) {
    out += "# HELP ladle_handoff_latency_seconds PD hand-off: a prefill's first token to the decode engine's first.\n"
           "# TYPE ladle_handoff_latency_seconds histogram\n";
    uint64_t cum = 0;
    const auto& bounds = engine::kHandoffLatencyBoundsS;
    for (size_t i = 0; i < std::size(bounds) && i < stats.handoff_latency_buckets.size(); ++i) {
      cum += stats.handoff_latency_buckets[i];
      fmt::format_to(it, "ladle_handoff_latency_seconds_bucket{{le=\"{}\"}} {}\n", bounds[i], cum);
    }
    if (stats.handoff_latency_buckets.size() > std::size(bounds)) cum += stats.handoff_latency_buckets.back();
    fmt::format_to(it, "ladle_handoff_latency_seconds_bucket{{le=\"+Inf\"}} {}\nladle_handoff_latency_seconds_sum {}\n"
                   "ladle_handoff_latency_seconds_count {}\n", cum, stats.handoff_latency_seconds_total, cum);
  }
  if (!stats.spec_verify_lengths.empty()) {
    gauge("ladle_spec_draft_tokens_total", "counter", "Speculative decoding: draft tokens verified.", stats.spec_draft_tokens);
    gauge("ladle_spec_accepted_tokens_total", "counter", "Speculative decoding: draft tokens accepted.",
          stats.spec_accepted_tokens);
    gauge("ladle_spec_verify_tokens_total", "counter",
          "Speculative decoding: tokens in verify spans (each request's last token plus its drafts).",
          stats.spec_verify_tokens);
    // A histogram of L (drafts verified per request per step), buckets le = 0 … γ.
    out += "# HELP ladle_spec_verify_length Drafts verified per request per step.\n# TYPE ladle_spec_verify_length histogram\n";
    uint64_t cum = 0, sum = 0;
    for (size_t l = 0; l < stats.spec_verify_lengths.size(); ++l) {
      cum += stats.spec_verify_lengths[l];
      sum += l * stats.spec_verify_lengths[l];
      fmt::format_to(it, "ladle_spec_verify_length_bucket{{le=\"{}\"}} {}\n", l, cum);
    }
    fmt::format_to(it, "ladle_spec_verify_length_bucket{{le=\"+Inf\"}} {}\nladle_spec_verify_length_sum {}\n"
                   "ladle_spec_verify_length_count {}\n", cum, sum, cum);
  }
  gauge("ladle_swa_pool_entries", "gauge", "SWA KVCache entries in the host pool.", stats.swa_pool_entries);
  gauge("ladle_swa_pool_bytes", "gauge", "Bytes of SWA KVCache entries in the host pool.", stats.swa_pool_bytes);
  gauge("ladle_swa_pool_stored_total", "counter", "SWA KVCache entries stored.", stats.swa_pool_stored);
  gauge("ladle_swa_pool_expired_total", "counter", "SWA KVCache entries dropped by their TTL.", stats.swa_pool_expired);
  gauge("ladle_swa_pool_evicted_total", "counter", "SWA KVCache entries evicted for room.", stats.swa_pool_evicted);
  gauge("ladle_swap_in_copies_total", "counter", "Blocks and SWA entries copied into the KV storage during forwards.",
        stats.swap_in_copies);
  gauge("ladle_swap_in_copy_seconds_total", "counter", "Time swap-in copies took.", stats.swap_in_copy_seconds_total);
  gauge("ladle_swap_in_exposed_seconds_total", "counter",
        "Swap-in copy time a forward waited through (not hidden behind compute).", stats.swap_in_exposed_seconds_total);
  gauge("ladle_generation_tokens_per_second", "gauge", "Generated tokens per second between scrapes.", tokens_per_s_);
  // The Prometheus client libraries' name, so dashboards and the load test find it.
  gauge("process_resident_memory_bytes", "gauge", "Resident memory of the server process.", ResidentBytes());
  gauge("ladle_device_idle_fraction", "gauge", "Fraction of time the device thread was idle.", stats.device_idle_fraction);
  if (stats.expert_parallel) {
    const auto& ep = stats.ep;
    gauge("ladle_ep_ranks", "gauge", "Expert-parallel ranks of the MoE layers.", ep.ranks);
    out += "# HELP ladle_moe_lb Slowest EP rank's routed tokens over the mean rank's, last steps (agg: worst layer, mean "
           "over layers, mean without EPLB on the same tokens).\n# TYPE ladle_moe_lb gauge\n";
    fmt::format_to(it, "ladle_moe_lb{{agg=\"max\"}} {}\nladle_moe_lb{{agg=\"mean\"}} {}\nladle_moe_lb{{agg=\"static\"}} {}\n",
                   ep.moe_lb_max, ep.moe_lb_mean, ep.moe_lb_static);
    gauge("ladle_moe_lb_wall", "gauge", "Slowest EP rank's expert time over the mean rank's, last steps.", ep.moe_lb_wall);
    gauge("ladle_moe_lb_steps", "gauge", "Steps the moe_lb figures cover.", ep.recent_steps);
    gauge("ladle_eplb_rearrangements_total", "counter", "Expert placements switched in.", ep.rearrangements);
    gauge("ladle_eplb_bytes_moved_total", "counter", "Expert weight bytes copied between EP ranks by re-arrangements.",
          ep.bytes_moved);
    gauge("ladle_eplb_bytes_copied_local_total", "counter", "Expert weight bytes copied within an EP rank.",
          ep.bytes_copied_local);
    gauge("ladle_eplb_last_rearrange_seconds", "gauge", "Plan and copy time of the last re-arrangement.",
          ep.last_rearrange_ms / 1000.0);
  }
  return out;
}

}  // namespace ladle::server
