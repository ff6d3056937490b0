// The server's image stage (docs/vision.md) against a gated encoder: a request without images
// never waits on the encoder, even while another request's image is being encoded, and an image
// request reaches the engine with one placeholder per patch group and that image's rows.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "server_fixture.h"
#include "ladle/vision/image_pipeline.h"
#include "test_images.h"

namespace ladle::server::testing {
namespace {

constexpr int kHidden = 8;
constexpr engine::TokenId kImageToken = 129279;

// Holds every image until Release(), then answers each with rows of its group index.
class GatedEncoder : public vision::ImageEncoder {
 public:
  void Encode(std::shared_ptr<const vision::ImageTensor> image, Done done) override {
    std::lock_guard lk(mu_);
    held_.push_back({std::move(image), std::move(done)});
    cv_.notify_all();
  }
  int workers() const override { return 1; }
  vision::EncoderStats GetStats() const override { return {}; }

  bool WaitHeld(size_t n) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(30), [&] { return held_.size() >= n; });
  }
  size_t held() {
    std::lock_guard lk(mu_);
    return held_.size();
  }
  void Release() {
    std::vector<Held> h;
    {
      std::lock_guard lk(mu_);
      h.swap(held_);
    }
    for (auto& [image, done] : h) {
      auto rows = std::make_shared<std::vector<float>>(static_cast<size_t>(image->groups()) * kHidden);
      for (size_t i = 0; i < rows->size(); ++i) (*rows)[i] = static_cast<float>(i / kHidden);
      vision::EncodedImage e;
      e.groups = image->groups();
      e.embeds = rows;
      done(std::move(e));
    }
  }

 private:
  using Held = std::pair<std::shared_ptr<const vision::ImageTensor>, Done>;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Held> held_;
};

class VisionStage : public ServerFixture {
 protected:
  void Start() {
    LADLE_REQUIRE_DATA(ladle::testing::TokenizerPath());
    encoder_ = std::make_shared<GatedEncoder>();
    auto p = vision::ImagePipeline::Create({}, vision::PreprocessConfig{}, encoder_);
    ASSERT_TRUE(p.ok());
    ServerConfig c;
    c.version = frontend::ModelVersion::kV4;
    c.images = std::move(p).value();
    StartServer(std::move(c));
  }
  std::shared_ptr<GatedEncoder> encoder_;
};

TEST_F(VisionStage, TextRequestsNeverWaitOnTheEncoder) {
  Start();
  // 128 × 96 px → 8 × 6 patches → 4 × 3 = 12 placeholders.
  const std::string image_body = R"({"model":"ladle","max_tokens":4,"messages":[{"role":"user","content":[)"
                                 R"({"type":"text","text":"look"},{"type":"image_url","image_url":{"url":")" +
                                 ladle::testing::PngDataUrl(128, 96) + R"("}}]}]})";
  auto image_reply = std::async(std::launch::async, [&] { return Post(port_, "/v1/chat/completions", image_body); });
  ASSERT_TRUE(encoder_->WaitHeld(1));
  // The image is held in the encoder; a text request is answered meanwhile.
  const Reply text = Post(port_, "/v1/chat/completions", ChatBody(false, 4));
  EXPECT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(encoder_->held(), 1u);
  EXPECT_EQ(image_reply.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  encoder_->Release();
  ASSERT_EQ(image_reply.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Reply r = image_reply.get();
  EXPECT_EQ(r.status, 200) << r.body;
  // The engine got the placeholders and the encoder's rows for them.
  const auto prompt = engine_->last_prompt();
  const auto images = engine_->last_images();
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].tokens, 12);
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), kImageToken), 12);
  for (int k = 0; k < images[0].tokens; ++k) EXPECT_EQ(prompt[static_cast<size_t>(images[0].pos + k)], kImageToken);
  ASSERT_TRUE(images[0].embeds);
  ASSERT_EQ(images[0].embeds->size(), static_cast<size_t>(12 * kHidden));
  EXPECT_EQ((*images[0].embeds)[11 * kHidden], 11.0f);
  EXPECT_NE(images[0].hash_hi | images[0].hash_lo, 0u);
}

TEST_F(VisionStage, ImageErrorsAreTheApisOwn400) {
  Start();
  const std::string bad = R"({"model":"ladle","max_tokens":4,"system":"be brief","messages":[{"role":"user","content":[)"
                          R"({"type":"text","text":"look"},{"type":"image","source":{"type":"base64",)"
                          R"("media_type":"image/png","data":"iVBORw0KGgo="}}]}]})";
  const Reply r = Post(port_, "/v1/messages", bad, {{"anthropic-version", "2023-06-01"}});
  EXPECT_EQ(r.status, 400);
  const json::Value v = ParseJson(r.body);
  EXPECT_EQ(v.Find("type")->as_string(), "error");
  EXPECT_EQ(v.Find("error")->Find("type")->as_string(), "invalid_request_error");
  EXPECT_EQ(v.Find("error")->Find("message")->as_string().rfind("messages[0].content[1]: ", 0), 0u) << r.body;
  EXPECT_EQ(encoder_->held(), 0u);
}

}  // namespace
}  // namespace ladle::server::testing
