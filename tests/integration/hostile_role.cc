#include "integration/hostile_role.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

constexpr char kAttackerSchema[] = R"sql(
CREATE SCHEMA evil AUTHORIZATION $ATTACKER;
SET ROLE $ATTACKER;
CREATE TABLE evil.ran (who text, what text);
GRANT USAGE ON SCHEMA evil TO PUBLIC;
GRANT INSERT ON evil.ran TO PUBLIC;
RESET ROLE;
)sql";

constexpr char kPlantedPolicy[] = R"sql(
SET ROLE $ATTACKER;
CREATE FUNCTION evil.spy() RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO evil.ran VALUES (current_user, 'policy');
  BEGIN
    EXECUTE 'GRANT ALL ON public.outbox TO $ATTACKER';
  EXCEPTION WHEN others THEN NULL;
  END;
  RETURN true;
END $f$;
CREATE TABLE evil.outbox_p20200101 (criado_em timestamptz, publicado_em timestamptz);
INSERT INTO evil.outbox_p20200101 VALUES (now() - interval '1 year', now() - interval '1 year');
ALTER TABLE evil.outbox_p20200101 ENABLE ROW LEVEL SECURITY;
CREATE POLICY spy ON evil.outbox_p20200101 USING (evil.spy());
GRANT SELECT ON evil.outbox_p20200101 TO PUBLIC;
COMMENT ON TABLE evil.outbox_p20200101 IS 'outboxd: detached from outbox to be dropped';
RESET ROLE;
)sql";

constexpr char kPlantedCast[] = R"sql(
SET ROLE $ATTACKER;
CREATE TYPE evil.stamp AS (at timestamptz);
CREATE FUNCTION evil.to_ts(evil.stamp) RETURNS timestamptz LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO evil.ran VALUES (current_user, 'cast');
  BEGIN
    EXECUTE 'ALTER ROLE $ATTACKER SUPERUSER';
  EXCEPTION WHEN others THEN NULL;
  END;
  RETURN '2000-01-01'::timestamptz;
END $f$;
CREATE CAST (evil.stamp AS timestamptz) WITH FUNCTION evil.to_ts(evil.stamp) AS IMPLICIT;
CREATE TABLE evil.inbox_p20200101
  (message_id uuid, evento_criado_em timestamptz, processado_em evil.stamp);
INSERT INTO evil.inbox_p20200101 VALUES (gen_random_uuid(), now(), ROW(now()));
GRANT SELECT ON evil.inbox_p20200101 TO PUBLIC;
COMMENT ON TABLE evil.inbox_p20200101 IS 'outboxd: detached from inbox to be dropped';
RESET ROLE;
)sql";

// As the superuser, so that the attacker's objects exist whatever its own rights.
void AsSuperuser(TestDatabase& db, const std::string& sql, const std::string& attacker) {
  db.Exec(absl::StrReplaceAll(sql, {{"$ATTACKER", attacker}}));
}

}  // namespace

void PlantAttackerSchema(TestDatabase& db, const std::string& attacker) {
  AsSuperuser(db, kAttackerSchema, attacker);
}

void PlantPolicyTable(TestDatabase& db, const std::string& attacker) {
  AsSuperuser(db, kPlantedPolicy, attacker);
}

void PlantCastTable(TestDatabase& db, const std::string& attacker) {
  AsSuperuser(db, kPlantedCast, attacker);
}

void ExpectAttackerCodeNeverRan(TestDatabase& db, const std::string& attacker,
                                const std::string& planted, const std::string& context) {
  EXPECT_EQ(db.Scalar("SELECT coalesce(string_agg(who || ' ran ' || what, ', '), 'nobody') "
                      "FROM evil.ran"),
            "nobody")
      << context;
  EXPECT_EQ(db.Scalar("SELECT to_regclass('" + planted + "') IS NOT NULL"), "t") << context;
  EXPECT_EQ(db.Scalar("SELECT rolsuper FROM pg_roles WHERE rolname = '" + attacker + "'"), "f")
      << context;
  EXPECT_EQ(db.Scalar("SELECT has_table_privilege('" + attacker + "', 'outbox', 'SELECT')"), "f")
      << context;
}

