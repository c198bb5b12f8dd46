// The --topic template: "{type}" (default), "outbox.{table}.{type}", ... Placeholders
// are {type} (the event's type column) and {table}; anything else is rejected at
// start-up.
//
//   OUTBOXD_ASSIGN_OR_RETURN(TopicTemplate t, TopicTemplate::Parse("events.{type}"));
//   std::string_view topic = t.Render("pedido.confirmado", "outbox", buffer);
#ifndef OUTBOXD_OUTBOX_TOPIC_TEMPLATE_H_
#define OUTBOXD_OUTBOX_TOPIC_TEMPLATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace outboxd::outbox {

class TopicTemplate {
 public:
  static absl::StatusOr<TopicTemplate> Parse(std::string_view text);
  // The topic for one event; may point into `buffer` or into `type`.
  std::string_view Render(std::string_view type, std::string_view table, std::string& buffer) const;

 private:
  enum class Kind { kLiteral, kType, kTable };
  struct Part {
    Kind kind;
    std::string literal;
  };
  std::vector<Part> parts_;
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_TOPIC_TEMPLATE_H_
