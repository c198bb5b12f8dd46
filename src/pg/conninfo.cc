// RedactConninfo: drops passwords from key=value conninfo strings and URIs so a
// conninfo can be logged or echoed in an error.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "pg/connection.h"

namespace outboxd::pg {
namespace {

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// libpq's secret keywords: the server password and the client key's passphrase.
bool IsSecretKey(std::string_view key) { return key == "password" || key == "sslpassword"; }

std::string Join(const std::vector<std::string_view>& parts, char separator) {
  std::string out;
  for (std::string_view part : parts) {
    if (!out.empty()) out += separator;
    out.append(part);
  }
  return out;
}

// Index just past a conninfo value starting at i: 'quoted' (with \ escapes) or bare.
size_t SkipValue(std::string_view s, size_t i) {
  const bool quoted = i < s.size() && s[i] == '\'';
  if (quoted) ++i;
  while (i < s.size()) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      i += 2;
      continue;
    }
    if (quoted ? s[i] == '\'' : IsSpace(s[i])) break;
    ++i;
  }
  return quoted && i < s.size() ? i + 1 : i;
}

std::string RedactKeyValue(std::string_view s) {
  std::vector<std::string_view> kept;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsSpace(s[i])) ++i;
    if (i >= s.size()) break;
    const size_t start = i;
    while (i < s.size() && s[i] != '=' && !IsSpace(s[i])) ++i;
    const std::string_view key = s.substr(start, i - start);
    while (i < s.size() && IsSpace(s[i])) ++i;
    if (i < s.size() && s[i] == '=') {
      ++i;
      while (i < s.size() && IsSpace(s[i])) ++i;
      i = SkipValue(s, i);
    }
    if (!IsSecretKey(key)) kept.push_back(s.substr(start, i - start));
  }
  return Join(kept, ' ');
}

// postgresql://[user[:password]@][host][/dbname][?param=value&...]
std::string RedactUri(std::string_view s) {
  const size_t scheme_end = s.find("://") + 3;
  const size_t authority_end = std::min(s.find_first_of("/?", scheme_end), s.size());
  std::string_view authority = s.substr(scheme_end, authority_end - scheme_end);
  std::string out(s.substr(0, scheme_end));
  const size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    out.append(userinfo.substr(0, userinfo.find(':')));
    authority.remove_prefix(at);
  }
  out.append(authority);
  std::string_view rest = s.substr(authority_end);
  const size_t query = rest.find('?');
  out.append(rest.substr(0, query));
  if (query == std::string_view::npos) return out;
  std::vector<std::string_view> params;
  std::string_view query_text = rest.substr(query + 1);
  while (!query_text.empty()) {
    const size_t amp = query_text.find('&');
    std::string_view param = query_text.substr(0, amp);
    if (!IsSecretKey(param.substr(0, param.find('=')))) params.push_back(param);
    query_text.remove_prefix(amp == std::string_view::npos ? query_text.size() : amp + 1);
  }
  if (!params.empty()) out += "?" + Join(params, '&');
  return out;
}

}  // namespace

std::string RedactConninfo(std::string_view conninfo) {
  if (conninfo.starts_with("postgresql://") || conninfo.starts_with("postgres://")) {
    return RedactUri(conninfo);
  }
  return RedactKeyValue(conninfo);
}

}  // namespace outboxd::pg
