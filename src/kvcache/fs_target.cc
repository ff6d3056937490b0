// The fs target: reads through one io_uring per target (a reader thread batching submissions up
// to io_depth in flight), writes on write_threads writer threads as temp file + (optional
// fdatasync) + rename, so a crash leaves the old file, no file, or the whole new one. A key's
// writes and removes always go to the same writer (by key hash), so they run in the order queued. The index is updated after
// the rename: a crash in between leaves a file the index lacks, which fsck adopts.
#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ladle/core/logging.h"
#include "object_format.h"
#include "target.h"

namespace ladle::kvcache {

Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return ResourceExhausted(msg);
  if (err == ENOENT) return NotFound(msg);
  return IoError(msg);
}

namespace {

constexpr size_t kAlign = 4096;
constexpr uint64_t kWakeTag = 0;
constexpr int kMaxRestarts = 3;

void RunGuarded(const char* what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    LADLE_LOG_ERROR("kvcache.callback_threw where={} what={}", what, e.what());
  } catch (...) {
    LADLE_LOG_ERROR("kvcache.callback_threw where={} what=unknown", what);
  }
}

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

class FsTarget final : public Target {
 public:
  FsTarget(std::string dir, TargetOptions opt, std::unique_ptr<Index> index)
      : dir_(std::move(dir)), opt_(opt), index_(std::move(index)) {
    index_->ForEach([&](const BlockKey&, const IndexMeta& m) {
      used_ += m.file_bytes;
      ++objects_;
    });
    capacity_ = opt_.capacity_bytes;
    if (capacity_ == 0) {
      struct statvfs vfs;
      if (::statvfs(dir_.c_str(), &vfs) == 0) capacity_ = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    }
    // One fan-out level of 256 dirs, made here so that a write never pays a mkdir: with two
    // levels (65,536 leaves) nearly every write into a young store created a directory, and the
    // two mkdirs plus the failed open cost more than the 112 KiB write itself (ext4, perf).
    // 256 dirs keep a 10^8-block target at ~4*10^5 entries a dir, which ext4's htree and XFS's
    // B+trees index (3FS, CephFS and GlusterFS keep directory entries in their own indexes).
    for (int i = 0; i < 256; ++i) {
      static constexpr char kHex[] = "0123456789abcdef";
      char sub[3] = {kHex[i >> 4], kHex[i & 15], 0};
      ::mkdir((dir_ + "/" + sub).c_str(), 0755);
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    LADLE_CHECK(wake_fd_ >= 0);
    reader_ = std::thread([this] { ReaderMain(); });
    // Creates, renames and index upserts block in the kernel or RocksDB: several writers keep
    // the device (and the page cache's copy) busy where one would wait on each in turn.
    shards_.resize(std::max(1u, opt_.write_threads));
    for (auto& sh : shards_) sh = std::make_unique<WriteShard>();
    for (auto& sh : shards_) sh->thread = std::thread([this, s = sh.get()] { WriterMain(*s); });
  }

  ~FsTarget() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    Wake();
    for (auto& sh : shards_) {
      { std::lock_guard lock(sh->mu); }  // the writer has checked its predicate or is waiting
      sh->cv.notify_all();
    }
    reader_.join();
    for (auto& sh : shards_) sh->thread.join();
    ::close(wake_fd_);
  }

  const std::string& path() const override { return dir_; }
  Index& index() override { return *index_; }
  uint64_t used_bytes() const override { return used_.load(); }
  uint64_t objects() const override { return objects_.load(); }
  uint64_t capacity_bytes() const override { return capacity_; }
  bool healthy() const override { return healthy_.load(); }

  void ReadAsync(const BlockKey& key, ReadDone done) override {
    {
      std::lock_guard lock(mu_);
      if (!stop_ && healthy_) {
        pending_.push_back(ReadReq{key, std::move(done)});
        done = nullptr;
      }
    }
    if (done) {
      RunGuarded("read", [&] { done(Status(StatusCode::kUnavailable, "kvcache target closed or unhealthy: " + dir_)); });
      return;
    }
    Wake();
  }

