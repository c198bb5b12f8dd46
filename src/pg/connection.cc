// Connection::Open adds outboxd's connection settings to the user's conninfo and
// turns libpq's multi-line connection errors into one line with the fix; Exec maps
// SQLSTATEs to absl codes and keeps the SQLSTATE as a status payload.
#include "pg/connection.h"

#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "pg/identifier.h"

namespace outboxd::pg {
namespace {

constexpr char kSqlStatePayload[] = "type.googleapis.com/outboxd.SqlState";
constexpr char kConninfoFix[] = "check --pg/OUTBOXD_PG";

// The settings the user wrote in the conninfo/URI (only those with a value).
using Settings = std::map<std::string, std::string>;

// Debian's abseil has its own string_view, so std::string_view gets std helpers.
std::string_view Strip(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

bool IsUri(std::string_view conninfo) {
  return conninfo.starts_with("postgresql://") || conninfo.starts_with("postgres://");
}

// A conninfo without "=" that is not a URI is a plain database name (libpq's rule
// for dbname expansion), so it sets nothing else.
absl::StatusOr<Settings> ParseUserSettings(const std::string& conninfo) {
  Settings settings;
  if (!IsUri(conninfo) && !absl::StrContains(conninfo, '=')) return settings;
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(conninfo.c_str(), &error), &PQconninfoFree);
  std::unique_ptr<char, decltype(&PQfreemem)> error_owner(error, &PQfreemem);
  if (options == nullptr) {
    std::string detail(error ? Strip(error) : "out of memory");
    // libpq may quote a fragment of the string, which could be part of a password
    // (password=, sslpassword=, a URI's user:password@).
    if (absl::StrContains(conninfo, "password") ||
        (IsUri(conninfo) && absl::StrContains(conninfo, '@'))) {
      detail = "syntax error";
    }
    return absl::InvalidArgumentError(
        absl::StrCat("invalid connection string: ", detail, "; ", kConninfoFix));
  }
  for (PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val != nullptr && o->val[0] != '\0') settings[o->keyword] = o->val;
  }
  return settings;
}

// The user's value for a setting, from the conninfo or its environment variable
// (nullptr: libpq reads none for it).
std::string UserValue(const Settings& settings, const std::string& key, const char* env) {
  auto it = settings.find(key);
  if (it != settings.end()) return it->second;
  const char* value = env ? std::getenv(env) : nullptr;
  return value ? value : "";
}

constexpr std::pair<const char*, const char*> kTcpDefaults[] = {
    {"keepalives_idle", "15"},
    {"keepalives_interval", "5"},
    {"keepalives_count", "3"},
    {"tcp_user_timeout", "30000"},  // milliseconds
};

// Keywords added after the user's (expanded) conninfo; later keywords win in libpq.
std::vector<std::pair<std::string, std::string>> OutboxdSettings(const Settings& user,
                                                                 ConnectionKind kind) {
  std::vector<std::pair<std::string, std::string>> extra;
  if (UserValue(user, "application_name", "PGAPPNAME").empty()) {
    extra.emplace_back("application_name", "outboxd");
  }
  if (UserValue(user, "connect_timeout", "PGCONNECT_TIMEOUT").empty()) {
    extra.emplace_back("connect_timeout", "10");
  }
  // A peer gone without a word (a crashed host, a NAT box that dropped the mapping)
  // is noticed by TCP in about 30 s instead of the kernel's two hours of keepalive
  // idle and fifteen minutes of retransmissions: probes after 15 s idle, every 5 s,
  // 3 missed; unacknowledged data for 30 s. A path that still acknowledges TCP (a
  // proxy in between) is the receive timeout's (--pg-receive-timeout).
  for (const auto& [key, value] : kTcpDefaults) {
    if (UserValue(user, key, nullptr).empty()) extra.emplace_back(key, value);
  }
  if (kind == ConnectionKind::kReplication) {
    extra.emplace_back("replication", "database");
    // pgoutput prints timestamptz with the session's DateStyle and TimeZone.
    std::string options = UserValue(user, "options", "PGOPTIONS");
    if (!options.empty()) options += ' ';
    extra.emplace_back("options", options + "-c DateStyle=ISO -c TimeZone=UTC");
  }
  return extra;
}

// "at \"127.0.0.1\", port 5433" (libpq's words between "connection to server " and
// " failed: ") as "127.0.0.1:5433"; other forms (a socket) as they are.
std::string ServerOf(std::string_view words) {
  const size_t open = words.find("at \"");
  const size_t close = open == std::string_view::npos ? open : words.find('"', open + 4);
  const size_t port = words.rfind(", port ");
  if (close == std::string_view::npos || port == std::string_view::npos) return std::string(words);
  return absl::StrCat(std::string(words.substr(open + 4, close - open - 4)), ":",
                      std::string(words.substr(port + 7)));
}

// libpq's connection error without the "connection to server ... failed:" prefixes,
// severities and tab-indented hints, on one line. With several hosts (a failover's
// "host=a,b"), each reason names its server: "a:5432: Connection refused; b:5432:
// session is read-only", not two reasons that read as one server's.
std::string ConnectReason(std::string_view raw) {
  std::vector<std::pair<std::string, std::string>> reasons;  // server, reason
  std::string server;
  bool several = false;
  while (!raw.empty()) {
    const size_t eol = raw.find('\n');
    std::string_view line = raw.substr(0, eol);
    raw.remove_prefix(eol == std::string_view::npos ? raw.size() : eol + 1);
    if (line.starts_with("\t") || line.starts_with("DETAIL:") || line.starts_with("HINT:")) {
      continue;
    }
    const size_t failed = line.find(" failed: ");
    if (line.starts_with("connection to server") && failed != std::string_view::npos) {
      std::string next = ServerOf(line.substr(21, failed - 21));
      several |= !server.empty() && next != server;
      server = std::move(next);
      line.remove_prefix(failed + 9);
    }
    line = Strip(line);
    for (std::string_view severity : {"FATAL:", "ERROR:"}) {
      if (line.starts_with(severity)) line = Strip(line.substr(severity.size()));
    }
    std::pair<std::string, std::string> reason(server, std::string(line));
    if (!line.empty() && std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) {
      reasons.push_back(std::move(reason));
    }
  }
  if (reasons.empty()) return "unknown error";
  return absl::StrJoin(reasons, "; ", [several](std::string* out, const auto& r) {
    absl::StrAppend(out, several ? absl::StrCat(r.first, ": ") : "", r.second);
  });
}

// The text between the first pair of double quotes after `after`, e.g. a name.
std::string QuotedAfter(std::string_view text, std::string_view after) {
  size_t at = text.find(after);
  if (at == std::string_view::npos) return "";
  size_t open = text.find('"', at + after.size() - 1);
  size_t close = open == std::string_view::npos ? open : text.find('"', open + 1);
  if (close == std::string_view::npos) return "";
  return std::string(text.substr(open + 1, close - open - 1));
}

std::string HostPort(PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  return absl::StrCat(host && *host ? host : "localhost", ":", port && *port ? port : "5432");
}

absl::Status ConnectError(PGconn* conn) {
  const std::string raw = PQerrorMessage(conn);
  const std::string reason = ConnectReason(raw);
  const std::string at = HostPort(conn);
  const std::string user = PQuser(conn) ? PQuser(conn) : "";
  if (absl::StrContains(raw, "password authentication failed") ||
      absl::StrContains(raw, "no password supplied")) {
    return absl::UnauthenticatedError(
        absl::StrCat("cannot connect to PostgreSQL at ", at, " as ", user, ": ", reason,
                     "; fix the password in --pg-password-file, --pg, PGPASSWORD or ~/.pgpass"));
  }
  if (absl::StrContains(raw, "replication role to start walsender") ||
      absl::StrContains(raw, "permission denied to start WAL sender")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "role ", user, " lacks REPLICATION: ALTER ROLE ", SqlIdentifier(user), " REPLICATION"));
  }
  if (absl::StrContains(raw, "no pg_hba.conf entry")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "PostgreSQL at ", at, " refused the connection: ", reason,
        "; add a matching line to pg_hba.conf (outboxd run needs a 'replication' line too) "
        "and reload PostgreSQL"));
  }
  if (absl::StrContains(raw, "database \"") && absl::StrContains(raw, "\" does not exist")) {
    std::string db = QuotedAfter(raw, "database \"");
    return absl::NotFoundError(absl::StrCat("database ", db, " does not exist on ", at,
                                            ": create it or fix dbname in --pg/OUTBOXD_PG"));
  }
  if (absl::StrContains(raw, "role \"") && absl::StrContains(raw, "\" does not exist")) {
    return absl::UnauthenticatedError(absl::StrCat("role ", QuotedAfter(raw, "role \""),
                                                   " does not exist on ", at,
                                                   ": create it or fix user in --pg/OUTBOXD_PG"));
  }
  if (absl::StartsWith(raw, "invalid ") || absl::StartsWith(raw, "missing \"=\"")) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid connection string: ", reason, "; ", kConninfoFix));
  }
  return absl::UnavailableError(absl::StrCat("cannot connect to PostgreSQL at ", at, ": ", reason,
                                             "; ", kConninfoFix,
                                             " and that the server is running"));
}

