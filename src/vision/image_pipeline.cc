// The image stage: fetch → probe + limits → decode → resize on I/O threads, then the encoder.
#include "ladle/vision/image_pipeline.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <list>
#include <optional>
#include <unordered_map>

#include <xxhash.h>

#include "ladle/core/logging.h"
#include <mutex>

#include "ladle/core/thread_pool.h"

namespace ladle::vision {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Anything wrong with the image the client named is the client's to fix: a 400 naming the part.
Status AboutImage(const Status& s, const std::string& where) {
  return Status(StatusCode::kInvalidArgument, fmt::format("{}: {}", where, s.message()));
}

// One request's images on their way through the encoder: the last callback (or the first
// failure) answers, exactly once.
struct Gather {
  std::mutex mu;
  std::vector<PreparedImage> images;
  size_t remaining = 0;
  bool answered = false;
  ImagePipeline::Done done;
};

class Pipeline final : public ImagePipeline {
 public:
  Pipeline(const ImagePipelineOptions& o, const PreprocessConfig& pre, std::shared_ptr<ImageEncoder> encoder,
           Result<std::unique_ptr<ImageFetcher>> fetcher)
      : options_(o), pre_(pre), encoder_(std::move(encoder)), fetcher_(std::move(fetcher).value()),
        pool_(static_cast<size_t>(o.io_threads)) {}

  void Prepare(std::vector<ImageRef> refs, Done done) override { Start(std::move(refs), std::move(done), false); }
  void Measure(std::vector<ImageRef> refs, Done done) override { Start(std::move(refs), std::move(done), true); }

  void Start(std::vector<ImageRef> refs, Done done, bool measure_only) {
    if (refs.empty()) {
      done(std::vector<PreparedImage>{});
      return;
    }
    {
      std::lock_guard lk(mu_);
      ++stats_.requests;
      ++stats_.in_flight;
    }
    auto gather = std::make_shared<Gather>();
    gather->done = std::move(done);
    pool_.Submit([this, refs = std::move(refs), gather, measure_only]() mutable {
      // No exception may escape into the pool: a throw fails this request only.
      try {
        Run(std::move(refs), gather, measure_only);
      } catch (const std::exception& e) {
        Answer(gather, Status(StatusCode::kInternal, fmt::format("image stage failed: {}", e.what())));
      }
    });
  }

  // Encodes still in flight call back into this object: wait for them (the local encoder
  // always answers; a remote one within its RPC deadline), bounded all the same.
  ~Pipeline() override {
    std::unique_lock lk(mu_);
    if (!idle_.wait_for(lk, std::chrono::seconds(60), [&] { return stats_.in_flight == 0; })) {
      std::fprintf(stderr, "vision: image pipeline destroyed with %llu requests in flight\n",
                   static_cast<unsigned long long>(stats_.in_flight));
      std::abort();
    }
  }

  const ImagePipelineOptions& options() const override { return options_; }
  PipelineStats GetStats() const override {
    PipelineStats s;
    {
      std::lock_guard lk(mu_);
      s = stats_;
    }
    std::lock_guard lk(cache_mu_);
    s.cache_hits = cache_hits_;
    s.cache_misses = cache_misses_;
    s.cache_bytes = cache_bytes_;
    s.cache_entries = lru_.size();
    return s;
  }
  ImageEncoder& encoder() override { return *encoder_; }

