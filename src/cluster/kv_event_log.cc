#include "ladle/cluster/kv_event_log.h"

#include <chrono>

namespace ladle::cluster {

namespace {
double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

KvEventLog::KvEventLog(int ranks, size_t max_entries, size_t max_tokens)
    : max_entries_(std::max<size_t>(max_entries, 1)), max_tokens_(max_tokens), ranks_(static_cast<size_t>(std::max(ranks, 1))) {
  // Batch 1 of every rank: its cache is empty (the log is made before its engine).
  for (Rank& r : ranks_) {
    engine::BlockEvent e;
    e.kind = engine::BlockEvent::Kind::kCleared;
    r.log.push_back({r.next++, UnixSeconds(), std::move(e)});
  }
}

std::function<void(engine::BlockEvent)> KvEventLog::Hook(std::shared_ptr<KvEventLog> log, int rank) {
  return [log = std::move(log), rank](engine::BlockEvent e) { log->Append(rank, std::move(e)); };
}

void KvEventLog::Append(int rank, engine::BlockEvent e) {
  if (rank < 0 || rank >= ranks()) return;
  {
    std::lock_guard lock(mu_);
    Rank& r = ranks_[static_cast<size_t>(rank)];
    r.tokens += e.tokens.size();
    r.log.push_back({r.next++, UnixSeconds(), std::move(e)});
    while (r.log.size() > 1 && (r.log.size() > max_entries_ || r.tokens > max_tokens_)) {
      r.tokens -= r.log.front().event.tokens.size();
      r.log.pop_front();
    }
  }
  std::vector<std::shared_ptr<std::function<void()>>> wake;
  {
    std::lock_guard lock(watch_mu_);
    for (const auto& [id, w] : watchers_) {
      if (w.first == rank) wake.push_back(w.second);
    }
  }
  for (const auto& w : wake) (*w)();
}

std::pair<uint64_t, uint64_t> KvEventLog::Range(int rank) const {
  std::lock_guard lock(mu_);
  const Rank& r = ranks_.at(static_cast<size_t>(rank));
  return {r.log.empty() ? r.next : r.log.front().seq, r.next};
}

std::optional<KvEventLog::Entry> KvEventLog::At(int rank, uint64_t seq) const {
  std::lock_guard lock(mu_);
  const Rank& r = ranks_.at(static_cast<size_t>(rank));
  if (r.log.empty() || seq >= r.next) return std::nullopt;
  const uint64_t first = r.log.front().seq;
  return r.log[static_cast<size_t>(seq <= first ? 0 : seq - first)];  // numbers are consecutive
}

uint64_t KvEventLog::Watch(int rank, std::function<void()> wake) {
  std::lock_guard lock(watch_mu_);
  const uint64_t id = next_watch_++;
  watchers_.push_back({id, {rank, std::make_shared<std::function<void()>>(std::move(wake))}});
  return id;
}

void KvEventLog::Unwatch(uint64_t id) {
  std::lock_guard lock(watch_mu_);
  std::erase_if(watchers_, [&](const auto& w) { return w.first == id; });
}

}  // namespace ladle::cluster