absl::StatusCode CodeForSqlState(std::string_view state) {
  static const auto* const kExact = new std::map<std::string_view, absl::StatusCode>{
      {"3D000", absl::StatusCode::kNotFound},          // invalid_catalog_name (database)
      {"42P01", absl::StatusCode::kNotFound},          // undefined_table
      {"42703", absl::StatusCode::kNotFound},          // undefined_column
      {"42704", absl::StatusCode::kNotFound},          // undefined_object
      {"42883", absl::StatusCode::kNotFound},          // undefined_function
      {"3F000", absl::StatusCode::kNotFound},          // invalid_schema_name
      {"42501", absl::StatusCode::kPermissionDenied},  // insufficient_privilege
      {"42P04", absl::StatusCode::kAlreadyExists},     // duplicate_database
      {"42P06", absl::StatusCode::kAlreadyExists},     // duplicate_schema
      {"42P07", absl::StatusCode::kAlreadyExists},     // duplicate_table
      {"42710", absl::StatusCode::kAlreadyExists},     // duplicate_object
      {"23505", absl::StatusCode::kAlreadyExists},     // unique_violation
      {"55006", absl::StatusCode::kUnavailable},       // object_in_use
      {"55P03", absl::StatusCode::kUnavailable},       // lock_not_available
      {"57014", absl::StatusCode::kCancelled},         // query_canceled
  };
  static const auto* const kClass = new std::map<std::string_view, absl::StatusCode>{
      {"08", absl::StatusCode::kUnavailable},         // connection exception
      {"0A", absl::StatusCode::kUnimplemented},       // feature not supported
      {"22", absl::StatusCode::kInvalidArgument},     // data exception
      {"23", absl::StatusCode::kFailedPrecondition},  // integrity constraint violation
      {"25", absl::StatusCode::kFailedPrecondition},  // invalid transaction state
      {"28", absl::StatusCode::kUnauthenticated},     // invalid authorization
      {"40", absl::StatusCode::kAborted},             // serialization failure, deadlock
      {"42", absl::StatusCode::kInvalidArgument},     // syntax error or access rule
      {"53", absl::StatusCode::kResourceExhausted},   // insufficient resources
      {"54", absl::StatusCode::kResourceExhausted},   // program limit exceeded
      {"55", absl::StatusCode::kFailedPrecondition},  // object not in prerequisite state
      {"57", absl::StatusCode::kUnavailable},         // operator intervention (shutdown)
      {"58", absl::StatusCode::kUnavailable},         // system error (I/O)
      {"XX", absl::StatusCode::kInternal},
  };
  if (auto it = kExact->find(state); it != kExact->end()) return it->second;
  if (auto it = kClass->find(state.substr(0, 2)); it != kClass->end()) return it->second;
  return absl::StatusCode::kInternal;
}