 private:
  void Run(std::vector<ImageRef> refs, const std::shared_ptr<Gather>& gather, bool measure_only) {
    if (static_cast<int>(refs.size()) > options_.max_images) {
      Answer(gather, Status(StatusCode::kInvalidArgument,
                            fmt::format("{}: a request may carry at most {} images ({} given)",
                                        refs[static_cast<size_t>(options_.max_images)].where, options_.max_images,
                                        refs.size())));
      return;
    }
    struct Todo {
      size_t index;
      Key key;
      std::shared_ptr<const ImageTensor> tensor;
    };
    std::vector<Todo> todo;
    std::vector<PreparedImage> prepared(refs.size());
    int64_t total_patches = 0;
    for (size_t i = 0; i < refs.size(); ++i) {
      const ImageRef& ref = refs[i];
      PreparedImage& p = prepared[i];
      const auto t0 = Clock::now();
      auto fetched = fetcher_->Fetch(ref.url);
      if (!fetched.ok()) return Answer(gather, AboutImage(fetched.status(), ref.where));
      p.fetch_ms = MsSince(t0);
      if (!ref.url.starts_with("data:")) {
        std::lock_guard lk(mu_);
        ++stats_.fetched;
      }
      const auto t1 = Clock::now();
      // The header first: the total-patch limit is checked before any pixel buffer exists.
      auto info = ProbeImage(fetched->bytes);
      if (!info.ok()) return Answer(gather, AboutImage(info.status(), ref.where));
      int gh = 0, gw = 0;
      GridFor(info->width, info->height, pre_, &gh, &gw);
      total_patches += static_cast<int64_t>(gh) * gw;
      if (total_patches > options_.max_total_patches) {
        return Answer(gather, Status(StatusCode::kInvalidArgument,
                                     fmt::format("{}: the request's images need {} patches, over the limit of {}",
                                                 ref.where, total_patches, options_.max_total_patches)));
      }
      if (measure_only) {
        p.width = info->width;
        p.height = info->height;
        p.grid_h = gh;
        p.grid_w = gw;
        p.groups = (gh / pre_.merge) * (gw / pre_.merge);
        continue;
      }
      // The same file again (a conversation resending its images every turn): its embeddings
      // come from the cache, with no decode, resize or encode.
      const Key key = KeyOf(fetched->bytes);
      if (std::optional<PreparedImage> hit = CacheGet(key)) {
        const double fetch_ms = p.fetch_ms;
        p = std::move(*hit);
        p.fetch_ms = fetch_ms;
        p.decode_ms = p.encode_ms = 0;
        continue;
      }
      auto decoded = DecodeImage(fetched->bytes, options_.image);
      if (!decoded.ok()) return Answer(gather, AboutImage(decoded.status(), ref.where));
      auto tensor = Preprocess(*decoded, pre_);
      if (!tensor.ok()) return Answer(gather, AboutImage(tensor.status(), ref.where));
      p.width = decoded->width;
      p.height = decoded->height;
      p.grid_h = tensor->grid_h;
      p.grid_w = tensor->grid_w;
      p.groups = tensor->groups();
      p.hash_hi = tensor->hash_hi;
      p.hash_lo = tensor->hash_lo;
      p.decode_ms = MsSince(t1);
      todo.push_back({i, key, std::make_shared<const ImageTensor>(std::move(tensor).value())});
    }
    {
      std::lock_guard lk(gather->mu);
      gather->images = std::move(prepared);
      gather->remaining = todo.size();
    }
    if (measure_only || todo.empty()) {
      Answer(gather, Status::Ok());
      return;
    }
    // All at once: the encoder's workers take them in parallel.
    for (const Todo& t : todo) {
      const std::string where = refs[t.index].where;
      encoder_->Encode(t.tensor, [this, gather, i = t.index, key = t.key, where](Result<EncodedImage> r) {
        if (!r.ok()) {
          Status s = r.status();
          Answer(gather, Status(s.code(), fmt::format("{}: {}", where, s.message())));
          return;
        }
        bool last = false, bad = false;
        PreparedImage done;
        {
          std::lock_guard lk(gather->mu);
          if (gather->answered) return;
          PreparedImage& p = gather->images[i];
          bad = r->groups != p.groups;
          if (!bad) {
            p.embeds = std::move(r->embeds);
            p.encode_ms = r->encode_ms;
            done = p;
            last = --gather->remaining == 0;
          }
        }
        if (bad) {
          Answer(gather, Status(StatusCode::kInternal, fmt::format("{}: the encoder returned the wrong row count", where)));
          return;
        }
        CachePut(key, std::move(done));
        if (last) Answer(gather, Status::Ok());
      });
    }
  }

