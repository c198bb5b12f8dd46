#include "outbox/topic_template.h"

#include "absl/strings/str_cat.h"

namespace outboxd::outbox {

absl::StatusOr<TopicTemplate> TopicTemplate::Parse(std::string_view text) {
  TopicTemplate t;
  std::string literal;
  for (size_t i = 0; i < text.size();) {
    if (text[i] != '{') {
      literal += text[i++];
      continue;
    }
    size_t close = text.find('}', i);
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--topic \"", std::string(text),
                       "\": unclosed '{'; placeholders are {type} and {table}"));
    }
    std::string_view name = text.substr(i + 1, close - i - 1);
    Kind kind;
    if (name == "type") {
      kind = Kind::kType;
    } else if (name == "table") {
      kind = Kind::kTable;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--topic \"", std::string(text),
                                                     "\": unknown placeholder {", std::string(name),
                                                     "}; use {type} or {table}"));
    }
    if (!literal.empty()) t.parts_.push_back({Kind::kLiteral, std::move(literal)});
    literal.clear();
    t.parts_.push_back({kind, ""});
    i = close + 1;
  }
  if (!literal.empty()) t.parts_.push_back({Kind::kLiteral, std::move(literal)});
  if (t.parts_.empty()) return absl::InvalidArgumentError("--topic is empty");
  return t;
}

std::string_view TopicTemplate::Render(std::string_view type, std::string_view table,
                                       std::string& buffer) const {
  if (parts_.size() == 1 && parts_[0].kind == Kind::kType) return type;  // the default
  buffer.clear();
  for (const Part& p : parts_) {
    switch (p.kind) {
      case Kind::kLiteral:
        buffer += p.literal;
        break;
      case Kind::kType:
        buffer += type;
        break;
      case Kind::kTable:
        buffer += table;
        break;
    }
  }
  return buffer;
}

}  // namespace outboxd::outbox
