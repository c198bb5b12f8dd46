// PrepareStream: JetStream's stream info, then (when missing and allowed) its creation.
// StreamTakesSubject: the stream info again, its subjects matched against one.
#include "nats/internal/stream.h"

#include <nats/nats.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/log.h"

namespace outboxd::nats {
namespace {

using StreamInfo = std::unique_ptr<jsStreamInfo, decltype(&jsStreamInfo_Destroy)>;

// libnats' own text for the last error on this thread (the server's description for
// a JetStream API error); never holds credentials: it names no URL.
std::string LastError(natsStatus s) {
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  if (text != nullptr && *text != '\0') return text;
  return natsStatus_GetText(s);
}

absl::Status Create(jsCtx* js, const StreamOptions& options, const std::string& where) {
  if (options.subjects.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create JetStream stream ", options.name,
                                                   " at ", where, ": no subjects given for it"));
  }
  std::vector<const char*> subjects;
  for (const std::string& s : options.subjects) subjects.push_back(s.c_str());
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = options.name.c_str();
  config.Subjects = subjects.data();
  config.SubjectsLen = static_cast<int>(subjects.size());
  config.Storage = js_FileStorage;  // survives a server restart
  config.Duplicates = absl::ToInt64Nanoseconds(options.duplicate_window);
  jsStreamInfo* raw = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_AddStream(&raw, js, &config, nullptr, &code);
  StreamInfo info(raw, &jsStreamInfo_Destroy);
  if (s == NATS_OK) {
    spdlog::info(
        "created JetStream stream {} at {} (subjects {}, file storage, duplicate window {})",
        options.name, where, absl::StrJoin(options.subjects, ", "),
        absl::FormatDuration(options.duplicate_window));
    return absl::OkStatus();
  }
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS) {
    return absl::UnavailableError(absl::StrCat("JetStream at ", where, " did not answer (",
                                               LastError(s), "); is it enabled (-js)?"));
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot create JetStream stream ", options.name,
                                                 " at ", where, ": ", LastError(s)));
}

// NATS subject matching: `*` takes one token, a last `>` one or more.
bool SubjectMatches(absl::string_view filter, absl::string_view subject) {
  std::vector<absl::string_view> f = absl::StrSplit(filter, '.');
  std::vector<absl::string_view> s = absl::StrSplit(subject, '.');
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == ">") return i + 1 == f.size() && s.size() > i;
    if (i >= s.size() || (f[i] != "*" && f[i] != s[i])) return false;
  }
  return f.size() == s.size();
}

// Long enough for a server on this host or next to it to answer; short because the
// sink's caller waits for it.
constexpr int64_t kQuestionWaitMs = 1000;

}  // namespace

absl::Status PrepareStream(jsCtx* js, const StreamOptions& options, const std::string& where) {
  if (options.name.empty()) return absl::InvalidArgumentError("the stream name is empty");
  jsStreamInfo* raw = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&raw, js, options.name.c_str(), nullptr, &code);
  StreamInfo info(raw, &jsStreamInfo_Destroy);
  if (s == NATS_OK) {
    spdlog::info("JetStream stream {} at {}: duplicate window {}", options.name, where,
                 absl::FormatDuration(absl::Nanoseconds(info->Config->Duplicates)));
    return absl::OkStatus();
  }
  if (s != NATS_NOT_FOUND && code != JSStreamNotFoundErr) {
    return absl::UnavailableError(absl::StrCat("cannot read JetStream stream ", options.name,
                                               " at ", where, ": ", LastError(s)));
  }
  if (options.declare == Declare::kPassive) {
    return absl::NotFoundError(
        absl::StrCat("JetStream stream ", options.name, " does not exist at ", where, "; ",
                     options.fix_if_missing.empty() ? "create it" : options.fix_if_missing));
  }
  return Create(js, options, where);
}

absl::StatusOr<bool> StreamTakesSubject(jsCtx* js, const std::string& stream,
                                        std::string_view subject) {
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = kQuestionWaitMs;
  jsStreamInfo* raw = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&raw, js, stream.c_str(), &options, &code);
  StreamInfo info(raw, &jsStreamInfo_Destroy);
  if (s == NATS_NOT_FOUND || code == JSStreamNotFoundErr) return false;
  if (s != NATS_OK) {
    return absl::UnavailableError(
        absl::StrCat("cannot read JetStream stream ", stream, ": ", LastError(s)));
  }
  for (int i = 0; i < info->Config->SubjectsLen; ++i) {
    if (SubjectMatches(info->Config->Subjects[i], {subject.data(), subject.size()})) return true;
  }
  return false;
}

}  // namespace outboxd::nats
