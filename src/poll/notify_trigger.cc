#include "poll/notify_trigger.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "poll/internal/outbox_queries.h"

namespace outboxd::poll {

std::string NotifyTriggerSql(pg::Connection& conn, const std::string& table,
                             const std::string& channel) {
  const pg::TableName name = pg::TableName::Split(conn, table);
  std::string function = conn.QuoteIdentifier(kNotifyTriggerName);
  if (!name.schema.empty())
    function = absl::StrCat(conn.QuoteIdentifier(name.schema), ".", function);
  // The channel travels as a trigger argument so one function serves any channel.
  return absl::StrCat(
      "CREATE OR REPLACE FUNCTION ", function,
      "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify(TG_ARGV[0], ''); "
      "RETURN NULL; END $$; CREATE OR REPLACE TRIGGER ",
      conn.QuoteIdentifier(kNotifyTriggerName), " AFTER INSERT ON ", name.quoted,
      " FOR EACH STATEMENT EXECUTE FUNCTION ", function, "(", conn.QuoteLiteral(channel), ")");
}

absl::Status InstallNotifyTrigger(pg::Connection& conn, const std::string& table,
                                  const std::string& channel) {
  // Several statements in one Exec run as one implicit transaction: both or neither.
  absl::StatusOr<pg::Result> result = conn.Exec(NotifyTriggerSql(conn, table, channel));
  if (result.ok()) return absl::OkStatus();
  return absl::Status(result.status().code(), absl::StrCat("cannot install the NOTIFY trigger on ",
                                                           table, ": ", result.status().message()));
}

absl::StatusOr<bool> HasNotifyTrigger(pg::Connection& conn, const std::string& table) {
  const pg::TableName name = pg::TableName::Split(conn, table);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result result,
      conn.ExecParams("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) "
                      "AND tgname = $2 AND tgenabled <> 'D'",
                      {name.quoted, std::string(kNotifyTriggerName)}));
  return result.Get(0, 0) != "0";
}

}  // namespace outboxd::poll