  Result<std::vector<uint8_t>> ReadSync(const BlockKey& key) override {
    std::string p = PathOf(key);
    int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "open " + p);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status(StatusCode::kDataLoss, "not a regular file: " + p);
    }
    std::vector<uint8_t> buf(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::pread(fd, buf.data() + got, buf.size() - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::close(fd);
        return ErrnoStatus(err, "read " + p);
      }
      got += static_cast<size_t>(n);
    }
    ::close(fd);
    return buf;
  }

  void WriteAsync(ChunkWrite w, StatusDone done) override {
    BlockKey key = w.key;
    Submit(key, [this, w = std::move(w), done = std::move(done)]() mutable {
      Status s = WriteSync(w);
      RunGuarded("write", [&] { done(std::move(s)); });
    }, [done] { done(Status(StatusCode::kUnavailable, "kvcache target closed")); });
  }

  void RemoveAsync(const BlockKey& key, StatusDone done) override {
    Submit(key, [this, key, done]() {
      Status s = RemoveSync(key);
      RunGuarded("remove", [&] { done(std::move(s)); });
    }, [done] { done(Status(StatusCode::kUnavailable, "kvcache target closed")); });
  }

  Status WriteSync(const ChunkWrite& w) override {
    std::string hex = w.key.Hex();
    std::string dir = dir_ + "/" + hex.substr(0, 2);
    std::string final_path = dir + "/" + hex;
    std::string tmp = dir + "/.tmp." + hex + "." + std::to_string(::getpid()) + "." + std::to_string(tmp_seq_++);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {  // the fan-out dir was removed under us
      ::mkdir(dir.c_str(), 0755);
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (fd < 0) return ErrnoStatus(errno, "create " + tmp);
    const std::vector<uint8_t>& bytes = *w.bytes;
    size_t put = 0;
    int err = 0;
    while (put < bytes.size()) {
      ssize_t n = ::pwrite(fd, bytes.data() + put, bytes.size() - put, static_cast<off_t>(put));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n < 0 ? errno : EIO;
        break;
      }
      put += static_cast<size_t>(n);
    }
    if (err == 0 && opt_.fsync && ::fdatasync(fd) != 0) err = errno;
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && ::rename(tmp.c_str(), final_path.c_str()) != 0) err = errno;
    if (err != 0) {
      ::unlink(tmp.c_str());
      return ErrnoStatus(err, "write " + final_path);
    }
    if (opt_.fsync) {
      // The rename is durable only once the directory is.
      int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
      }
    }
    IndexMeta meta = w.meta;
    meta.file_bytes = bytes.size();
    return Adopt(w.key, meta);
  }

  Status Adopt(const BlockKey& key, const IndexMeta& meta) override {
    std::optional<IndexMeta> old;
    LADLE_RETURN_IF_ERROR(index_->Upsert(key, meta, &old));
    used_ += meta.file_bytes;
    if (old) {
      used_ -= old->file_bytes;
    } else {
      ++objects_;
    }
    return Status::Ok();
  }

  Status RemoveSync(const BlockKey& key) override {
    std::string p = PathOf(key);
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "unlink " + p);
    std::optional<IndexMeta> old;
    LADLE_RETURN_IF_ERROR(index_->Erase(key, &old));
    if (old) {
      used_ -= old->file_bytes;
      --objects_;
    }
    return Status::Ok();
  }

  void Scan(const std::function<void(const BlockKey&)>& fn) override {
    ForEachDir(dir_, [&](const std::string& name, unsigned char) {
      if (name.size() != 2) return;
      std::string l1 = dir_ + "/" + name;
      ForEachDir(l1, [&](const std::string& file, unsigned char) {
        if (file.rfind(".tmp.", 0) == 0) {
          MaybeRemoveTemp(l1 + "/" + file);
          return;
        }
        auto key = BlockKey::FromHex(file);
        if (key.ok()) fn(*key);
      });
    });
  }

 private:
  struct ReadReq {
    BlockKey key;
    ReadDone done;
  };
  struct InFlight {
    ReadReq req;
    int fd = -1;
    size_t size = 0;      // the file's length
    size_t io_len = 0;    // what the reads cover (rounded up for O_DIRECT)
    size_t got = 0;
    bool direct = false;
    std::vector<uint8_t> buf;                         // buffered reads land here directly
    std::unique_ptr<uint8_t, AlignedFree> aligned;    // O_DIRECT reads land here
    uint8_t* dst() { return direct ? aligned.get() : buf.data(); }
  };

  std::string PathOf(const BlockKey& key) const {
    std::string hex = key.Hex();
    return dir_ + "/" + hex.substr(0, 2) + "/" + hex;
  }

  static void ForEachDir(const std::string& dir, const std::function<void(const std::string&, unsigned char)>& fn) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    std::vector<std::pair<std::string, unsigned char>> names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.emplace_back(std::move(n), e->d_type);
    }
    ::closedir(d);
    for (auto& [n, t] : names) fn(n, t);
  }

  // ".tmp.<hex>.<pid>.<seq>": a temp file whose writer is gone is garbage; ours may be in flight.
  static void MaybeRemoveTemp(const std::string& path) {
    size_t dot = path.rfind('.');
    size_t dot2 = dot == std::string::npos ? dot : path.rfind('.', dot - 1);
    if (dot2 == std::string::npos) return;
    long pid = std::strtol(path.c_str() + dot2 + 1, nullptr, 10);
    if (pid == ::getpid()) return;
    struct stat st;
    bool old = ::stat(path.c_str(), &st) == 0 && st.st_mtime + 600 < ::time(nullptr);
    if (old || (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) ::unlink(path.c_str());
  }

  void Wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  struct WriteShard {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stop_writes = false;
    std::thread thread;
  };

  void Submit(const BlockKey& key, std::function<void()> job, std::function<void()> on_closed) {
    WriteShard& sh = *shards_[key.lo % shards_.size()];  // keys are digests: lo is uniform
    {
      std::lock_guard lock(sh.mu);
      if (!sh.stop_writes) {
        sh.jobs.push_back(std::move(job));
        sh.cv.notify_one();
        return;
      }
    }
    RunGuarded("closed", on_closed);
  }

  void WriterMain(WriteShard& sh) {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(sh.mu);
        sh.cv.wait(lock, [&] {
          std::lock_guard l2(mu_);
          return stop_ || !sh.jobs.empty();
        });
        if (sh.jobs.empty()) {
          sh.stop_writes = true;
          return;  // stopping, and every queued write has run
        }
        job = std::move(sh.jobs.front());
        sh.jobs.pop_front();
      }
      RunGuarded("writer", job);
    }
  }

  // Opens the file and queues its first read; false when the request completed already.
  bool Start(InFlight& f) {
    std::string p = PathOf(f.req.key);
    int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
    f.direct = opt_.o_direct;
    int fd = ::open(p.c_str(), flags | (f.direct ? O_DIRECT : 0));
    if (fd < 0 && f.direct && errno == EINVAL) {  // the FS lacks O_DIRECT (tmpfs, some FUSE)
      f.direct = false;
      fd = ::open(p.c_str(), flags);
    }
    if (fd < 0) {
      Finish(f, ErrnoStatus(errno, "open " + p));
      return false;
    }
    f.fd = fd;
    struct stat st;
    // A FIFO or device where a chunk should be would block a read: it is a bad chunk.
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_size) > EncodedChunkSize(kMaxDomains, kMaxValueBytes)) {
      Finish(f, Status(StatusCode::kDataLoss, "not a chunk file: " + p));
      return false;
    }
    f.size = static_cast<size_t>(st.st_size);
    if (f.direct) {
      f.io_len = (f.size + kAlign - 1) / kAlign * kAlign;
      f.aligned.reset(static_cast<uint8_t*>(std::aligned_alloc(kAlign, std::max(f.io_len, kAlign))));
    } else {
      f.io_len = f.size;
      f.buf.resize(f.size);
    }
    if (f.size == 0) {
      Finish(f, std::vector<uint8_t>());
      return false;
    }
    return true;
  }

  void Finish(InFlight& f, Result<std::vector<uint8_t>> r) {
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
    ReadDone done = std::move(f.req.done);
    RunGuarded("read", [&] { done(std::move(r)); });
  }

  void Complete(InFlight& f) {
    if (f.direct) {
      std::vector<uint8_t> out(f.aligned.get(), f.aligned.get() + f.size);
      Finish(f, std::move(out));
    } else {
      Finish(f, std::move(f.buf));
    }
  }

  void ReaderMain() {
    for (int restarts = 0;; ++restarts) {
      try {
        RingLoop();
        return;
      } catch (const std::exception& e) {
        LADLE_LOG_ERROR("kvcache.reader_failed dir={} restarts={} what={}", dir_, restarts, e.what());
      } catch (...) {
        LADLE_LOG_ERROR("kvcache.reader_failed dir={} restarts={} what=unknown", dir_, restarts);
      }
      FailInFlight(IoError("kvcache reader restarted: " + dir_));
      if (restarts >= kMaxRestarts) {  // restarted kMaxRestarts times already
        // Logged first: whoever sees the target unhealthy also finds the reason in the log.
        LADLE_LOG_ERROR("kvcache.target_unhealthy dir={}", dir_);
        healthy_ = false;
        FailPending();
        return;
      }
    }
  }

  void FailInFlight(const Status& s) {
    for (auto& [id, f] : inflight_) Finish(*f, s);
    inflight_.clear();
  }
  void FailPending() {
    std::deque<ReadReq> reqs;
    {
      std::lock_guard lock(mu_);
      reqs.swap(pending_);
    }
    for (ReadReq& r : reqs) RunGuarded("read", [&] { r.done(Status(StatusCode::kUnavailable, "kvcache target unhealthy")); });
  }

  void PrepRead(io_uring* ring, InFlight* f, uint64_t id) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (!sqe) throw std::runtime_error("io_uring: no free SQE");
    io_uring_prep_read(sqe, f->fd, f->dst() + f->got, static_cast<unsigned>(f->io_len - f->got), f->got);
    io_uring_sqe_set_data64(sqe, id);
  }

  void RingLoop() {
    io_uring ring;
    unsigned depth = std::max(1u, opt_.io_depth);
    if (int rc = io_uring_queue_init(depth + 1, &ring, 0); rc < 0) {
      throw std::runtime_error(std::string("io_uring_queue_init: ") + std::strerror(-rc));
    }
    struct RingGuard {
      io_uring* r;
      ~RingGuard() { io_uring_queue_exit(r); }
    } guard{&ring};
    uint64_t wake_buf = 0;
    bool wake_armed = false;
    for (;;) {
      if (!wake_armed) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (!sqe) throw std::runtime_error("io_uring: no SQE for the wake-up read");
        io_uring_prep_read(sqe, wake_fd_, &wake_buf, sizeof wake_buf, 0);
        io_uring_sqe_set_data64(sqe, kWakeTag);
        wake_armed = true;
      }
      std::deque<ReadReq> take;
      bool stopping;
      {
        std::lock_guard lock(mu_);
        stopping = stop_;
        while (!pending_.empty() && inflight_.size() + take.size() < depth) {
          take.push_back(std::move(pending_.front()));
          pending_.pop_front();
        }
      }
      for (size_t i = 0; i < take.size(); ++i) {
        auto f = std::make_unique<InFlight>();
        f->req = std::move(take[i]);
        try {
          if (!Start(*f)) continue;
          uint64_t id = ++next_id_;
          PrepRead(&ring, f.get(), id);
          inflight_.emplace(id, std::move(f));
          if (opt_.reader_fault) opt_.reader_fault();  // tests: an injected reader failure
        } catch (...) {
          // No read in hand may go unanswered: this one fails (unless it is in flight already,
          // which FailInFlight answers), the ones not started go back to the queue's front for
          // the restarted reader (or FailPending, if it is not restarted).
          if (f) Finish(*f, IoError("kvcache reader failed: " + dir_));
          {
            std::lock_guard lock(mu_);
            for (size_t j = take.size(); j-- > i + 1;) pending_.push_front(std::move(take[j]));
          }
          throw;
        }
      }
      if (stopping && inflight_.empty()) {
        FailPending();
        return;
      }
      int rc = io_uring_submit_and_wait(&ring, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        throw std::runtime_error(std::string("io_uring_submit_and_wait: ") + std::strerror(-rc));
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      std::vector<std::pair<uint64_t, int>> done;
      io_uring_for_each_cqe(&ring, head, cqe) {
        done.emplace_back(io_uring_cqe_get_data64(cqe), cqe->res);
        ++seen;
      }
      io_uring_cq_advance(&ring, seen);
      for (auto [id, res] : done) {
        if (id == kWakeTag) {
          wake_armed = false;
          continue;
        }
        auto it = inflight_.find(id);
        LADLE_CHECK(it != inflight_.end());
        InFlight& f = *it->second;
        if (res == -EINTR || res == -EAGAIN) {
          PrepRead(&ring, &f, id);
          continue;
        }
        if (res < 0) {
          Finish(f, ErrnoStatus(-res, "read " + PathOf(f.req.key)));
        } else if (res == 0 || f.got + static_cast<size_t>(res) >= f.size) {
          f.got += static_cast<size_t>(res);
          if (f.got >= f.size) {
            Complete(f);
          } else {
            Finish(f, Status(StatusCode::kDataLoss, "file shrank while read: " + PathOf(f.req.key)));
          }
        } else {
          f.got += static_cast<size_t>(res);
          PrepRead(&ring, &f, id);
          continue;
        }
        inflight_.erase(it);
      }
    }
  }

  std::string dir_;
  TargetOptions opt_;
  std::unique_ptr<Index> index_;
  uint64_t capacity_ = 0;
  std::atomic<uint64_t> used_{0}, objects_{0};
  std::atomic<bool> healthy_{true};
  std::atomic<uint64_t> tmp_seq_{0};
  int wake_fd_ = -1;

  std::mutex mu_;  // pending_, stop_
  bool stop_ = false;
  std::deque<ReadReq> pending_;
  std::unordered_map<uint64_t, std::unique_ptr<InFlight>> inflight_;  // reader thread only
  uint64_t next_id_ = 0;

  std::vector<std::unique_ptr<WriteShard>> shards_;  // fixed after the constructor
  std::thread reader_;
};

}  // namespace

