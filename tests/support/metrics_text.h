// Reading a child process's /metrics and /healthz in tests: the port comes from its
// "metrics on http://127.0.0.1:PORT/metrics" log line, the request is made with curl,
// and MetricValue() picks one series out of the Prometheus text.
#ifndef OUTBOXD_TESTS_SUPPORT_METRICS_TEXT_H_
#define OUTBOXD_TESTS_SUPPORT_METRICS_TEXT_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "support/child_process.h"

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

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_METRICS_TEXT_H_
