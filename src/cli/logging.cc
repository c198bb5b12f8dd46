#include "cli/logging.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_replace.h"
#include "base/json_string.h"
#include "base/log.h"
#include "base/progress.h"
#include "cli/common.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace outboxd::cli {
namespace {

constexpr char kTimestamp[] = "%Y-%m-%dT%H:%M:%S.%e%z";
constexpr size_t kMinSecretSize = 4;

std::mutex g_secrets_mu;
std::vector<std::string>* g_secrets = new std::vector<std::string>();  // never freed

std::string Redact(std::string_view text) {
  std::string out(text);
  std::lock_guard<std::mutex> lock(g_secrets_mu);
  for (const std::string& secret : *g_secrets) {
    if (out.find(secret) != std::string::npos) {
      out = absl::StrReplaceAll(out, {{secret, "[redacted]"}});
    }
  }
  return out;
}

// spdlog's names ("trace" ... "critical", "off"), with "warn" as --log-level spells it.
std::string_view LevelName(spdlog::level::level_enum level) {
  if (level == spdlog::level::warn) return "warn";
  const spdlog::string_view_t name = spdlog::level::to_string_view(level);
  return std::string_view(name.data(), name.size());
}

// Every line goes through here: secrets redacted, then text (the pattern the tests
// and operators read) or one JSON object.
class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(bool json)
      : json_(json),
        pattern_(std::make_unique<spdlog::pattern_formatter>(
            json ? kTimestamp : std::string(kTimestamp) + " %^%l%$ %v",
            spdlog::pattern_time_type::local, json ? "" : spdlog::details::os::default_eol)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string text = Redact(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg redacted = msg;
    redacted.payload = text;
    if (!json_) {
      // Only text logs share stderr with a progress line (base/progress.h).
      constexpr std::string_view kErase = "\r\x1b[K";
      if (TakeProgressLine()) dest.append(kErase.data(), kErase.data() + kErase.size());
      pattern_->format(redacted, dest);
      msg.color_range_start = redacted.color_range_start;
      msg.color_range_end = redacted.color_range_end;
      return;
    }
    spdlog::memory_buf_t ts;
    pattern_->format(redacted, ts);
    std::string line = "{\"ts\":\"";
    line.append(ts.data(), ts.size());
    line += "\",\"level\":\"";
    line += LevelName(msg.level);
    line += "\",\"msg\":";
    AppendJsonString(line, text, InvalidUtf8::kReplace);
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(json_);
  }

 private:
  bool json_;
  std::unique_ptr<spdlog::pattern_formatter> pattern_;
};

spdlog::level::level_enum LevelFromFlag(const std::string& level) {
  if (level == "trace") return spdlog::level::trace;
  if (level == "debug") return spdlog::level::debug;
  if (level == "warn") return spdlog::level::warn;
  if (level == "error") return spdlog::level::err;
  return spdlog::level::info;
}

void AddLogFlagsTo(CLI::App* cmd, LogFlags& flags) {
  Flag(cmd, "log-format", flags.format, "Log lines as text or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  Flag(cmd, "log-level", flags.level, "Least severe level logged: trace|debug|info|warn|error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

}  // namespace

void InitLogging() {
  auto logger = spdlog::stderr_color_mt("outboxd");
  logger->set_formatter(std::make_unique<LineFormatter>(false));
  spdlog::set_default_logger(logger);
}

void AddLogFlags(CLI::App& app, LogFlags& flags) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_subcommands([](CLI::App*) { return true; }).empty()) {
      AddLogFlagsTo(sub, flags);
    } else {
      AddLogFlags(*sub, flags);
    }
  }
}

void ApplyLogFlags(const LogFlags& flags) {
  spdlog::default_logger()->set_formatter(std::make_unique<LineFormatter>(flags.format == "json"));
  spdlog::set_level(LevelFromFlag(flags.level));
  // A progress line is for a person watching: not in a file, a pipe or a json stream.
  SetProgressLineEnabled(flags.format == "text" && isatty(STDERR_FILENO));
}

void RedactFromLogs(std::string_view secret) {
  if (secret.size() < kMinSecretSize) return;
  std::lock_guard<std::mutex> lock(g_secrets_mu);
  g_secrets->emplace_back(secret);
}

void LogKafka(int level, std::string_view facility, std::string_view message) {
  // syslog: 0-3 emergency..error, 4 warning, 5 notice, 6 info, 7 debug.
  const spdlog::level::level_enum spd = level <= 3   ? spdlog::level::err
                                        : level == 4 ? spdlog::level::warn
                                        : level <= 6 ? spdlog::level::info
                                                     : spdlog::level::debug;
  spdlog::log(spd, "kafka {}: {}", facility, message);
}

}  // namespace outboxd::cli