std::unique_ptr<ChildProcess> StartRelayAs(RelayHarness& h, const std::string& conninfo,
                                           const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {BinPath("outboxd"),
                                   "run",
                                   "--pg",
                                   conninfo,
                                   "--brokers",
                                   h.cluster().bootstraps(),
                                   "--slot",
                                   h.slot(),
                                   "--metrics",
                                   "127.0.0.1:0",
                                   "--cleanup-interval",
                                   "1s",
                                   "--retention",
                                   "1s",
                                   "--inbox-retention",
                                   "1s"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  auto relay = ChildProcess::Start(args);
  EXPECT_TRUE(WaitForStreaming(*relay)) << relay->Log();
  return relay;
}

void GrantEmitMessageToPublic(TestDatabase& db) {
  db.Exec(
      "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text), "
      "pg_logical_emit_message(boolean, text, bytea) TO PUBLIC");
}

std::string Emit(pg::Connection& conn, const std::string& aggregate, const std::string& payload) {
  absl::StatusOr<pg::Result> r = conn.ExecParams(
      "SELECT outboxd_emit($1, 'pedido.confirmado', $2::jsonb)::text", {aggregate, payload});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::string(r->Get(0, 0)) : "";
}

void EmitRaw(pg::Connection& conn, const std::string& content_sql, bool transactional) {
  absl::StatusOr<pg::Result> r =
      conn.Exec(absl::StrCat("SELECT pg_logical_emit_message(", transactional ? "true" : "false",
                             ", 'outboxd', ", content_sql, ")"));
  ASSERT_TRUE(r.ok()) << r.status();
}

std::string FieldsSql(const std::string& id, const std::string& aggregate,
                      const std::string& payload, const std::string& created_at) {
  return absl::StrCat("'", id, "'::bytea || '\\x00'::bytea || '", aggregate,
                      "'::bytea || '\\x00'::bytea || 'pedido.confirmado'::bytea || "
                      "'\\x00'::bytea || '",
                      created_at, "'::bytea || '\\x00'::bytea || '", payload, "'::bytea");
}

std::string UnsignedSql(const std::string& fields_sql) {
  return absl::StrCat("'outboxd-v1'::bytea || '\\x00'::bytea || ", fields_sql);
}

void EmitSigned(pg::Connection& conn, const std::string& fields_sql, const std::string& key_table) {
  absl::StatusOr<pg::Result> r = conn.Exec(absl::StrCat(
      "SELECT pg_logical_emit_message(true, 'outboxd', 'outboxd-v2'::bytea || '\\x00'::bytea || "
      "convert_to(encode(sha256(k.outer_pad || sha256(k.inner_pad || 'outboxd-v2'::bytea || "
      "'\\x00'::bytea || f.rest)), 'hex'), 'UTF8') || '\\x00'::bytea || f.rest) "
      "FROM ",
      key_table, " k, (SELECT ", fields_sql, " AS rest) f"));
  ASSERT_TRUE(r.ok()) << r.status();
}

size_t ExpectDeliveredInOrder(RelayHarness& h, const Committed& committed, absl::Duration timeout) {
  std::set<std::string> wanted;
  for (const auto& [aggregate, ids] : committed) wanted.insert(ids.begin(), ids.end());
  const bool all = WaitUntil(timeout, [&] {
    std::set<std::string> seen;
    for (const CollectedMessage& m : h.collector().Messages())
      seen.insert(m.Header("id").value_or(""));
    for (const std::string& id : wanted) {
      if (!seen.contains(id)) return false;
    }
    return true;
  });
  EXPECT_TRUE(all) << "not every committed event was delivered; relay log:\n" << h.relay().Log();
  std::map<std::string, std::vector<std::string>> first_seen;
  std::set<std::string> seen;
  size_t duplicates = 0;
  for (const CollectedMessage& m : h.collector().Messages()) {
    const std::string id = m.Header("id").value_or("");
    if (!seen.insert(id).second) {
      ++duplicates;
      continue;
    }
    first_seen[m.key].push_back(id);
  }
  for (const auto& [aggregate, ids] : committed) {
    EXPECT_EQ(first_seen[aggregate], ids) << "order of aggregate " << aggregate;
  }
  return duplicates;
}

EventLoad::EventLoad(pg::Connection conn, Writes writes) : conn_(std::move(conn)), writes_(writes) {
  thread_ = std::thread([this] { Run(); });
}

void EventLoad::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool EventLoad::WaitForMore(int n) {
  const int target = transactions() + n;
  return WaitUntil(absl::Seconds(60), [&] { return transactions() >= target; });
}

int EventLoad::transactions() {
  absl::MutexLock lock(&mu_);
  return transactions_;
}

Committed EventLoad::committed() {
  absl::MutexLock lock(&mu_);
  return committed_;
}

std::string EventLoad::Write(const std::string& aggregate, const std::string& payload,
                             bool as_row) {
  if (!as_row) return Emit(conn_, aggregate, payload);
  absl::StatusOr<pg::Result> id = conn_.Exec("SELECT gen_random_uuid()::text");
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return "";
  const std::string event_id(id->Get(0, 0));
  absl::StatusOr<pg::Result> r = conn_.ExecParams(
      "INSERT INTO outbox (id, aggregate_id, tipo, payload) VALUES ($1::uuid, $2, "
      "'pedido.confirmado', $3::jsonb)",
      {event_id, aggregate, payload});
  EXPECT_TRUE(r.ok()) << r.status();
  return event_id;
}

void EventLoad::Run() {
  for (int i = 0; !stop_; ++i) {
    const int events = 1 + i % 3;
    std::vector<std::pair<std::string, std::string>> written;
    if (!conn_.Exec("BEGIN").ok()) return;
    for (int e = 0; e < events; ++e) {
      const std::string aggregate = absl::StrCat("pedido-", (i * 7 + e) % 13);
      const bool as_row = writes_ == Writes::kRowsAndMessages && (i + e) % 2 == 1;
      written.emplace_back(aggregate, Write(aggregate, absl::StrCat(R"({"i":)", i, "}"), as_row));
    }
    if (!conn_.Exec("COMMIT").ok()) return;
    absl::MutexLock lock(&mu_);
    for (auto& [aggregate, id] : written) committed_[aggregate].push_back(id);
    ++transactions_;
  }
}

}  // namespace outboxd::test
