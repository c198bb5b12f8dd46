// KeyOrder: a line per key (its first and last unreported message), the messages
// chained behind each other through `next_`, and the ready set, lowest first.
#include "sink/key_order.h"

#include <cassert>

namespace outboxd::sink {

void KeyOrder::Add(uint64_t seq, absl::string_view key) {
  auto [line, fresh] = lines_.try_emplace(key, Line{.first = seq, .last = seq});
  if (fresh) {
    ready_.insert(seq);
    return;
  }
  next_[line->second.last] = seq;
  line->second.last = seq;
}

std::optional<uint64_t> KeyOrder::NextReady() const {
  if (ready_.empty()) return std::nullopt;
  return *ready_.begin();
}

void KeyOrder::Sent(uint64_t seq) { ready_.erase(seq); }

void KeyOrder::Resend(uint64_t seq) { ready_.insert(seq); }

void KeyOrder::Remove(uint64_t seq, absl::string_view key) {
  auto line = lines_.find(key);
  const bool first = line != lines_.end() && line->second.first == seq;
  assert(first && "a message is reported only as the first of its key");
  ready_.erase(seq);
  if (!first) return;
  auto next = next_.find(seq);
  if (next == next_.end()) {
    lines_.erase(line);
    return;
  }
  line->second.first = next->second;
  ready_.insert(next->second);
  next_.erase(next);
}

std::vector<uint64_t> KeyOrder::Followers(uint64_t seq) const {
  std::vector<uint64_t> followers;
  for (auto next = next_.find(seq); next != next_.end(); next = next_.find(next->second)) {
    followers.push_back(next->second);
  }
  return followers;
}

void KeyOrder::Clear() {
  lines_.clear();
  next_.clear();
  ready_.clear();
}

}  // namespace outboxd::sink
