// Every decision here is made from the catalog (pg_class, pg_inherits, pg_roles) and
// the ledger, whose trust is checked first: no query reads a table another role could
// have made, so no other role's policy, cast, operator or trigger can run.
#include "ops/internal/detach_ledger.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/identifier.h"

namespace outboxd::ops::internal {
namespace {

LedgerEntry::State ParseState(std::string_view state) {
  if (state == "pending") return LedgerEntry::State::kPending;
  if (state == "attached") return LedgerEntry::State::kAttached;
  if (state == "detached") return LedgerEntry::State::kDetached;
  if (state == "changed") return LedgerEntry::State::kChanged;
  return LedgerEntry::State::kGone;
}

}  // namespace

std::string TrustedOwnerSql(const std::string& rel, const std::string& parent) {
  return absl::StrCat("(", rel, ".relowner = ", parent,
                      ".relowner OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = ",
                      rel, ".relowner AND r.rolsuper))");
}

DetachLedger::DetachLedger(const pg::TableName& outbox)
    : table_(outbox.Sibling(outbox.name + "_detached")) {}

std::string DetachLedger::CreateSql() const {
  return absl::StrCat("CREATE TABLE IF NOT EXISTS ", table_.quoted, R"sql( (
  partition   oid         PRIMARY KEY,  -- pg_class oid of the partition
  parent      oid         NOT NULL,     -- the outbox or inbox it is detached from
  owner       oid         NOT NULL,     -- the partition's owner when recorded
  schema_name name        NOT NULL,
  table_name  name        NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
); REVOKE ALL ON )sql",
                      table_.quoted, " FROM PUBLIC; COMMENT ON TABLE ", table_.quoted,
                      " IS 'outboxd: the partitions it detaches, to drop them'");
}

absl::StatusOr<bool> DetachLedger::Check(pg::Connection& conn, const pg::TableName& parent) const {
  // Who owns it, whether that owner is trusted, and who else may do more than read it.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat(
              "SELECT pg_get_userbyid(l.relowner), l.relkind = 'r' AND ", TrustedOwnerSql("l", "p"),
              ", coalesce((SELECT string_agg(DISTINCT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE "
              "quote_ident(pg_get_userbyid(a.grantee)) END, ', ') FROM aclexplode(l.relacl) a "
              "WHERE a.grantee <> l.relowner AND a.privilege_type <> 'SELECT'), '') "
              "FROM pg_catalog.pg_class l, pg_catalog.pg_class p "
              "WHERE l.oid = to_regclass($1) AND p.oid = to_regclass($2)"),
          {table_.quoted, parent.quoted}));
  if (r.rows() == 0) return false;
  if (r.Get(0, 1) != "t") {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", table_.Display(), " is owned by role ", std::string(r.Get(0, 0)),
                     ", not by the owner of ", parent.Display(),
                     " or a superuser: outboxd trusts its record of detached partitions only "
                     "there; drop or rename that table and run outboxd setup as the owner"));
  }
  if (!r.Get(0, 2).empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", table_.Display(),
                     " lets other roles change it, and outboxd drops what it "
                     "lists: REVOKE ALL ON ",
                     table_.Display(), " FROM ", std::string(r.Get(0, 2))));
  }
  return true;
}

absl::Status DetachLedger::Ensure(pg::Connection& conn, const pg::TableName& parent) const {
  OUTBOXD_ASSIGN_OR_RETURN(bool exists, Check(conn, parent));
  if (exists) return absl::OkStatus();
  if (absl::StatusOr<pg::Result> made = conn.Exec(CreateSql()); !made.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create table ", table_.Display(), " to record the partitions outboxd detaches (",
        made.status().message(), "): run outboxd setup as the owner of ", parent.Display()));
  }
  return Check(conn, parent).status();
}

absl::StatusOr<std::string> DetachLedger::Record(pg::Connection& conn, const pg::TableName& parent,
                                                 const pg::TableName& leaf) const {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat(
              "INSERT INTO ", table_.quoted,
              " (partition, parent, owner, schema_name, table_name) "
              "SELECT c.oid, i.inhparent, c.relowner, n.nspname, c.relname "
              "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid "
              "JOIN pg_catalog.pg_class p ON p.oid = i.inhparent "
              "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
              "WHERE c.oid = to_regclass($1) AND p.oid = to_regclass($2) AND c.relkind = 'r' AND ",
              TrustedOwnerSql("c", "p"),
              " ON CONFLICT (partition) DO UPDATE SET parent = excluded.parent, owner = "
              "excluded.owner, schema_name = excluded.schema_name, table_name = "
              "excluded.table_name, recorded_at = now() RETURNING partition"),
          {leaf.quoted, parent.quoted}));
  if (r.rows() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", leaf.Display(), " is not a partition of ", parent.Display(),
                     " owned by its owner: outboxd detaches and drops only those"));
  }
  return std::string(r.Get(0, 0));
}

absl::StatusOr<std::vector<LedgerEntry>> DetachLedger::Entries(pg::Connection& conn,
                                                               const pg::TableName& parent) const {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat(
              "SELECT d.partition, d.schema_name, d.table_name, CASE "
              "WHEN c.oid IS NULL THEN 'gone' "
              "WHEN c.relname <> d.table_name OR n.nspname <> d.schema_name OR c.relkind <> 'r' "
              "OR c.relowner <> d.owner OR NOT ",
              TrustedOwnerSql("c", "p"),
              " OR (c.relispartition AND i.inhrelid IS NULL) THEN 'changed' "
              "WHEN i.inhdetachpending THEN 'pending' WHEN c.relispartition THEN 'attached' "
              "ELSE 'detached' END FROM ",
              table_.quoted,
              " d JOIN pg_catalog.pg_class p ON p.oid = d.parent "
              "LEFT JOIN pg_catalog.pg_class c ON c.oid = d.partition "
              "LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
              "LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = p.oid "
              "WHERE p.oid = to_regclass($1) ORDER BY d.table_name"),
          {parent.quoted}));
  std::vector<LedgerEntry> entries;
  for (int i = 0; i < r.rows(); ++i) {
    const std::string schema(r.Get(i, 1));
    const std::string name(r.Get(i, 2));
    entries.push_back(
        {std::string(r.Get(i, 0)),
         pg::TableName{schema, name,
                       absl::StrCat(pg::SqlIdentifier(schema), ".", pg::SqlIdentifier(name))},
         ParseState(r.Get(i, 3))});
  }
  return entries;
}

absl::Status DetachLedger::Forget(pg::Connection& conn, const std::string& oid) const {
  return conn
      .ExecParams(absl::StrCat("DELETE FROM ", table_.quoted, " WHERE partition = $1::oid"), {oid})
      .status();
}

}  // namespace outboxd::ops::internal
