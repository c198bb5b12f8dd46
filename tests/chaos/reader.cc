#include "chaos/reader.h"

#include <utility>

namespace outboxd::chaos {

bool Reader::Seen(const std::string& id) const {
  std::lock_guard lock(mu_);
  return seen_.contains(id);
}

size_t Reader::Count() const {
  std::lock_guard lock(mu_);
  return deliveries_.size();
}

int64_t Reader::Skipped() const {
  std::lock_guard lock(mu_);
  return skipped_;
}

int64_t Reader::Malformed() const {
  std::lock_guard lock(mu_);
  return malformed_;
}

void Reader::Record(std::vector<Delivery>& batch, int64_t skipped) {
  std::lock_guard lock(mu_);
  skipped_ += skipped;
  for (Delivery& d : batch) {
    if (d.id.empty() || d.lsn.empty()) ++malformed_;
    seen_.insert(d.id);
    deliveries_.push_back(std::move(d));
  }
  batch.clear();
}

std::vector<Delivery> Reader::TakeRecorded() {
  std::lock_guard lock(mu_);
  return std::move(deliveries_);
}

}  // namespace outboxd::chaos
