// The KV fetcher (include/ladle/kvcache/fetcher.h): a FetcherServer over an fs store in a temp
// dir and FetcherClients talking to it over its socket. Round trips through shm, streamed
// per-key replies, shm hits, the LRU and its bounds, put back-pressure, pins released when a
// client leaves, a SIGKILLed fetcher (forked child) failing everything pending within 2 s,
// graceful stop, a malformed client, a throwing completion, 8 threads hammering one pool, and
// the slot pool alone against a model.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "fault_target.h"
#include "ladle/kvcache/fetcher.h"
#include "shm_pool.h"
#include "test_util.h"

namespace kvtest {
namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing_values::IsValueOf;
using testing_values::ValueFor;

constexpr size_t kBlock = 4096;
constexpr auto kWait = std::chrono::seconds(10);

size_t LenFor(const BlockKey& k) { return 8 + k.lo % (kBlock - 8); }

Ms Since(Clock::time_point t) { return std::chrono::duration_cast<Ms>(Clock::now() - t); }

// A fetcher over a fresh fs store (optionally behind a fault target), in this process.
struct Rig {
  TempDir t;
  std::string fault_name;
  std::shared_ptr<FaultControl> fault;
  std::shared_ptr<KvStore> store;
  std::unique_ptr<FetcherServer> srv;