// First line of a statement, shortened, for error messages.
std::string Abbreviate(std::string_view sql) {
  sql = Strip(sql);
  std::string_view first = sql.substr(0, sql.find('\n'));
  if (first.size() > 80 || first.size() < sql.size()) {
    return std::string(first.substr(0, 80)) + "...";
  }
  return std::string(first);
}

// PGDATESTYLE/PGTZ travel as separate startup parameters that override `options`;
// the server reports the effective values, so correct them if they are not ours.
absl::Status ForceIsoUtc(Connection& conn) {
  const char* datestyle = PQparameterStatus(conn.get(), "DateStyle");
  const char* timezone = PQparameterStatus(conn.get(), "TimeZone");
  if (datestyle && absl::StartsWith(datestyle, "ISO") && timezone &&
      std::string_view(timezone) == "UTC") {
    return absl::OkStatus();
  }
  return conn.Exec("SET DateStyle = ISO; SET TimeZone = 'UTC'").status();
}

// The server's notices (NOTICE, WARNING ...) go to our log, not straight to stderr
// (libpq's default), so every line keeps the chosen format. Our own DDL's notices
// ("already exists, skipping") are noise: debug; warnings stay warnings.
void LogNotice(void*, const char* message) {
  std::string_view text = Strip(message);
  if (text.starts_with("WARNING:")) {
    spdlog::warn("PostgreSQL: {}", Strip(text.substr(8)));
  } else {
    spdlog::debug("PostgreSQL: {}", text);
  }
}

}  // namespace

