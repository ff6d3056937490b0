#include "ladle/frontend/conversation.h"

namespace ladle::frontend {

std::string Message::Text() const {
  std::string out;
  for (const auto& part : content) {
    if (part.kind == ContentPart::Kind::kText) out += part.text;
  }
  return out;
}

}  // namespace ladle::frontend