  explicit Rig(size_t slots = 16, uint32_t put_slots = 8, bool faulty = false) {
    StoreOptions so;
    so.gc_in_process = false;
    std::string uri = "fs:" + t.Sub("fs");
    if (faulty) {
      fault_name = "fetch-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
      fault = FaultControl::Named(fault_name);
      uri = "fs:fault:" + fault_name + ":" + t.Sub("fs");
    }
    auto s = KvStore::Open(uri, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store = std::move(s).value();
    FetcherOptions o;
    o.store = store;
    o.socket_path = t.Sub("f.sock");
    o.block_bytes = kBlock;
    o.shm_bytes = slots * kBlock;
    o.put_slots = put_slots;
    auto r = FetcherServer::Start(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    srv = std::move(r).value();
  }
  ~Rig() {
    if (fault) fault->Reset();
  }
  std::unique_ptr<FetcherClient> Connect() {
    auto c = FetcherClient::Connect(srv->socket_path(), Ms(5000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
};

// A one-shot event with a deadline.
class Latch {
 public:
  void Set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds d = kWait) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

struct Fetched {
  std::mutex mu;
  std::vector<std::optional<Result<ShmBlock>>> keys;
  std::vector<Clock::time_point> at;
  size_t calls = 0;
  size_t keys_before_done = 0;
  std::optional<Status> done;
  Clock::time_point done_at;
  Latch latch;
  std::vector<uint32_t> Slots() {
    std::vector<uint32_t> s;
    for (auto& k : keys) {
      if (k && k->ok()) s.push_back((*k)->slot);
    }
    return s;
  }
  StatusCode Code(size_t i) { return keys[i] ? keys[i]->status().code() : StatusCode::kInternal; }
};

// Starts a Fetch; the result fills in as replies arrive.
std::shared_ptr<Fetched> StartFetch(FetcherClient& c, const std::vector<BlockKey>& keys) {
  auto f = std::make_shared<Fetched>();
  f->keys.resize(keys.size());
  f->at.resize(keys.size());
  c.Fetch(
      keys,
      [f](size_t i, Result<ShmBlock> b) {
        std::lock_guard lock(f->mu);
        EXPECT_FALSE(f->keys[i].has_value()) << "key " << i << " answered twice";
        f->keys[i].emplace(std::move(b));
        f->at[i] = Clock::now();
        ++f->calls;
      },
      [f](Status s) {
        {
          std::lock_guard lock(f->mu);
          f->keys_before_done = f->calls;
          f->done = s;
          f->done_at = Clock::now();
        }
        f->latch.Set();
      });
  return f;
}

std::shared_ptr<Fetched> FetchAll(FetcherClient& c, const std::vector<BlockKey>& keys) {
  auto f = StartFetch(c, keys);
  EXPECT_TRUE(f->latch.Wait()) << "fetch did not finish";
  return f;
}

// The first keys.size() keys READY, each with exactly the bytes put under it.
void ExpectBlocks(Fetched& f, const std::vector<BlockKey>& keys) {
  ASSERT_GE(f.keys.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(f.keys[i] && f.keys[i]->ok()) << i << ": " << (f.keys[i] ? f.keys[i]->status().ToString() : "none");
    const ShmBlock& b = **f.keys[i];
    EXPECT_EQ(b.len, LenFor(keys[i]));
    EXPECT_TRUE(IsValueOf(keys[i], b.data, b.len)) << "wrong bytes for key " << i;
  }
}

// Puts `keys` (one chain) through staging slots; every status must be OK.
void PutViaClient(FetcherClient& c, const std::vector<BlockKey>& keys) {
  auto slots = c.AllocPut(keys.size(), Ms(5000));
  ASSERT_TRUE(slots.ok()) << slots.status().ToString();
  ASSERT_EQ(slots->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = ValueFor(keys[i], LenFor(keys[i]));
    PutSlot& s = (*slots)[i];
    ASSERT_EQ(s.capacity, kBlock);
    std::memcpy(s.data, v.data(), v.size());
    s.len = v.size();
  }
  Latch l;
  std::vector<Status> st;
  c.Put(keys, *slots, TrafficClass::kChatbot, std::nullopt, [&](std::vector<Status> s) {
    st = std::move(s);
    l.Set();
  });
  ASSERT_TRUE(l.Wait());
  ASSERT_EQ(st.size(), keys.size());
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
}

// Puts `keys` a few at a time (a pool with few staging slots).
void PutInBatches(FetcherClient& c, const std::vector<BlockKey>& keys, size_t batch) {
  for (size_t i = 0; i < keys.size(); i += batch) {
    std::vector<BlockKey> part(keys.begin() + i, keys.begin() + std::min(keys.size(), i + batch));
    PutViaClient(c, part);
  }
}

Result<size_t> MatchSync(FetcherClient& c, const std::vector<BlockKey>& keys) {
  Latch l;
  std::optional<Result<size_t>> out;
  c.Match(keys, [&](Result<size_t> r) {
    out.emplace(std::move(r));
    l.Set();
  });
  if (!l.Wait()) return Status(StatusCode::kDeadlineExceeded, "match");
  return *out;
}

FetcherStats StatOf(FetcherClient& c) {
  auto s = c.Stat(Ms(5000));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : FetcherStats{};
}

std::vector<BlockKey> Keys(uint64_t from, size_t n) {
  std::vector<BlockKey> k;
  for (size_t i = 0; i < n; ++i) k.push_back(testing_values::KeyFor(from + i));
  return k;
}

TEST(KvFetcher, RoundTripPutFetchMatch) {
  Rig rig;
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->block_bytes(), kBlock);
  EXPECT_EQ(c->slots(), 16u);
  auto keys = Chain(1, 6);
  PutViaClient(*c, keys);
  // What the fetcher wrote is in the store, byte for byte.
  for (const BlockKey& k : keys) {
    std::vector<uint8_t> out;
    ASSERT_TRUE(GetOne(*rig.store, k, &out).ok());
    EXPECT_EQ(out, ValueFor(k, LenFor(k)));
  }
  auto ask = keys;
  ask.push_back(testing_values::KeyFor(999));  // never put
  auto f = FetchAll(*c, ask);
  ASSERT_TRUE(f->done && f->done->ok()) << f->done->ToString();
  EXPECT_EQ(f->keys_before_done, ask.size());  // every on_key before on_done
  ExpectBlocks(*f, keys);
  EXPECT_EQ(f->Code(6), StatusCode::kNotFound);
  ASSERT_EQ(f->Slots().size(), 6u);
  c->Release(f->Slots());

  auto m = MatchSync(*c, keys);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, 6u);
  auto holed = keys;
  holed.insert(holed.begin() + 3, testing_values::KeyFor(998));
  EXPECT_EQ(*MatchSync(*c, holed), 3u);
  EXPECT_EQ(*MatchSync(*c, {}), 0u);
  // Released: nothing pinned, all six cached.
  ASSERT_TRUE(WaitFor([&] { return rig.srv->Stats().slots_pinned == 0; }));
  FetcherStats s = rig.srv->Stats();
  EXPECT_EQ(s.slots_used, 6u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.puts, 6u);
}

TEST(KvFetcher, StreamsShmHitsBeforeSlowStoreReads) {
  Rig rig(16, 8, /*faulty=*/true);
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  auto keys = Keys(100, 4);
  PutViaClient(*c, keys);
  auto warm = FetchAll(*c, {keys[0], keys[1]});
  c->Release(warm->Slots());
  rig.fault->delay_ms = 400;
  const auto start = Clock::now();
  auto f = FetchAll(*c, keys);
  ASSERT_TRUE(f->done && f->done->ok());
  ExpectBlocks(*f, keys);
  // The cached prefix is usable long before the store reads behind it arrive.
  EXPECT_LT(f->at[0] - start, Ms(250));
  EXPECT_LT(f->at[1] - start, Ms(250));
  EXPECT_GE(f->at[2] - start, Ms(350));
  EXPECT_GE(f->at[3] - start, Ms(350));
  EXPECT_GE(f->done_at, f->at[3]);
  EXPECT_EQ(f->keys_before_done, 4u);
  c->Release(f->Slots());
}

TEST(KvFetcher, SecondFetchAfterReleaseIsAnShmHit) {
  Rig rig;
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  auto keys = Keys(200, 5);
  PutViaClient(*c, keys);
  auto f1 = FetchAll(*c, keys);
  ExpectBlocks(*f1, keys);
  c->Release(f1->Slots());
  FetcherStats a = StatOf(*c);
  EXPECT_EQ(a.store_reads, 5u);
  EXPECT_EQ(a.store_hits, 5u);
  auto f2 = FetchAll(*c, keys);
  ExpectBlocks(*f2, keys);
  FetcherStats b = StatOf(*c);
  EXPECT_EQ(b.shm_hits - a.shm_hits, 5u);
  EXPECT_EQ(b.store_reads, a.store_reads);  // no store read...
  EXPECT_EQ(b.store_hits, a.store_hits);    // ...as the store itself counts them
  EXPECT_EQ(b.slots_pinned, 5u);
  EXPECT_EQ(f2->Slots(), f1->Slots());
  c->Release(f2->Slots());
  EXPECT_EQ(StatOf(*c).slots_pinned, 0u);
}

TEST(KvFetcher, LruEvictsOnlyUnpinnedAndBoundsEveryFetch) {
  Rig rig(/*slots=*/4, /*put_slots=*/2);
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  auto k = Keys(300, 8);
  // Put back-pressure: two staging slots, so five asked for gives two and three drops.
  auto got = c->AllocPut(5, Ms(5000));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 2u);
  auto none = c->AllocPut(1, Ms(5000));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 0u);
  EXPECT_EQ(c->put_drops(), 4u);
  EXPECT_EQ(StatOf(*c).put_drops, 4u);
  c->CancelPut(*got);
  PutInBatches(*c, k, 2);  // both slots are back

  auto pinned = FetchAll(*c, {k[0], k[1]});  // held to the end
  ExpectBlocks(*pinned, {k[0], k[1]});
  for (int i : {2, 3}) {  // LRU: k2 then k3
    auto f = FetchAll(*c, {k[i]});
    c->Release(f->Slots());
  }
  FetcherStats s0 = StatOf(*c);
  auto f4 = FetchAll(*c, {k[4]});  // evicts k2, the least recently released
  ExpectBlocks(*f4, {k[4]});
  c->Release(f4->Slots());
  FetcherStats s1 = StatOf(*c);
  EXPECT_EQ(s1.evictions - s0.evictions, 1u);
  auto f3 = FetchAll(*c, {k[3]});  // still cached
  ExpectBlocks(*f3, {k[3]});
  c->Release(f3->Slots());
  FetcherStats s2 = StatOf(*c);
  EXPECT_EQ(s2.shm_hits - s1.shm_hits, 1u);
  EXPECT_EQ(s2.store_reads, s1.store_reads);
  auto f2 = FetchAll(*c, {k[2]});  // evicted: read again (and evicts k4)
  ExpectBlocks(*f2, {k[2]});
  c->Release(f2->Slots());
  FetcherStats s3 = StatOf(*c);
  EXPECT_EQ(s3.store_reads - s2.store_reads, 1u);
  EXPECT_EQ(s3.evictions - s2.evictions, 1u);

  // Two slots pinned, two evictable: a fetch of four gets two, and is refused the rest at once.
  const auto start = Clock::now();
  auto big = FetchAll(*c, {k[4], k[5], k[6], k[7]});
  EXPECT_LT(Since(start), Ms(2000));
  ASSERT_TRUE(big->done && big->done->ok());
  ExpectBlocks(*big, {k[4], k[5]});
  EXPECT_EQ(big->Code(2), StatusCode::kResourceExhausted);
  EXPECT_EQ(big->Code(3), StatusCode::kResourceExhausted);
  // All four pinned: nothing more fits, not even a block that was cached a moment ago.
  auto full = FetchAll(*c, {k[3]});
  EXPECT_EQ(full->Code(0), StatusCode::kResourceExhausted);
  FetcherStats s4 = StatOf(*c);
  EXPECT_EQ(s4.slots_pinned, 4u);
  EXPECT_EQ(s4.slots_free, 0u);
  EXPECT_EQ(s4.exhausted, 3u);
  // The blocks pinned all along were never overwritten.
  ExpectBlocks(*pinned, {k[0], k[1]});
  c->Release(pinned->Slots());
  c->Release(big->Slots());
  EXPECT_EQ(StatOf(*c).slots_pinned, 0u);
  rig.srv->Stats();  // invariants
}

TEST(KvFetcher, ClientDisconnectReleasesItsPinsAndStaging) {
  Rig rig(/*slots=*/4, /*put_slots=*/2);
  auto a = rig.Connect();
  auto b = rig.Connect();
  ASSERT_TRUE(a && b);
  auto k = Keys(400, 8);
  PutInBatches(*a, k, 2);
  auto held = FetchAll(*a, {k[0], k[1], k[2], k[3]});
  ExpectBlocks(*held, {k[0], k[1], k[2], k[3]});
  auto staged = a->AllocPut(2, Ms(5000));
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(staged->size(), 2u);
  auto refused = FetchAll(*b, {k[4]});
  EXPECT_EQ(refused->Code(0), StatusCode::kResourceExhausted);
  EXPECT_EQ(b->AllocPut(1, Ms(5000))->size(), 0u);
  a.reset();  // gone without a single Release
  ASSERT_TRUE(WaitFor([&] {
    FetcherStats s = rig.srv->Stats();
    return s.clients == 1 && s.slots_pinned == 0 && s.put_slots_free == 2;
  }));
  auto all = FetchAll(*b, {k[4], k[5], k[6], k[7]});
  ExpectBlocks(*all, {k[4], k[5], k[6], k[7]});
  b->Release(all->Slots());
  auto slots = b->AllocPut(2, Ms(5000));
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ(slots->size(), 2u);
  b->CancelPut(*slots);
}

TEST(KvFetcher, SigkilledFetcherFailsEverythingPendingWithin2s) {
  TempDir t;
  const std::string dir = t.Sub("fs");
  const std::string sock = t.Sub("f.sock");
  auto keys = Keys(500, 4);
  {
    auto s = KvStore::Open("fs:" + dir, {});
    ASSERT_TRUE(s.ok());
    std::vector<std::vector<uint8_t>> vals;
    std::vector<std::span<const uint8_t>> spans;
    for (const BlockKey& k : keys) vals.push_back(ValueFor(k, LenFor(k)));
    for (auto& v : vals) spans.emplace_back(v);
    for (const Status& st : (*s)->PutSync(keys, spans, TrafficClass::kChatbot)) ASSERT_TRUE(st.ok());
  }  // closed: the child opens it (one opener at a time)
  const std::string fault = "death-" + std::to_string(::getpid());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The fetcher: its store hangs on every read and write (a dead target, a long timeout).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    StoreOptions so;
    so.gc_in_process = false;
    so.domain_timeout = Ms(60000);
    auto s = KvStore::Open("fs:fault:" + fault + ":" + dir, so);
    if (!s.ok()) ::_exit(2);
    FetcherOptions o;
    o.store = std::move(s).value();
    o.socket_path = sock;
    o.block_bytes = kBlock;
    o.shm_bytes = 16 * kBlock;
    // Dead before the socket listens: set after Start, a client could connect and have its put
    // answered in the moment between (seen once under load).
    FaultControl::Named(fault)->dead = true;
    auto srv = FetcherServer::Start(o);
    if (!srv.ok()) ::_exit(3);
    for (;;) ::pause();
  }
  auto killer = [pid] {
    ::kill(pid, SIGKILL);
    int st;
    ::waitpid(pid, &st, 0);
  };
  auto cr = FetcherClient::Connect(sock, Ms(10000));
  if (!cr.ok()) killer();
  ASSERT_TRUE(cr.ok()) << cr.status().ToString();
  auto c = std::move(cr).value();
  const std::string shm = c->shm_name();
  auto f = StartFetch(*c, keys);
  auto put_slots = c->AllocPut(1, Ms(5000));
  ASSERT_TRUE(put_slots.ok() && put_slots->size() == 1);
  Latch put_done;
  std::vector<Status> put_st;
  c->Put(std::vector<BlockKey>{testing_values::KeyFor(599)}, *put_slots, TrafficClass::kAgent, std::nullopt, [&](std::vector<Status> s) {
    put_st = std::move(s);
    put_done.Set();
  });
  // Both are stuck in the store now.
  ASSERT_TRUE(WaitFor([&] {
    auto s = c->Stat(Ms(1000));
    return s.ok() && s->store_reads == 4 && s->puts == 1;
  }));
  EXPECT_FALSE(f->latch.Wait(Ms(50)));

