#include "outbox/emit_key.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "pg/lsn.h"

namespace outboxd::outbox {
namespace {

// 64 random bytes (the four UUIDs' 488 random bits, from pg_strong_random) XORed
// into HMAC's two pads: SQL has no XOR on bytea, so the pads are kept, not the key.
constexpr char kNewKeySelect[] = R"sql(
SELECT 1,
  pg_catalog.decode(pg_catalog.string_agg(pg_catalog.lpad(pg_catalog.to_hex(
    pg_catalog.get_byte(k, i) # 54), 2, '0'), '' ORDER BY i), 'hex'),
  pg_catalog.decode(pg_catalog.string_agg(pg_catalog.lpad(pg_catalog.to_hex(
    pg_catalog.get_byte(k, i) # 92), 2, '0'), '' ORDER BY i), 'hex'),
  '0/0'::pg_lsn
FROM (SELECT pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text ||
        pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', ''), 'hex') AS k) secret,
     pg_catalog.generate_series(0, 63) AS i
ON CONFLICT (id) DO NOTHING)sql";

}  // namespace

absl::StatusOr<bool> EmitKeyStore::Ensure(pg::Connection& conn, bool had_function) const {
  // unsigned_before: version-1 content below it is read (RecordUpgrade).
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec(absl::StrCat("CREATE TABLE IF NOT EXISTS ", table_.quoted,
                             " (id int PRIMARY KEY CHECK (id = 1), inner_pad bytea NOT NULL, "
                             "outer_pad bytea NOT NULL, unsigned_before pg_lsn NOT NULL); "
                             "REVOKE ALL ON ",
                             table_.quoted, " FROM PUBLIC"))
          .status());
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result inserted,
                           conn.Exec(absl::StrCat("INSERT INTO ", table_.quoted,
                                                  " (id, inner_pad, outer_pad, "
                                                  "unsigned_before)",
                                                  kNewKeySelect)));
  return had_function && inserted.AffectedRows() == 1;
}

absl::Status EmitKeyStore::RecordUpgrade(pg::Connection& conn) const {
  return conn
      .Exec(absl::StrCat(
          "UPDATE ", table_.quoted,
          " SET unsigned_before = pg_catalog.pg_current_wal_insert_lsn() WHERE id = 1"))
      .status();
}

absl::StatusOr<pg::TableName> EmitKeyStore::Locate(pg::Connection& conn,
                                                   const std::string& publication) const {
  // The key table in the schema of the outbox the relay's publication covers, owned by
  // that table's owner. Only a table's owner can add it to a publication, and the
  // publication's name is unique in the database: a role that plants its own outbox
  // and key earlier in the relay's search_path cannot get its key read.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams("SELECT n.nspname, k.oid IS NOT NULL, k.relowner = o.relowner "
                      "FROM pg_catalog.pg_publication_tables t "
                      "JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname "
                      "JOIN pg_catalog.pg_class o ON o.relnamespace = n.oid "
                      "AND o.relname = t.tablename "
                      "LEFT JOIN pg_catalog.pg_class k ON k.relnamespace = n.oid "
                      "AND k.relname = $3 AND k.relkind = 'r' "
                      "WHERE t.pubname = $1 AND t.tablename = $2 "
                      "AND ($4 = '' OR t.schemaname = $4)",
                      {publication, outbox_.name, std::string(kEmitKeyTable), outbox_.schema}));
  if (r.rows() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publication ", publication, " covers a table ", outbox_.name,
        " in more than one schema: name the outbox's with --table SCHEMA.", outbox_.name));
  }
  if (r.rows() == 0 || r.Get(0, 1) != "t") {
    return absl::FailedPreconditionError(absl::StrCat(
        "no key for outboxd_emit's events beside ", outbox_.Display(), " (publication ",
        publication, "): run outboxd setup (it creates the key and makes outboxd_emit sign)"));
  }
  const pg::TableName table =
      pg::TableName{std::string(r.Get(0, 0)), "", ""}.Sibling(kEmitKeyTable);
  if (r.Get(0, 2) != "t") {
    return absl::FailedPreconditionError(absl::StrCat(
        table.Display(), " is not owned by the owner of ", outbox_.Display(),
        ", so its key is not trusted: drop it and run outboxd setup as the outbox's owner"));
  }
  return table;
}

absl::StatusOr<EmitKey> EmitKeyStore::Read(pg::Connection& conn,
                                           const std::string& publication) const {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, Locate(conn, publication));
  absl::StatusOr<pg::Result> r = conn.Exec(absl::StrCat(
      "SELECT pg_catalog.encode(inner_pad, 'hex'), pg_catalog.encode(outer_pad, 'hex'), "
      "unsigned_before::text FROM ",
      table.quoted, " WHERE id = 1"));
  if (pg::SqlStateOf(r.status()) == "42501") {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the key of outboxd_emit's events (permission denied for ", table.Display(),
        "): GRANT SELECT ON ", table.quoted, " TO the relay's role (docs/security.md)"));
  }
  if (!r.ok()) return Annotate(r.status(), "cannot read the outboxd_emit key: ");
  if (r->rows() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(table.Display(), " holds no key: run outboxd setup"));
  }
  EmitKey key;
  for (auto [pad, col] : {std::pair{&key.inner_pad, 0}, std::pair{&key.outer_pad, 1}}) {
    const std::string_view hex = r->Get(0, col);
    *pad = absl::HexStringToBytes(absl::string_view(hex.data(), hex.size()));
  }
  OUTBOXD_ASSIGN_OR_RETURN(key.unsigned_before, pg::ParseLsn(r->Get(0, 2)));
  return key;
}

}  // namespace outboxd::outbox
