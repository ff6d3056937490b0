// LocalImageEncoder: G worker threads, one queue each, dispatch by lb::VisionWorkerLedger.
#include "ladle/vision/image_encoder.h"

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "ladle/core/logging.h"
#include "ladle/engine/vision_model.h"
#include "ladle/lb/vision_lb.h"

namespace ladle::vision {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class LocalImageEncoder final : public ImageEncoder {
 public:
  LocalImageEncoder(std::shared_ptr<const engine::VisionModel> model, const LocalEncoderOptions& o,
                    lb::VisionWorkerPolicy policy)
      : model_(std::move(model)), max_queued_(o.max_queued_images), ledger_(static_cast<uint32_t>(o.workers), policy),
        queues_(static_cast<size_t>(o.workers)), served_(static_cast<size_t>(o.workers), 0) {
    for (int w = 0; w < o.workers; ++w) threads_.emplace_back([this, w] { Work(w); });
  }

  ~LocalImageEncoder() override {
    std::vector<Job> orphans;
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      for (auto& q : queues_) {
        for (Job& j : q) orphans.push_back(std::move(j));
        q.clear();
      }
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (Job& j : orphans) j.done(Status(StatusCode::kCancelled, "the image encoder is shutting down"));
  }

  void Encode(std::shared_ptr<const ImageTensor> image, Done done) override {
    const int64_t patches = image->patches();
    {
      std::lock_guard lk(mu_);
      if (!stop_ && queued_ < max_queued_) {
        // The recipe's rule: the worker currently handling the fewest image patches.
        const std::optional<uint32_t> w = ledger_.Assign(patches);
        if (w) {
          queues_[*w].push_back({std::move(image), std::move(done), Clock::now()});
          ++queued_;
          cv_.notify_all();
          return;
        }
      }
    }
    done(Status(StatusCode::kResourceExhausted, fmt::format("the image encoder has {} images queued", max_queued_)));
  }

  int workers() const override { return static_cast<int>(threads_.size()); }

  EncoderStats GetStats() const override {
    std::lock_guard lk(mu_);
    EncoderStats s = stats_;
    for (uint32_t w = 0; w < ledger_.workers(); ++w) s.patches_in_flight.push_back(ledger_.InFlight(w));
    s.images_per_worker = served_;
    return s;
  }

 private:
  struct Job {
    std::shared_ptr<const ImageTensor> image;
    Done done;
    Clock::time_point queued;
  };

  void Work(int w) {
    for (;;) {
      Job job;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queues_[static_cast<size_t>(w)].empty(); });
        if (stop_) return;
        job = std::move(queues_[static_cast<size_t>(w)].front());
        queues_[static_cast<size_t>(w)].pop_front();
        --queued_;
      }
      const double queue_ms = MsSince(job.queued);
      const auto t0 = Clock::now();
      auto rows = std::make_shared<std::vector<float>>();
      Status st;
      // No exception may escape a worker thread: a bad_alloc on a huge image fails that image.
      try {
        st = model_->Encode(job.image->pixels.data(), job.image->grid_h, job.image->grid_w, rows.get());
      } catch (const std::exception& e) {
        st = Status(StatusCode::kResourceExhausted, fmt::format("the vision encoder failed: {}", e.what()));
      }
      const double encode_ms = MsSince(t0);
      {
        std::lock_guard lk(mu_);
        ledger_.Complete(static_cast<uint32_t>(w), job.image->patches());
        ++served_[static_cast<size_t>(w)];
        if (st.ok()) {
          ++stats_.images;
          stats_.patches += static_cast<uint64_t>(job.image->patches());
          stats_.encode_ms_total += encode_ms;
        } else {
          ++stats_.failed;
        }
      }
      if (!st.ok()) {
        job.done(st);
        continue;
      }
      EncodedImage out;
      out.groups = job.image->groups();
      out.embeds = std::move(rows);
      out.worker = w;
      out.queue_ms = queue_ms;
      out.encode_ms = encode_ms;
      job.done(std::move(out));
    }
  }

  std::shared_ptr<const engine::VisionModel> model_;
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  size_t queued_ = 0;
  lb::VisionWorkerLedger ledger_;
  std::vector<std::deque<Job>> queues_;
  std::vector<uint64_t> served_;
  EncoderStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace

Result<std::unique_ptr<ImageEncoder>> MakeLocalEncoder(std::shared_ptr<const engine::VisionModel> model,
                                                       const LocalEncoderOptions& options) {
  if (!model) return InvalidArgument("the image encoder needs a vision model");
  if (options.workers < 1 || options.workers > 256) return InvalidArgument("image encoder workers must be in [1, 256]");
  LADLE_ASSIGN_OR_RETURN(lb::VisionWorkerPolicy policy, lb::ParseVisionWorkerPolicy(options.policy));
  return std::unique_ptr<ImageEncoder>(new LocalImageEncoder(std::move(model), options, policy));
}

PreprocessConfig PreprocessFor(const engine::VisionModel& model) {
  const auto& c = model.config();
  PreprocessConfig p;
  p.patch = c.vision_patch;
  p.merge = c.vision_merge;
  p.max_side = c.vision_max_side / (c.vision_patch * c.vision_merge) * (c.vision_patch * c.vision_merge);
  return p;
}

}  // namespace ladle::vision
