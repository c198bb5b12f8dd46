// ConfirmingSink: the entries until each is reported, their per-key order, the reports
// (a failure's followers behind it, the delivery timeout), and wake_fd(): one epoll
// descriptor over a timerfd armed for the next deadline and the broker's descriptors.
#include "sink/confirming_sink.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace outboxd::sink {
namespace {

// What an entry holds beside its StoredMessage, counted in InFlightBytes() so the
// relay's --max-in-flight-bytes bounds the sink's memory, not only the message text:
// the map node with the Entry (~120 bytes), the two allocations' headers, and what
// KeyOrder holds for it (a ready-set node, or a link behind its key's previous one).
constexpr uint64_t kEntryOverhead = 192;

// This abseil's string_view is its own type.
absl::string_view AbslView(std::string_view v) { return absl::string_view(v.data(), v.size()); }

}  // namespace

ConfirmingSink::ConfirmingSink(const SinkSettings& settings, std::string broker)
    : on_delivery_(settings.on_delivery),
      delivery_timeout_(settings.delivery_timeout),
      broker_(std::move(broker)) {}

ConfirmingSink::~ConfirmingSink() {
  assert(closed_ && "a broker's sink calls Close() in its destructor");
  if (timer_fd_ >= 0) close(timer_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::Status ConfirmingSink::OpenWakeFd() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || timer_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll/timerfd: ", std::strerror(errno)));
  }
  return WatchSignal(timer_fd_);
}

absl::Status ConfirmingSink::WatchSignal(int fd) {
  epoll_event ev{.events = EPOLLIN, .data = {.fd = fd}};
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  drained_fds_.push_back(fd);
  return absl::OkStatus();
}

void ConfirmingSink::WatchSocket(int fd) {
  epoll_event ev{.events = EPOLLIN, .data = {.fd = fd}};
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  }
}

void ConfirmingSink::ArmTimer() {
  const absl::Time now = absl::Now();
  absl::Time next = NextWake(now);
  if (delivery_timeout_ != absl::InfiniteDuration() && !entries_.empty()) {
    next = std::min(next, entries_.begin()->second.produced_at + delivery_timeout_);
  }
  itimerspec spec{};
  if (next != absl::InfiniteFuture()) {
    // A zero it_value disarms: the earliest is one nanosecond from now.
    spec.it_value = absl::ToTimespec(std::max(next - now, absl::Nanoseconds(1)));
  }
  timerfd_settime(timer_fd_, 0, &spec, nullptr);
}

ConfirmingSink::Entries::iterator ConfirmingSink::Add(const OutgoingMessage& message) {
  Entry e{.tag = message.tag, .message = StoredMessage(message), .produced_at = absl::Now()};
  e.bytes = e.message.size() + kEntryOverhead;
  const uint64_t seq = next_seq_++;
  auto [it, added] = entries_.emplace(seq, std::move(e));
  bytes_ += it->second.bytes;
  order_.Add(seq, AbslView(it->second.message.key()));
  return it;
}

// Reports go in key order (a follower is published only after its predecessor's
// report, expiry goes oldest first), so `it` is the first of its key: the next one
// takes its place and may be published.
void ConfirmingSink::Remove(Entries::iterator it) {
  order_.Remove(it->first, AbslView(it->second.message.key()));
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void ConfirmingSink::Report(const Entry& e, const absl::Status& status, int64_t offset) {
  if (!on_delivery_) return;
  DeliveryReport report{
      .tag = e.tag, .status = status, .offset = offset, .topic = e.message.topic()};
  if (!status.ok()) {
    report.key = e.message.key();
    report.value = e.message.value();
    for (size_t i = 0; i < e.message.header_count(); ++i) {
      report.headers.push_back(e.message.header(i));
    }
  }
  on_delivery_(report);
}

void ConfirmingSink::Acknowledge(Entries::iterator it, int64_t offset) {
  Report(it->second, absl::OkStatus(), offset);
  Remove(it);
}

int ConfirmingSink::Fail(Entries::iterator it, const absl::Status& status) {
  const std::vector<uint64_t> followers = order_.Followers(it->first);
  const absl::Status follows = absl::FailedPreconditionError(
      absl::StrCat("follows an earlier message of its key that failed: ", status.message()));
  Report(it->second, status, -1);
  Remove(it);
  int served = 1;
  for (uint64_t seq : followers) {
    auto follower = entries_.find(seq);
    if (follower == entries_.end()) break;
    Report(follower->second, follows, -1);
    Remove(follower);
    ++served;
  }
  return served;
}

// With a finite delivery timeout (the polling relay's attempts), a message not
// acknowledged in time is reported failed; an acknowledgement that comes later is
// ignored (its entry is gone).
int ConfirmingSink::ExpireTimedOut() {
  if (delivery_timeout_ == absl::InfiniteDuration()) return 0;
  int served = 0;
  const absl::Time now = absl::Now();
  while (!entries_.empty() && entries_.begin()->second.produced_at + delivery_timeout_ <= now) {
    served += Fail(entries_.begin(),
                   absl::UnavailableError(absl::StrCat("not acknowledged by ", broker_, " within ",
                                                       absl::FormatDuration(delivery_timeout_))));
  }
  return served;
}

int ConfirmingSink::Step() {
  int served = Serve();
  served += ExpireTimedOut();
  ArmTimer();
  return served;
}

void ConfirmingSink::DrainWake() {
  uint64_t count;
  for (int fd : drained_fds_) {
    while (read(fd, &count, sizeof count) > 0) {
    }
  }
}

int ConfirmingSink::Poll(int timeout_ms) {
  DrainWake();
  int served = Step();
  if (served > 0 || timeout_ms <= 0) return served;
  pollfd p{.fd = epoll_fd_, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return served;
  DrainWake();
  return served + Step();
}

absl::Status ConfirmingSink::Flush(absl::Duration timeout) {
  return PollUntilConfirmed(*this, timeout, broker_);
}

absl::Status ConfirmingSink::Health() const { return fatal_; }

int ConfirmingSink::InFlight() const { return static_cast<int>(entries_.size()); }

uint64_t ConfirmingSink::InFlightBytes() const { return bytes_; }

int ConfirmingSink::wake_fd() const { return epoll_fd_; }

int ConfirmingSink::Close(absl::Duration flush_timeout) {
  if (closed_) return 0;
  if (flush_timeout > absl::ZeroDuration()) Flush(flush_timeout).IgnoreError();
  on_delivery_ = nullptr;
  const int dropped = static_cast<int>(entries_.size());
  entries_.clear();
  order_.Clear();
  bytes_ = 0;
  Disconnect();
  closed_ = true;
  return dropped;
}

void ConfirmingSink::RaiseFatalErrorForTesting(std::string_view reason) {
  fatal_ = absl::AbortedError(std::string(reason));
}

}  // namespace outboxd::sink