std::string_view Result::Get(int row, int col) const {
  return std::string_view(PQgetvalue(res_.get(), row, col), PQgetlength(res_.get(), row, col));
}

int64_t Result::AffectedRows() const {
  int64_t n = 0;
  return absl::SimpleAtoi(PQcmdTuples(res_.get()), &n) ? n : 0;
}

absl::StatusOr<Connection> Connection::Open(const std::string& conninfo, ConnectionKind kind) {
  OUTBOXD_ASSIGN_OR_RETURN(Settings user, ParseUserSettings(conninfo));
  // dbname first with expand_dbname=1: libpq expands the user's conninfo or URI in
  // place, and the keywords after it override (or add to) what it set.
  std::vector<std::pair<std::string, std::string>> params = {{"dbname", conninfo}};
  for (auto& kv : OutboxdSettings(user, kind)) params.push_back(std::move(kv));
  std::vector<const char*> keywords;
  std::vector<const char*> values;
  for (const auto& [key, value] : params) {
    keywords.push_back(key.c_str());
    values.push_back(value.c_str());
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  spdlog::debug("connecting to PostgreSQL: {}{}", RedactConninfo(conninfo),
                kind == ConnectionKind::kReplication ? " (replication)" : "");
  Connection conn(PQconnectdbParams(keywords.data(), values.data(), /*expand_dbname=*/1));
  if (conn.get() == nullptr) return absl::ResourceExhaustedError("libpq: out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK) return ConnectError(conn.get());
  PQsetNoticeProcessor(conn.get(), &LogNotice, nullptr);
  if (kind == ConnectionKind::kReplication) OUTBOXD_RETURN_IF_ERROR(ForceIsoUtc(conn));
  conn.conninfo_ = conninfo;
  return conn;
}

absl::StatusOr<Result> Connection::Exec(std::string_view sql) {
  const std::string query(sql);
  if (reply_timeout_ != absl::InfiniteDuration()) {
    return CollectReply(PQsendQuery(conn_.get(), query.c_str()) == 1, sql);
  }
  Result result(PQexec(conn_.get(), query.c_str()));
  OUTBOXD_RETURN_IF_ERROR(CheckResult(result, sql));
  return result;
}

absl::StatusOr<Result> Connection::ExecParams(
    std::string_view sql, const std::vector<std::optional<std::string>>& params) {
  const std::string query(sql);
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  if (reply_timeout_ != absl::InfiniteDuration()) {
    return CollectReply(
        PQsendQueryParams(conn_.get(), query.c_str(), static_cast<int>(values.size()), nullptr,
                          values.data(), nullptr, nullptr, /*resultFormat=*/0) == 1,
        sql);
  }
  Result result(PQexecParams(conn_.get(), query.c_str(), static_cast<int>(values.size()),
                             /*paramTypes=*/nullptr, values.data(), /*paramLengths=*/nullptr,
                             /*paramFormats=*/nullptr, /*resultFormat=*/0));
  OUTBOXD_RETURN_IF_ERROR(CheckResult(result, sql));
  return result;
}

absl::Status Connection::AwaitReply(std::string_view sql) {
  const absl::Time deadline = absl::Now() + reply_timeout_;
  while (true) {
    if (PQconsumeInput(conn_.get()) == 0) {
      return absl::UnavailableError(
          absl::StrCat("PostgreSQL: ", ConnectReason(PQerrorMessage(conn_.get()))));
    }
    if (!PQisBusy(conn_.get())) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(absl::StrCat(
          "PostgreSQL at ", endpoint(), " sent no answer within ",
          absl::FormatDuration(reply_timeout_), " (query: ", Abbreviate(sql),
          "): the connection is given up as dead (a half-open connection?) and opened again"));
    }
    pollfd fd{.fd = socket(), .events = POLLIN, .revents = 0};
    poll(&fd, 1, static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, 1000)));
  }
}

absl::StatusOr<Result> Connection::CollectReply(bool sent, std::string_view sql) {
  if (!sent) return CheckResult(Result(nullptr), sql);  // libpq's error: never OK
  // As PQexec: the last result is the answer; a COPY or a lost connection ends it.
  std::optional<Result> last;
  while (true) {
    OUTBOXD_RETURN_IF_ERROR(AwaitReply(sql));
    PGresult* raw = PQgetResult(conn_.get());
    if (raw == nullptr) break;
    last.emplace(raw);
    const ExecStatusType status = PQresultStatus(raw);
    if (status == PGRES_COPY_IN || status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH ||
        PQstatus(conn_.get()) == CONNECTION_BAD) {
      break;
    }
  }
  Result result = last ? std::move(*last) : Result(nullptr);
  OUTBOXD_RETURN_IF_ERROR(CheckResult(result, sql));
  return result;
}

