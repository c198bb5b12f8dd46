// Connection::Open: libnats options built from ConnectionOptions, a probe that never
// reconnects, then the connection kept. libnats' first connect with unlimited
// reconnects would loop over an unreachable server inside natsConnection_Connect,
// and one that reconnects would retry a refused login forever: the probe tells those
// apart before anything waits.
#include "nats/connection.h"

#include <nats/nats.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/log.h"

namespace outboxd::nats {
namespace {

using Options = std::unique_ptr<natsOptions, decltype(&natsOptions_Destroy)>;

// libnats' retry in the background needs a connected callback: without one it retries
// inside natsConnection_Connect, up to the (unlimited) count.
void IgnoreEvent(natsConnection*, void*) {}

// libnats' detail of the last error on this thread (a TLS verification failure, a
// creds file it cannot read), in parentheses; never a credential: it names no URL.
std::string LastErrorDetail() {
  const char* text = nats_GetLastError(nullptr);
  if (text == nullptr || *text == '\0') return "";
  return absl::StrCat(" (", text, ")");
}

std::vector<std::string> SplitUrls(const std::string& url) {
  std::vector<std::string> urls;
  for (absl::string_view u : absl::StrSplit(url, ',', absl::SkipWhitespace())) {
    urls.emplace_back(absl::StripAsciiWhitespace(u));
  }
  return urls;
}

bool WantsTls(const std::vector<std::string>& urls) {
  for (const std::string& u : urls) {
    if (absl::StartsWithIgnoreCase(u, "tls://")) return true;
  }
  return false;
}

// kProbe: one attempt, no callbacks (its close is nobody's event); kKeep: the
// connection kept.
enum class Attempt { kProbe, kKeep };

bool SetReconnect(natsOptions* raw, const ConnectionOptions& options, Attempt attempt) {
  if (attempt == Attempt::kProbe) return natsOptions_SetMaxReconnect(raw, 0) == NATS_OK;
  const ConnectionEvents& e = options.events;
  bool ok = natsOptions_SetMaxReconnect(raw, -1) == NATS_OK;
  if (ok && e.disconnected != nullptr) {
    ok = natsOptions_SetDisconnectedCB(raw, e.disconnected, e.closure) == NATS_OK;
  }
  if (ok && e.reconnected != nullptr) {
    ok = natsOptions_SetReconnectedCB(raw, e.reconnected, e.closure) == NATS_OK;
  }
  if (ok && e.closed != nullptr) {
    ok = natsOptions_SetClosedCB(raw, e.closed, e.closure) == NATS_OK;
  }
  if (ok && options.unreachable == Unreachable::kRetryInBackground) {
    ConnectionHandler connected = e.reconnected != nullptr ? e.reconnected : IgnoreEvent;
    ok = natsOptions_SetRetryOnFailedConnect(raw, true, connected, e.closure) == NATS_OK;
  }
  return ok;
}

absl::StatusOr<Options> MakeOptions(const ConnectionOptions& options, Attempt attempt,
                                    const std::string& where) {
  natsOptions* raw = nullptr;
  if (natsOptions_Create(&raw) != NATS_OK) return absl::InternalError("natsOptions_Create failed");
  Options made(raw, &natsOptions_Destroy);
  const std::vector<std::string> urls = SplitUrls(options.url);
  std::vector<const char*> servers;
  for (const std::string& u : urls) servers.push_back(u.c_str());
  bool ok =
      !servers.empty() &&
      natsOptions_SetServers(raw, servers.data(), static_cast<int>(servers.size())) == NATS_OK &&
      natsOptions_SetName(raw, options.name.c_str()) == NATS_OK &&
      natsOptions_SetReconnectWait(raw, 100) == NATS_OK && SetReconnect(raw, options, attempt);
  // libnats turns TLS on by itself only when the server asks for it: a tls:// URL
  // must refuse a server that would talk in the clear.
  if (ok && WantsTls(urls)) ok = natsOptions_SetSecure(raw, true) == NATS_OK;
  if (ok && !options.creds_file.empty()) {
    ok = natsOptions_SetUserCredentialsFromFiles(raw, options.creds_file.c_str(), nullptr) ==
         NATS_OK;
  }
  if (ok && !options.user.empty()) {
    ok = natsOptions_SetUserInfo(raw, options.user.c_str(), options.password.c_str()) == NATS_OK;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad NATS URL or options: ", where, LastErrorDetail()));
  }
  return made;
}

// The probe's verdict: OK (reachable, accepted) or why not.
absl::Status Probe(const ConnectionOptions& options, const std::string& where) {
  absl::StatusOr<Options> probe = MakeOptions(options, Attempt::kProbe, where);
  if (!probe.ok()) return probe.status();
  natsConnection* raw = nullptr;
  const natsStatus s = natsConnection_Connect(&raw, probe->get());
  natsConnection_Destroy(raw);
  switch (s) {
    case NATS_OK:
      return absl::OkStatus();
    case NATS_CONNECTION_AUTH_FAILED:
      return absl::UnauthenticatedError(
          absl::StrCat("NATS at ", where,
                       " refused the credentials; check the creds file or user and password"));
    case NATS_NO_SERVER:
      return absl::UnavailableError(absl::StrCat(
          "NATS not reachable at ", where, "; check the URL and that nats-server runs there"));
    case NATS_SECURE_CONNECTION_WANTED:
      return absl::InvalidArgumentError(absl::StrCat(
          "NATS at ", where, " does not offer TLS; use a nats:// URL or enable TLS on the server"));
    default:
      return absl::InvalidArgumentError(absl::StrCat("cannot connect to NATS at ", where, ": ",
                                                     natsStatus_GetText(s), LastErrorDetail()));
  }
}

}  // namespace

std::string RedactedUrl(std::string_view url) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(absl::string_view(url.data(), url.size()), ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t scheme = part.find("://");
    const size_t host = scheme == absl::string_view::npos ? 0 : scheme + 3;
    const size_t at = part.find('@', host);
    if (at == absl::string_view::npos) {
      parts.emplace_back(part);
    } else {
      parts.push_back(absl::StrCat(part.substr(0, host), "***@", part.substr(at + 1)));
    }
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const ConnectionOptions& options) {
  const std::string where = RedactedUrl(options.url);
  if (absl::Status s = Probe(options, where); !s.ok()) {
    if (!absl::IsUnavailable(s) || options.unreachable == Unreachable::kFail) return s;
    spdlog::warn("NATS not reachable at {}; connecting in the background", where);
  }
  absl::StatusOr<Options> keep = MakeOptions(options, Attempt::kKeep, where);
  if (!keep.ok()) return keep.status();
  natsConnection* raw = nullptr;
  const natsStatus s = natsConnection_Connect(&raw, keep->get());
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
    natsConnection_Destroy(raw);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to NATS at ", where, ": ", natsStatus_GetText(s)));
  }
  return std::unique_ptr<Connection>(new Connection(raw, where));
}

void Connection::Closer::operator()(natsConnection* nc) const {
  natsConnection_Close(nc);
  natsConnection_Destroy(nc);
}

bool Connection::connected() const {
  return natsConnection_Status(nc_.get()) == NATS_CONN_STATUS_CONNECTED;
}

}  // namespace outboxd::nats
