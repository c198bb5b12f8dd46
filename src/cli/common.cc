#include "cli/common.h"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "cli/config_file.h"

namespace outboxd::cli {

std::string EnvName(const std::string& name) {
  std::string env = "OUTBOXD_";
  for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

namespace {

StopSignal* g_stop = nullptr;

void OnSignal(int) {
  if (g_stop != nullptr) g_stop->Notify();
}

}  // namespace

int Fail(const absl::Status& status, Phase phase) {
  spdlog::error("{}", status.message());
  if (IsConfigurationError(status) ||
      (phase == Phase::kStarting && status.code() == absl::StatusCode::kUnavailable)) {
    return kExitConfig;
  }
  return kExitFailure;
}

int ParseFailure(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);
  // The deepest subcommand parsed so far: its --help lists the flags that apply.
  const CLI::App* command = &app;
  std::string path = "outboxd";
  while (!command->get_subcommands().empty()) {
    command = command->get_subcommands().front();
    absl::StrAppend(&path, " ", command->get_name());
  }
  std::string what = error.what();
  std::replace(what.begin(), what.end(), '\n', ' ');
  const std::string suffix = " is required";
  if (command == &app && !app.remaining().empty()) {
    spdlog::error("unknown command \"{}\"; see outboxd --help", app.remaining().front());
  } else if (what.size() > suffix.size() && what.compare(0, 2, "--") == 0 &&
             what.compare(what.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const CLI::Option* option =
        command->get_option_no_throw(what.substr(0, what.size() - suffix.size()));
    std::string other_ways;  // " (or set OUTBOXD_PG, or pg in the --config file)"
    if (option != nullptr && !option->get_envname().empty()) {
      absl::StrAppend(&other_ways, " (or set ", option->get_envname(), ", or ",
                      ConfigKey(*option), " in the --config file)");
    }
    spdlog::error("{}{}; see {} --help", what, other_ways, path);
  } else {
    spdlog::error("{}; see {} --help", what, path);
  }
  return kExitConfig;
}

void AddColumnFlags(CLI::App* cmd, outbox::ColumnMapping& columns) {
  Flag(cmd, "id-column", columns.id, "Column with the event id")->capture_default_str();
  Flag(cmd, "aggregate-column", columns.aggregate_id, "Column with the aggregate id")
      ->capture_default_str();
  Flag(cmd, "type-column", columns.type, "Column with the event type")->capture_default_str();
  Flag(cmd, "payload-column", columns.payload, "Column with the JSON payload")
      ->capture_default_str();
  Flag(cmd, "created-at-column", columns.created_at, "Column with the creation time")
      ->capture_default_str();
}

void AddHeadersColumnFlag(CLI::App* cmd, outbox::ColumnMapping& columns) {
  Flag(cmd, "headers-column", columns.headers,
       "Nullable jsonb column whose object of string values become message headers (setup adds "
       "it, checked; empty: none)");
}

void AddFormatFlags(CLI::App* cmd, FormatFlags& flags) {
  Flag(cmd, "format", flags.format,
       "Message value: json (the payload), envelope (JSON with the event's fields and the "
       "payload), protobuf (outbox.v1.Event), cloudevents (CloudEvents binary mode: the "
       "payload, attributes as headers) or cloudevents-json (structured mode)")
      ->capture_default_str();
  Flag(cmd, "ce-source", flags.ce_source,
       "CloudEvents source attribute, a URI-reference (default: /outboxd/DATABASE/TABLE)");
  Flag(cmd, "header", flags.headers,
       "Extra header NAME=/json/pointer from a payload field (repeatable; left out when "
       "the field is missing)");
  Flag(cmd, "key-pointer", flags.key_pointer,
       "Kafka key from this payload field (/json/pointer) instead of the aggregate id column");
}

absl::Status ResolveFormat(const FormatFlags& flags, outbox::MessageFormat& format) {
  OUTBOXD_ASSIGN_OR_RETURN(format.format, outbox::ParseValueFormat(flags.format));
  format.headers.clear();
  for (const std::string& flag : flags.headers) {
    OUTBOXD_ASSIGN_OR_RETURN(outbox::HeaderPointer header, outbox::ParseHeaderPointer(flag));
    for (const outbox::HeaderPointer& earlier : format.headers) {
      if (earlier.name == header.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("--header ", header.name, " is given twice; keep one"));
      }
    }
    format.headers.push_back(std::move(header));
  }
  if (!flags.key_pointer.empty()) {
    if (absl::Status s = outbox::CheckJsonPointer(flags.key_pointer); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--key-pointer: ", s.message()));
    }
  }
  format.key_pointer = flags.key_pointer;
  if (!flags.ce_source.empty()) format.ce_source = flags.ce_source;
  return absl::OkStatus();
}

DurationFlag::DurationFlag(std::string default_text) : text(std::move(default_text)) {
  if (text.empty()) return;
  absl::StatusOr<absl::Duration> parsed = ParseDuration(text);
  assert(parsed.ok() && "a duration flag's default must parse");
  value = parsed.value_or(absl::ZeroDuration());
}

CLI::Option* Flag(CLI::App* app, const std::string& name, DurationFlag& flag,
                  const std::string& help) {
  // Unnamed, so --help and the reference show the flag as before (TEXT). CLI11 runs
  // it on the command line's, the environment's and the --config file's value alike
  // and reports a failure as "--name: <message>".
  CLI::Validator parse(
      [&flag](std::string& text) -> std::string {
        absl::StatusOr<absl::Duration> parsed = ParseDuration(text);
        if (!parsed.ok()) {
          const absl::string_view message = parsed.status().message();
          return std::string(message.data(), message.size());
        }
        flag.value = *parsed;
        return "";
      },
      "");
  return Flag(app, name, flag.text, help)->check(parse);
}

StopOnSignals::StopOnSignals(StopSignal* stop) {
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
