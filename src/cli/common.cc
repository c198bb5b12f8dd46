#include "cli/common.h"

#include <csignal>

#include "absl/strings/str_cat.h"
#include "base/duration.h"
#include "base/log.h"

namespace outboxd::cli {
namespace {

relay::StopSignal* g_stop = nullptr;

void OnSignal(int) {
  if (g_stop != nullptr) g_stop->Notify();
}

// Errors a user fixes in configuration or in the database's setup.
bool IsConfigError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kAlreadyExists:
      return true;
    default:
      return false;
  }
}

}  // namespace

int Fail(const absl::Status& status, bool starting) {
  spdlog::error("{}", status.message());
  if (IsConfigError(status) || (starting && status.code() == absl::StatusCode::kUnavailable)) {
    return kExitConfig;
  }
  return kExitFailure;
}

absl::Status ResolveDuration(DurationFlag& flag, absl::string_view name) {
  absl::StatusOr<absl::Duration> parsed = ParseDuration(flag.text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", parsed.status().message()));
  }
  flag.value = *parsed;
  return absl::OkStatus();
}

absl::Status ParseKafkaProperties(const std::vector<std::string>& pairs,
                                  kafka::PublisherOptions& options) {
  for (const std::string& pair : pairs) {
    size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kafka \"", pair, "\": expected KEY=VALUE, e.g. --kafka linger.ms=5"));
    }
    options.properties.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
  }
  return absl::OkStatus();
}

StopOnSignals::StopOnSignals(relay::StopSignal* stop) {
  g_stop = stop;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
}

StopOnSignals::~StopOnSignals() {
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  g_stop = nullptr;
}

}  // namespace outboxd::cli
