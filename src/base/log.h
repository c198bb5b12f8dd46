// Logging: spdlog, plus formatters for abseil types. Debian's abseil keeps its own
// absl::string_view (not std::string_view), which fmt cannot print on its own.
//
//   spdlog::error("cannot publish: {}", status);          // absl::Status
//   spdlog::warn("table {}", status.message());           // absl::string_view
#ifndef OUTBOXD_BASE_LOG_H_
#define OUTBOXD_BASE_LOG_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(const absl::Status& s, Context& ctx) const {
    absl::string_view m = s.message();
    return fmt::formatter<std::string_view>::format(std::string_view(m.data(), m.size()), ctx);
  }
};

#endif  // OUTBOXD_BASE_LOG_H_
