#include "sink/stored_message.h"

namespace outboxd::sink {

StoredMessage::StoredMessage(const OutgoingMessage& m) {
  const size_t fields = 3 + 2 * m.headers.size();
  size_t text = m.topic.size() + m.key.size() + m.value.size() + fields;  // and the NULs
  for (const Header& h : m.headers) text += h.name.size() + h.value.size();
  const size_t head = sizeof(uint32_t) * (fields + 2);
  size_ = head + text;
  data_ = std::make_unique_for_overwrite<char[]>(size_);
  Put(0, static_cast<uint32_t>(fields));
  uint32_t at = 0;
  size_t field = 0;
  auto append = [&](std::string_view v) {
    Put(1 + field++, at);
    std::memcpy(data_.get() + head + at, v.data(), v.size());
    at += static_cast<uint32_t>(v.size());
    data_[head + at++] = '\0';
  };
  append(m.topic);
  append(m.key);
  append(m.value);
  for (const Header& h : m.headers) {
    append(h.name);
    append(h.value);
  }
  Put(1 + field, at);
}

}  // namespace outboxd::sink
