// RedactConninfo: a conninfo as libpq itself reads it (PQconninfoParse, for key=value
// strings and URIs alike: quoting, escapes, percent-encoding, a password in the URI's
// user info or its query string), written back without the secrets so it can be
// logged or echoed in an error. What libpq cannot parse is never echoed.
#include <libpq-fe.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pg/connection.h"

namespace outboxd::pg {
namespace {

using Setting = std::pair<std::string, std::string>;

// libpq's secret keywords: the server password and the client key's passphrase.
bool IsSecretKey(std::string_view key) { return key == "password" || key == "sslpassword"; }

bool IsUri(std::string_view conninfo) {
  return conninfo.starts_with("postgresql://") || conninfo.starts_with("postgres://");
}

// A key=value value: bare when libpq reads it back the same, else single-quoted
// with \ before a quote or a backslash.
std::string KeywordValue(std::string_view value) {
  if (!value.empty() && value.find_first_of(" \t\n\r\f\v'\\") == std::string_view::npos) {
    return std::string(value);
  }
  std::string out = "'";
  for (char c : value) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

// RFC 3986 percent-encoding of everything but the unreserved characters.
std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

// One host of a URI's host list: [IPv6] in brackets, anything else percent-encoded
// (a Unix-domain socket directory "/tmp" is %2Ftmp).
std::string UriHost(const std::string& host) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]");
  return PercentEncode(host);
}

// postgresql://[user@][host[:port][,host[:port]...]][/dbname][?key=value&...]. libpq
// lists a URI's hosts and ports comma-separated, one port (maybe empty) per host.
std::string AsUri(std::string_view scheme, const std::vector<Setting>& settings) {
  std::string user, host, port, dbname;
  std::vector<std::string> query;
  for (const auto& [key, value] : settings) {
    std::string* part = key == "user"     ? &user
                        : key == "host"   ? &host
                        : key == "port"   ? &port
                        : key == "dbname" ? &dbname
                                          : nullptr;
    if (part != nullptr) {
      *part = value;
    } else {
      query.push_back(absl::StrCat(key, "=", PercentEncode(value)));
    }
  }
  std::string out(scheme);
  if (!user.empty()) absl::StrAppend(&out, PercentEncode(user), "@");
  const std::vector<std::string> hosts = absl::StrSplit(host, ',');
  const std::vector<std::string> ports = absl::StrSplit(port, ',');
  for (size_t i = 0; i < hosts.size() || i < ports.size(); ++i) {
    if (i > 0) out += ',';
    if (i < hosts.size()) out += UriHost(hosts[i]);
    if (i < ports.size() && !ports[i].empty()) absl::StrAppend(&out, ":", ports[i]);
  }
  if (!dbname.empty()) absl::StrAppend(&out, "/", PercentEncode(dbname));
  if (!query.empty()) absl::StrAppend(&out, "?", absl::StrJoin(query, "&"));
  return out;
}

}  // namespace

std::string RedactConninfo(std::string_view conninfo) {
  // libpq's rule for dbname expansion: without "=" and not a URI, it is a database
  // name, which sets nothing else.
  if (!IsUri(conninfo) && conninfo.find('=') == std::string_view::npos) {
    return std::string(conninfo);
  }
  const std::string text(conninfo);
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(text.c_str(), &error), &PQconninfoFree);
  PQfreemem(error);
  if (options == nullptr) return "[unparsable connection string]";
  std::vector<Setting> kept;  // in libpq's keyword order
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val != nullptr && !IsSecretKey(o->keyword)) kept.emplace_back(o->keyword, o->val);
  }
  if (IsUri(conninfo)) return AsUri(conninfo.substr(0, conninfo.find("://") + 3), kept);
  std::vector<std::string> pairs;
  for (const auto& [key, value] : kept)
    pairs.push_back(absl::StrCat(key, "=", KeywordValue(value)));
  return absl::StrJoin(pairs, " ");
}

std::string DefaultCloudEventSource(std::string_view conninfo, std::string_view table) {
  std::string database;
  if (!IsUri(conninfo) && conninfo.find('=') == std::string_view::npos) {
    database = std::string(conninfo);
  } else {
    const std::string text(conninfo);
    char* error = nullptr;
    std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
        PQconninfoParse(text.c_str(), &error), &PQconninfoFree);
    PQfreemem(error);
    for (const PQconninfoOption* o = options.get(); o != nullptr && o->keyword != nullptr; ++o) {
      if (std::string_view(o->keyword) == "dbname" && o->val != nullptr) database = o->val;
    }
  }
  if (database.empty()) return absl::StrCat("/outboxd/", PercentEncode(table));
  return absl::StrCat("/outboxd/", PercentEncode(database), "/", PercentEncode(table));
}

}  // namespace outboxd::pg
