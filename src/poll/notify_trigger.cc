#include "poll/notify_trigger.h"

#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "pg/identifier.h"
#include "pg/table_name.h"
#include "poll/internal/outbox_queries.h"

namespace outboxd::poll {

absl::StatusOr<std::string> NotifyTriggerSql(pg::Connection& conn, const std::string& table,
                                             const std::string& channel) {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName name, pg::TableName::Parse(table));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(channel, "--notify-channel"));
  OUTBOXD_ASSIGN_OR_RETURN(const std::string trigger, conn.QuoteIdentifier(kNotifyTriggerName));
  OUTBOXD_ASSIGN_OR_RETURN(const std::string channel_literal, conn.QuoteLiteral(channel));
  const pg::TableName function = name.Sibling(kNotifyTriggerName);
  // The channel travels as a trigger argument so one function serves any channel.
  // The length test mirrors pg_notify's own checks, so the function never raises.
  return absl::StrCat(
      "CREATE OR REPLACE FUNCTION ", function.quoted,
      "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
      "IF octet_length(TG_ARGV[0]) BETWEEN 1 AND 63 THEN PERFORM pg_notify(TG_ARGV[0], ''); "
      "END IF; RETURN NULL; END $$; CREATE OR REPLACE TRIGGER ",
      trigger, " AFTER INSERT ON ", name.quoted, " FOR EACH STATEMENT EXECUTE FUNCTION ",
      function.quoted, "(", channel_literal, ")");
}

absl::Status InstallNotifyTrigger(pg::Connection& conn, const std::string& table,
                                  const std::string& channel) {
  OUTBOXD_ASSIGN_OR_RETURN(const std::string sql, NotifyTriggerSql(conn, table, channel));
  // Several statements in one Exec run as one implicit transaction: both or neither.
  absl::StatusOr<pg::Result> result = conn.Exec(sql);
  if (result.ok()) return absl::OkStatus();
  return Annotate(result.status(),
                  absl::StrCat("cannot install the NOTIFY trigger on ", table, ": "));
}

absl::StatusOr<bool> HasNotifyTrigger(pg::Connection& conn, const std::string& table) {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName name, pg::TableName::Parse(table));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result result,
      conn.ExecParams("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) "
                      "AND tgname = $2 AND tgenabled <> 'D'",
                      {name.quoted, std::string(kNotifyTriggerName)}));
  return result.Get(0, 0) != "0";
}

}  // namespace outboxd::poll