  const auto start = Clock::now();
  killer();
  ASSERT_TRUE(f->latch.Wait(Ms(2000)));
  ASSERT_TRUE(put_done.Wait(Ms(2000)));
  EXPECT_LT(Since(start), Ms(2000));
  EXPECT_EQ(f->done->code(), StatusCode::kUnavailable);
  EXPECT_EQ(f->keys_before_done, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(f->Code(i), StatusCode::kUnavailable);
  ASSERT_EQ(put_st.size(), 1u);
  EXPECT_EQ(put_st[0].code(), StatusCode::kUnavailable);

  // Later calls fail at once, on the caller's thread.
  EXPECT_FALSE(c->alive());
  auto later = StartFetch(*c, keys);
  ASSERT_TRUE(later->done.has_value());
  EXPECT_EQ(later->done->code(), StatusCode::kUnavailable);
  EXPECT_EQ(later->Code(0), StatusCode::kUnavailable);
  EXPECT_EQ(c->Stat(Ms(5000)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(c->AllocPut(1, Ms(5000)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(MatchSync(*c, keys).status().code(), StatusCode::kUnavailable);
  c->Release(std::vector<uint32_t>{0, 1});
  c.reset();

  // A fresh fetcher takes over the stale socket, sweeps the dead one's shm, and serves.
  auto s = KvStore::Open("fs:" + dir, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FetcherOptions o;
  o.store = std::move(s).value();
  o.socket_path = sock;
  o.block_bytes = kBlock;
  o.shm_bytes = 16 * kBlock;
  auto srv = FetcherServer::Start(o);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  struct stat st{};
  EXPECT_NE(::stat(("/dev/shm" + shm).c_str(), &st), 0) << shm << " left behind";
  auto c2 = FetcherClient::Connect(sock, Ms(5000));
  ASSERT_TRUE(c2.ok());
  auto ok = FetchAll(**c2, keys);
  ExpectBlocks(*ok, keys);
  (*c2)->Release(ok->Slots());
}

TEST(KvFetcher, StopFinishesInFlightPutsAndCleansUp) {
  Rig rig(16, 8, /*faulty=*/true);
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  const std::string sock = rig.srv->socket_path(), shm = rig.srv->shm_name();
  struct stat st{};
  ASSERT_EQ(::stat(("/dev/shm" + shm).c_str(), &st), 0);
  rig.fault->delay_ms = 300;
  auto slots = c->AllocPut(1, Ms(5000));
  ASSERT_TRUE(slots.ok() && slots->size() == 1);
  const BlockKey key = testing_values::KeyFor(700);
  auto v = ValueFor(key, LenFor(key));
  std::memcpy((*slots)[0].data, v.data(), v.size());
  (*slots)[0].len = v.size();
  Latch done;
  std::vector<Status> put_st;
  c->Put(std::vector<BlockKey>{key}, *slots, TrafficClass::kChatbot, std::nullopt, [&](std::vector<Status> s) {
    put_st = std::move(s);
    done.Set();
  });
  ASSERT_TRUE(WaitFor([&] { return rig.srv->Stats().puts == 1; }));
  rig.srv->Stop();  // waits for the slow put
  rig.fault->delay_ms = 0;
  EXPECT_EQ(*rig.store->MatchSync(std::span(&key, 1)), 1u);
  ASSERT_TRUE(done.Wait());
  ASSERT_EQ(put_st.size(), 1u);
  EXPECT_TRUE(put_st[0].ok()) << put_st[0].ToString();
  EXPECT_NE(::stat(sock.c_str(), &st), 0) << "socket left behind";
  EXPECT_NE(::stat(("/dev/shm" + shm).c_str(), &st), 0) << "shm left behind";
  ASSERT_TRUE(WaitFor([&] { return !c->alive(); }));
  EXPECT_FALSE(FetcherClient::Connect(sock, Ms(100)).ok());
}

TEST(KvFetcher, MalformedClientIsDroppedOthersServed) {
  Rig rig;
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  auto keys = Keys(800, 2);
  PutViaClient(*c, keys);
  auto f = FetchAll(*c, keys);
  // A release of slots this client does not hold (or twice) is ignored, not trusted.
  c->Release(f->Slots());
  c->Release(f->Slots());
  c->Release(std::vector<uint32_t>{15, 1u << 30});
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, rig.srv->socket_path().c_str());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_TRUE(WaitFor([&] { return rig.srv->Stats().clients == 2; }));
  const char junk[] = "not a header";
  ASSERT_GT(::send(fd, junk, 3, MSG_NOSIGNAL), 0);
  char buf[16];
  EXPECT_EQ(::recv(fd, buf, sizeof buf, 0), 0);  // dropped: EOF
  ::close(fd);
  ASSERT_TRUE(WaitFor([&] { return rig.srv->Stats().clients == 1; }));
  auto again = FetchAll(*c, keys);
  ExpectBlocks(*again, keys);
  c->Release(again->Slots());
  EXPECT_EQ(StatOf(*c).slots_pinned, 0u);  // after the RELEASE: one connection keeps its order
}

TEST(KvFetcher, FetchLongerThanOnePacketIsSplit) {
  Rig rig(16, 8);
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  auto present = Keys(900, 3);
  PutViaClient(*c, present);
  // 4100 keys: over the 4096 a packet holds. Only the first three exist; the pool runs out of
  // slots for the misses in flight, so most are refused: every key is still answered once.
  std::vector<BlockKey> keys = present;
  for (uint64_t i = 0; keys.size() < 4100; ++i) keys.push_back(testing_values::KeyFor(100000 + i));
  auto f = FetchAll(*c, keys);
  ASSERT_TRUE(f->done && f->done->ok());
  EXPECT_EQ(f->keys_before_done, keys.size());
  ExpectBlocks(*f, present);
  for (size_t i = 3; i < keys.size(); ++i) {
    StatusCode code = f->Code(i);
    EXPECT_TRUE(code == StatusCode::kNotFound || code == StatusCode::kResourceExhausted) << i;
  }
  c->Release(f->Slots());
  EXPECT_EQ(*MatchSync(*c, keys), 3u);
  EXPECT_EQ(StatOf(*c).slots_pinned, 0u);
}

TEST(KvFetcher, EightThreadsFetchReleasePutOnSharedKeys) {
  Rig rig(/*slots=*/32, /*put_slots=*/8);
  auto c1 = rig.Connect();
  auto c2 = rig.Connect();
  ASSERT_TRUE(c1 && c2);
  auto shared = Keys(1000, 16);
  PutInBatches(*c1, shared, 8);
  constexpr int kThreads = 8;
#ifdef __SANITIZE_ADDRESS__
  constexpr int kCycles = 60;
#else
  constexpr int kCycles = 200;
#endif
  std::atomic<int> errors{0}, puts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      FetcherClient& c = t % 2 ? *c1 : *c2;
      std::mt19937_64 rng(t);
      for (int i = 0; i < kCycles; ++i) {
        std::vector<BlockKey> ask;
        for (int j = 0; j < 3; ++j) ask.push_back(shared[rng() % shared.size()]);
        if (i % 10 == 5) {
          // A block of this thread's own, put then fetched back.
          const BlockKey mine = testing_values::KeyFor(50000 + t * 1000 + i);
          auto slots = c.AllocPut(1, Ms(5000));
          if (!slots.ok() || slots->size() != 1) {
            ++errors;
            continue;
          }
          auto v = ValueFor(mine, LenFor(mine));
          std::memcpy((*slots)[0].data, v.data(), v.size());
          (*slots)[0].len = v.size();
          Latch l;
          std::atomic<bool> ok{false};
          c.Put(std::vector<BlockKey>{mine}, *slots, TrafficClass::kAgent, std::nullopt, [&](std::vector<Status> s) {
            ok = s.size() == 1 && s[0].ok();
            l.Set();
          });
          if (!l.Wait() || !ok) ++errors;
          ++puts;
          ask.push_back(mine);
        }
        auto f = FetchAll(c, ask);
        std::lock_guard lock(f->mu);
        if (!f->done || !f->done->ok()) ++errors;
        for (size_t j = 0; j < ask.size(); ++j) {
          if (!f->keys[j] || !f->keys[j]->ok()) {
            ++errors;
            continue;
          }
          const ShmBlock& b = **f->keys[j];
          if (b.len != LenFor(ask[j]) || !IsValueOf(ask[j], b.data, b.len)) ++errors;
        }
        c.Release(f->Slots());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(c1->put_drops() + c2->put_drops(), 0u);
  ASSERT_TRUE(WaitFor([&] { return rig.srv->Stats().slots_pinned == 0; }));
  FetcherStats s = rig.srv->Stats();  // checks every pool invariant too
  EXPECT_EQ(s.slots_loading, 0u);
  EXPECT_EQ(s.slots_used + s.slots_free, s.slots);
  EXPECT_EQ(s.put_slots_free, s.put_slots);
  EXPECT_EQ(s.exhausted, 0u);
  EXPECT_EQ(s.shm_hits + s.joined + s.store_reads, s.keys_fetched);
  EXPECT_EQ(s.puts, shared.size() + static_cast<size_t>(puts.load()));
  EXPECT_EQ(s.store_errors, 0u);
  EXPECT_EQ(s.clients, 2u);
}

TEST(KvFetcher, ThrowingCompletionDoesNotKillTheReader) {
  Rig rig;
  auto c = rig.Connect();
  ASSERT_TRUE(c);
  auto keys = Keys(1100, 2);
  PutViaClient(*c, keys);
  Latch done;
  std::vector<uint32_t> slots;
  c->Fetch(
      keys,
      [&](size_t, Result<ShmBlock> b) {
        if (b.ok()) slots.push_back(b->slot);
        throw std::runtime_error("completion bug");
      },
      [&](Status) {
        done.Set();
        throw 42;  // not even a std::exception
      });
  ASSERT_TRUE(done.Wait());
  c->Release(slots);
  EXPECT_TRUE(c->alive());
  auto f = FetchAll(*c, keys);
  ExpectBlocks(*f, keys);
  c->Release(f->Slots());
  EXPECT_EQ(StatOf(*c).slots_pinned, 0u);
}

// The pool alone, against a model, with every invariant checked after every step.
TEST(KvFetcher, SlotPoolRandomOpsKeepInvariants) {
  SlotPool pool(6, 3);
  std::mt19937_64 rng(7);
  std::vector<uint32_t> ready_pins, loading, staged;  // one entry per pin / per load / per slot
  uint64_t loads = 0, refused = 0;
  for (int step = 0; step < 20000; ++step) {
    switch (rng() % 7) {  // as many unpins as pins, so the pool keeps cycling
      case 0:
      case 1: {
        auto a = pool.Pin(testing_values::KeyFor(rng() % 12));
        if (a.got == SlotPool::Got::kExhausted) {
          ++refused;
          ASSERT_EQ(pool.counts().free + pool.counts().lru, 0u);
        } else if (a.got == SlotPool::Got::kHit) {
          ready_pins.push_back(a.slot);
        } else {
          loading.push_back(a.slot);  // a waiter of the read (kLoad or kJoined)
          loads += a.got == SlotPool::Got::kLoad;
        }
        break;
      }
      case 2:
      case 6:
        if (!ready_pins.empty()) {
          size_t i = rng() % ready_pins.size();
          pool.Unpin(ready_pins[i]);
          ready_pins.erase(ready_pins.begin() + i);
        }
        break;
      case 3:
        if (!loading.empty()) {
          // Finish one read: its waiters become READY pins, or all fail together.
          const uint32_t s = loading[rng() % loading.size()];
          const auto n = static_cast<uint32_t>(std::count(loading.begin(), loading.end(), s));
          std::erase(loading, s);
          if (rng() % 4 == 0) {
            pool.LoadFailed(s, n);
          } else {
            pool.LoadDone(s, 100);
            for (uint32_t i = 0; i < n; ++i) ready_pins.push_back(s);
          }
        }
        break;
      case 4: {
        auto got = pool.AllocPut(rng() % 3);
        staged.insert(staged.end(), got.begin(), got.end());
        break;
      }
      case 5:
        if (!staged.empty()) {
          pool.FreePut(staged.back());
          staged.pop_back();
        }
        break;
    }
    pool.CheckInvariants();
    ASSERT_EQ(pool.counts().put_free + staged.size(), 3u);
  }
  EXPECT_GT(loads, 100u);
  EXPECT_GT(refused, 0u);
  EXPECT_GT(pool.counts().evictions, 0u);
}

}  // namespace
}  // namespace kvtest