Result<std::unique_ptr<Target>> OpenFsTarget(const std::string& dir, const TargetOptions& options) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, "mkdir " + dir);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return InvalidArgument("kvcache target is not a directory: " + dir);
  bool created = false;
  LADLE_ASSIGN_OR_RETURN(std::unique_ptr<Index> index, Index::Open(dir + "/.index", &created));
  auto target = std::make_unique<FsTarget>(dir, options, std::move(index));
  if (created) {
    // A missing index is rebuilt from the chunk files' headers (fsck verifies the payloads).
    uint64_t adopted = 0;
    target->Scan([&](const BlockKey& key) {
      auto bytes = target->ReadSync(key);
      if (!bytes.ok()) return;
      auto h = DecodeChunkHeader(*bytes);
      if (!h.ok() || !(h->key == key)) return;
      IndexMeta m;
      m.value_len = h->value_len;
      m.write_ms = h->write_ms;
      m.write_id = h->write_id;
      m.last_read_ms = h->write_ms;
      m.expire_ms = h->write_ms + (h->cls == TrafficClass::kAgent ? options.ttl_agent_ms : options.ttl_chatbot_ms);
      m.parent = h->parent;
      m.has_parent = h->has_parent;
      m.depth = h->depth;
      m.cls = h->cls;
      m.members = h->members;
      m.file_bytes = bytes->size();
      if (target->index().Upsert(key, m, nullptr).ok()) ++adopted;
    });
    if (adopted > 0) {
      LADLE_LOG_WARN("kvcache.index_rebuilt dir={} objects={}", dir, adopted);
      // Reopen so the used/objects counters include what was adopted.
      target.reset();
      LADLE_ASSIGN_OR_RETURN(std::unique_ptr<Index> again, Index::Open(dir + "/.index", &created));
      target = std::make_unique<FsTarget>(dir, options, std::move(again));
    }
  }
  return std::unique_ptr<Target>(std::move(target));
}

}  // namespace ladle::kvcache