  // The embedding cache: encoded file bytes (XXH3-128) → the prepared image, LRU under a byte
  // bound (the rows dominate: groups × hidden floats).
  struct Key {
    uint64_t hi = 0, lo = 0;
    bool operator==(const Key& o) const { return hi == o.hi && lo == o.lo; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)); }
  };
  static Key KeyOf(std::string_view bytes) {
    const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    return {h.high64, h.low64};
  }
  static size_t CostOf(const PreparedImage& p) { return (p.embeds ? p.embeds->size() * sizeof(float) : 0) + 256; }

  std::optional<PreparedImage> CacheGet(const Key& key) {
    std::lock_guard lk(cache_mu_);
    auto it = cache_index_.find(key);
    if (it == cache_index_.end()) {
      ++cache_misses_;
      return std::nullopt;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    ++cache_hits_;
    return it->second->second;
  }

  void CachePut(const Key& key, PreparedImage p) {
    const size_t cost = CostOf(p);
    if (options_.embedding_cache_bytes == 0 || cost > options_.embedding_cache_bytes) return;
    std::lock_guard lk(cache_mu_);
    if (cache_index_.count(key) != 0) return;
    lru_.emplace_front(key, std::move(p));
    cache_index_[key] = lru_.begin();
    cache_bytes_ += cost;
    while (cache_bytes_ > options_.embedding_cache_bytes) {
      const auto& victim = lru_.back();
      cache_bytes_ -= CostOf(victim.second);
      cache_index_.erase(victim.first);
      lru_.pop_back();
    }
    LADLE_CHECK(cache_index_.size() == lru_.size());
  }

  // Answers once: ok with the images, or the first failure.
  void Answer(const std::shared_ptr<Gather>& g, Status status) {
    Done done;
    std::vector<PreparedImage> images;
    {
      std::lock_guard lk(g->mu);
      if (g->answered) return;
      g->answered = true;
      done = std::move(g->done);
      images = std::move(g->images);
    }
    {
      std::lock_guard lk(mu_);
      if (--stats_.in_flight == 0) idle_.notify_all();
      if (status.ok()) {
        stats_.images += images.size();
      } else {
        ++stats_.failed;
      }
    }
    if (status.ok()) {
      done(std::move(images));
    } else {
      done(std::move(status));
    }
  }

  ImagePipelineOptions options_;
  PreprocessConfig pre_;
  std::shared_ptr<ImageEncoder> encoder_;
  std::unique_ptr<ImageFetcher> fetcher_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  PipelineStats stats_;
  mutable std::mutex cache_mu_;
  std::list<std::pair<Key, PreparedImage>> lru_;  // most recent first
  std::unordered_map<Key, std::list<std::pair<Key, PreparedImage>>::iterator, KeyHash> cache_index_;
  size_t cache_bytes_ = 0;
  uint64_t cache_hits_ = 0, cache_misses_ = 0;
  ThreadPool pool_;  // last: joined first, while everything it uses still exists
};

}  // namespace

Result<std::unique_ptr<ImagePipeline>> ImagePipeline::Create(const ImagePipelineOptions& options,
                                                             const PreprocessConfig& preprocess,
                                                             std::shared_ptr<ImageEncoder> encoder) {
  if (!encoder) return InvalidArgument("the image pipeline needs an encoder");
  if (options.io_threads < 1 || options.max_images < 1 || options.max_total_patches < 1) {
    return InvalidArgument("image pipeline: io_threads, max_images and max_total_patches must be positive");
  }
  auto fetcher = ImageFetcher::Create(options.fetch);
  if (!fetcher.ok()) return fetcher.status();
  return std::unique_ptr<ImagePipeline>(new Pipeline(options, preprocess, std::move(encoder), std::move(fetcher)));
}

}  // namespace ladle::vision
