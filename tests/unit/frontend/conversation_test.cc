#include "ladle/frontend/conversation.h"

#include <gtest/gtest.h>

namespace ladle::frontend {
namespace {

TEST(Conversation, TextJoinsTextPartsAndSkipsImages) {
  Message m;
  m.content.push_back({ContentPart::Kind::kText, "look: ", {}});
  m.content.push_back({ContentPart::Kind::kImage, "", ImagePart{"data:image/png;base64,AA", "image/png", 4, 4}});
  m.content.push_back({ContentPart::Kind::kText, "what is it?", {}});
  EXPECT_EQ(m.Text(), "look: what is it?");
}

}  // namespace
}  // namespace ladle::frontend
