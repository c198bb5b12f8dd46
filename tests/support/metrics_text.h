// Reading a child process's /metrics and /healthz in tests: the port comes from its
// "metrics on http://127.0.0.1:PORT/metrics" log line, the request is made with curl,
// and MetricValue() picks one series out of the Prometheus text. WaitForMetric() is
// how a test waits for a state the relay exports (streaming, a reconnect, a dead
// letter) rather than for the wording of a log line.
//
//   ASSERT_TRUE(WaitForMetric(*relay, "outboxd_connected", 1, absl::Seconds(30)));
#ifndef OUTBOXD_TESTS_SUPPORT_METRICS_TEXT_H_
#define OUTBOXD_TESTS_SUPPORT_METRICS_TEXT_H_

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "support/child_process.h"
#include "support/wait_until.h"

namespace outboxd::test {

// GET http://127.0.0.1:<the child's metrics port><path>: {status, body}; {-1, ""} if
// the child has not logged its port or nothing answered.
inline std::pair<int, std::string> HttpGetFromLog(ChildProcess& child, const std::string& path) {
  const std::string marker = "metrics on http://127.0.0.1:";
  const std::string log = child.Log();
  const size_t at = log.find(marker);
  if (at == std::string::npos) return {-1, ""};
  const int port = std::atoi(log.c_str() + at + marker.size());
  const std::string command =
      "curl -s -w '\\n%{http_code}' --max-time 2 http://127.0.0.1:" + std::to_string(port) + path;
  FILE* p = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  const size_t nl = out.rfind('\n');
  if (nl == std::string::npos) return {-1, ""};
  return {std::atoi(out.c_str() + nl + 1), out.substr(0, nl)};
}

// The value of the series written exactly `series` (`name` or `name{label="v",...}`
// as the exposition prints it), or nullopt when the text has no such line.
inline std::optional<double> MetricValue(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, prefix.size(), prefix) == 0) {
      return std::strtod(text.c_str() + at + prefix.size(), nullptr);
    }
    at = end + 1;
  }
  return std::nullopt;
}

// The N of /healthz's "no broker acknowledgement for Ns ...": how long the relay itself
// says nothing was acknowledged; -1 when the text does not say it.
inline int StalledForSeconds(const std::string& healthz_body) {
  const std::string marker = "no broker acknowledgement for ";
  const size_t at = healthz_body.find(marker);
  return at == std::string::npos ? -1 : std::atoi(healthz_body.c_str() + at + marker.size());
}

// Polls the child's `path` (/healthz, /readyz) until it answers `status` or `timeout`
// passes; returns the last answer, {status, body}.
inline std::pair<int, std::string> WaitForHttpStatus(ChildProcess& child, const std::string& path,
                                                     int status, absl::Duration timeout) {
  std::pair<int, std::string> answer;
  WaitUntil(timeout, [&] {
    answer = HttpGetFromLog(child, path);
    return answer.first == status;
  });
  return answer;
}

// `series` on the child's /metrics now, or nullopt (no port logged yet, no answer, no
// such series).
inline std::optional<double> ScrapeMetric(ChildProcess& child, const std::string& series) {
  const auto [status, body] = HttpGetFromLog(child, "/metrics");
  if (status != 200) return std::nullopt;
  return MetricValue(body, series);
}

// Waits until the child's /metrics shows `series` at `at_least` or more; false at
// once if the child has exited.
inline bool WaitForMetric(ChildProcess& child, const std::string& series, double at_least,
                          absl::Duration timeout) {
  bool exited = false;
  const bool reached = WaitUntil(timeout, [&] {
    exited = !child.Running();
    return exited ||
           ScrapeMetric(child, series).value_or(-std::numeric_limits<double>::infinity()) >=
               at_least;
  });
  return reached && !exited;
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_METRICS_TEXT_H_