absl::Status Connection::CheckResult(const Result& result, std::string_view sql) {
  last_sqlstate_.clear();
  if (result.get() == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("PostgreSQL: ", ConnectReason(PQerrorMessage(conn_.get()))));
  }
  switch (PQresultStatus(result.get())) {
    case PGRES_COMMAND_OK:
    case PGRES_TUPLES_OK:
    case PGRES_COPY_BOTH:
    case PGRES_EMPTY_QUERY:
      return absl::OkStatus();
    default:
      break;
  }
  const char* state = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
  const char* primary = PQresultErrorField(result.get(), PG_DIAG_MESSAGE_PRIMARY);
  std::string message = primary ? primary : ConnectReason(PQresultErrorMessage(result.get()));
  last_sqlstate_ = state ? state : "";
  absl::StatusCode code =
      last_sqlstate_.empty() ? absl::StatusCode::kInternal : CodeForSqlState(last_sqlstate_);
  // Without a SQLSTATE the error is libpq's own; a dead connection is transient.
  if (last_sqlstate_.empty() && PQstatus(conn_.get()) == CONNECTION_BAD) {
    code = absl::StatusCode::kUnavailable;
  }
  std::string text =
      last_sqlstate_.empty()
          ? absl::StrCat(message, " (query: ", Abbreviate(sql), ")")
          : absl::StrCat(message, " (SQLSTATE ", last_sqlstate_, "; query: ", Abbreviate(sql), ")");
  absl::Status status(code, text);
  if (!last_sqlstate_.empty()) status.SetPayload(kSqlStatePayload, absl::Cord(last_sqlstate_));
  return status;
}

absl::StatusOr<std::string> Connection::QuoteIdentifier(std::string_view name) {
  std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeIdentifier(conn_.get(), name.data(), name.size()), &PQfreemem);
  if (quoted) return std::string(quoted.get());
  return EscapeError("name", name);
}

absl::StatusOr<std::string> Connection::QuoteLiteral(std::string_view value) {
  std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeLiteral(conn_.get(), value.data(), value.size()), &PQfreemem);
  if (quoted) return std::string(quoted.get());
  return EscapeError("value", value);
}

absl::Status Connection::EscapeError(std::string_view what, std::string_view text) {
  std::string why = PQerrorMessage(conn_.get());
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  return absl::InvalidArgumentError(absl::StrCat("cannot quote the ", std::string(what), " ",
                                                 PrintableName(text), " for SQL: ", why));
}

absl::StatusOr<std::string> ConninfoWithPassword(const std::string& conninfo,
                                                 std::string_view password) {
  OUTBOXD_ASSIGN_OR_RETURN(Settings settings, ParseUserSettings(conninfo));
  if (!IsUri(conninfo) && !absl::StrContains(conninfo, '=') && !conninfo.empty()) {
    settings["dbname"] = conninfo;
  }
  settings["password"] = std::string(password);
  std::string out;
  for (const auto& [key, value] : settings) {
    if (!out.empty()) out += ' ';
    absl::StrAppend(&out, key, "='");
    for (char c : value) {
      if (c == '\\' || c == '\'') out += '\\';
      out += c;
    }
    out += '\'';
  }
  return out;
}

std::string Connection::user() const {
  const char* user = PQuser(conn_.get());
  return user ? user : "";
}

std::string Connection::endpoint() const { return HostPort(conn_.get()); }

std::string SqlIdentifier(std::string_view name) {
  const bool plain =
      !name.empty() && (name[0] == '_' || (name[0] >= 'a' && name[0] <= 'z')) &&
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_$") == std::string_view::npos;
  if (plain) return std::string(name);
  std::string quoted = "\"";
  for (char c : name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

absl::Status WithSqlStateOf(absl::Status error, const absl::Status& cause) {
  if (auto state = cause.GetPayload(kSqlStatePayload); state && !error.ok()) {
    error.SetPayload(kSqlStatePayload, *state);
  }
  return error;
}

absl::Status WithSqlState(absl::Status error, std::string_view sqlstate) {
  if (!error.ok()) error.SetPayload(kSqlStatePayload, absl::Cord(absl::string_view(sqlstate.data(), sqlstate.size())));
  return error;
}

std::string SqlStateOf(const absl::Status& status) {
  auto state = status.GetPayload(kSqlStatePayload);
  return state ? std::string(*state) : std::string();
}

}  // namespace outboxd::pg
