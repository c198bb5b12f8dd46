// outbox::Enqueue on the real PostgreSQL: the event lives and dies with the caller's
// transaction, and anything that would defeat that (no transaction, a failed one)
// or poison the relay (an empty key, a scalar payload) is refused.
#include "outbox/writer.h"

#include <libpq-fe.h>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "outbox/emit_key.h"
#include "outbox/emitted_event.h"
#include "pgoutput/decoder.h"
#include "support/set_up_database.h"

namespace outboxd::outbox {
namespace {

const NewEvent kEvent{.aggregate_id = "pedido-77",
                      .type = "pedido.confirmado",
                      .payload = R"({"pedidoId":"pedido-77","totalCentavos":1000})"};

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override { db_ = test::CreateSetUpDatabase(); }
  int64_t Events() { return std::stoll(db_->Scalar("SELECT count(*) FROM outbox")); }
  void MustExec(pg::Connection& conn, std::string_view sql) {
    auto r = conn.Exec(sql);
    ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
  }

  std::unique_ptr<test::TestDatabase> db_;
};

TEST_F(WriterTest, EventBecomesVisibleOnlyWhenTheCallersTransactionCommits) {
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  absl::StatusOr<std::string> id = Enqueue(app, kEvent);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(PQtransactionStatus(app.get()), PQTRANS_INTRANS) << "Enqueue must not commit";
  EXPECT_EQ(Events(), 0) << "visible before COMMIT";
  MustExec(app, "COMMIT");
  pg::Result row = db_->Exec("SELECT id, aggregate_id, tipo, payload::text FROM outbox");
  ASSERT_EQ(row.rows(), 1);
  EXPECT_EQ(row.Get(0, 0), *id);
  EXPECT_EQ(row.Get(0, 1), "pedido-77");
  EXPECT_EQ(row.Get(0, 2), "pedido.confirmado");
  EXPECT_EQ(row.Get(0, 3), R"({"pedidoId": "pedido-77", "totalCentavos": 1000})");
}

TEST_F(WriterTest, EnqueueOutsideATransactionFails) {
  pg::Connection app = db_->Connect();
  absl::StatusOr<std::string> id = Enqueue(app, kEvent);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(id.status().message().find("BEGIN first"), absl::string_view::npos) << id.status();
  EXPECT_EQ(Events(), 0);
}

TEST_F(WriterTest, EnqueueInAFailedTransactionFails) {
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  EXPECT_FALSE(app.Exec("SELECT 1/0").ok());
  EXPECT_EQ(Enqueue(app, kEvent).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Both or neither: an error after the event was added (here, in the business change
// that follows it) and the caller's ROLLBACK take the event with them.
TEST_F(WriterTest, ErrorAfterEnqueueRollsBackTheEventWithTheBusinessChange) {
  db_->Exec("CREATE TABLE pedidos (id text PRIMARY KEY, status text)");
  db_->Exec("INSERT INTO pedidos VALUES ('pedido-77', 'pendente')");
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  MustExec(app, "UPDATE pedidos SET status = 'confirmado' WHERE id = 'pedido-77'");
  ASSERT_TRUE(Enqueue(app, kEvent).ok());
  EXPECT_FALSE(app.Exec("INSERT INTO pedidos VALUES ('pedido-77', 'duplicado')").ok());
  MustExec(app, "ROLLBACK");
  EXPECT_EQ(Events(), 0);
  EXPECT_EQ(db_->Scalar("SELECT status FROM pedidos"), "pendente");
}

// Refused before the INSERT, so the caller's transaction stays usable.
TEST_F(WriterTest, BadEventsAreRefusedWithoutAbortingTheTransaction) {
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  for (const NewEvent& bad : {NewEvent{"", "pedido.confirmado", "{}"}, NewEvent{"p", "", "{}"},
                              NewEvent{"p", "t", "42"}, NewEvent{"p", "t", "{not json"}}) {
    absl::StatusOr<std::string> id = Enqueue(app, bad);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << bad.payload;
  }
  EXPECT_EQ(PQtransactionStatus(app.get()), PQTRANS_INTRANS);
  EXPECT_TRUE(Enqueue(app, kEvent).ok());
  MustExec(app, "COMMIT");
  EXPECT_EQ(Events(), 1);
}

// Values travel as parameters, never spliced into the SQL.
TEST_F(WriterTest, ValuesAreParametersNotSql) {
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  const NewEvent tricky{.aggregate_id = "x'); DROP TABLE outbox; --",
                        .type = "pedido.confirmado",
                        .payload = R"({"nota": "ação \"citada\" 'aspas'"})"};
  ASSERT_TRUE(Enqueue(app, tricky).ok());
  MustExec(app, "COMMIT");
  EXPECT_EQ(db_->Scalar("SELECT aggregate_id FROM outbox"), tricky.aggregate_id);
  EXPECT_EQ(db_->Scalar("SELECT payload->>'nota' FROM outbox"), "ação \"citada\" 'aspas'");
}

TEST_F(WriterTest, TableAndColumnNamesAreConfigurable) {
  db_->Exec(
      "CREATE SCHEMA app; CREATE TABLE app.\"Events\" (event_id uuid PRIMARY KEY DEFAULT "
      "gen_random_uuid(), aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)");
  WriterOptions debezium{
      .table = "app.Events",
      .columns = {.id = "event_id", .aggregate_id = "aggregateid", .type = "type"}};
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  absl::StatusOr<std::string> id = Enqueue(app, kEvent, debezium);
  ASSERT_TRUE(id.ok()) << id.status();
  MustExec(app, "COMMIT");
  EXPECT_EQ(db_->Scalar("SELECT event_id FROM app.\"Events\" WHERE aggregateid = 'pedido-77'"),
            *id);
}

TEST_F(WriterTest, MissingTableSaysToRunSetup) {
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  absl::StatusOr<std::string> id = Enqueue(app, kEvent, {.table = "outbox_nao_existe"});
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pg::SqlStateOf(id.status()), "42P01");
  EXPECT_NE(id.status().message().find("outboxd setup"), absl::string_view::npos) << id.status();
}

// The WAL-only writer: what outboxd_emit wrote, as the relay will read it from the
// slot (pgoutput with messages 'true'), one message per committed event.
std::vector<std::string> EmittedMessages(test::TestDatabase& db) {
  pg::Result r = db.Exec(absl::StrCat(
      "SELECT encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('", db.name(),
      "', NULL, NULL, 'proto_version', '1', 'publication_names', 'outboxd', 'messages', 'true') "
      "WHERE get_byte(data, 0) = ascii('M')"));
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(absl::HexStringToBytes(std::string(r.Get(i, 0))));
  return out;
}

TEST_F(WriterTest, EmitEventWritesOneTransactionalMessageOnlyWhenTheTransactionCommits) {
  pg::Connection app = db_->Connect();
  MustExec(app, "BEGIN");
  ASSERT_TRUE(EmitEvent(app, kEvent).ok());
  MustExec(app, "ROLLBACK");
  MustExec(app, "BEGIN");
  absl::StatusOr<std::string> id = EmitEvent(app, kEvent);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(PQtransactionStatus(app.get()), PQTRANS_INTRANS) << "EmitEvent must not commit";
  MustExec(app, "COMMIT");
  EXPECT_EQ(Events(), 0) << "no outbox row";
  const std::vector<std::string> messages = EmittedMessages(*db_);
  ASSERT_EQ(messages.size(), 1u) << "the rolled-back event is not in the WAL stream";
  absl::StatusOr<pgoutput::Message> decoded = pgoutput::Decode(messages[0]);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& message = std::get<pgoutput::LogicalMessage>(*decoded);
  EXPECT_EQ(message.flags, 1) << "transactional";
  EXPECT_EQ(message.prefix, kEmitPrefix);
  // Signed with the key setup made, as the relay checks it.
  absl::StatusOr<EmitKey> key = EmitKeyStore(*pg::TableName::Parse("outbox")).Read(app, "outboxd");
  ASSERT_TRUE(key.ok()) << key.status();
  EmittedRead read = ReadEmittedEvent(message.content, *key, message.lsn);
  ASSERT_TRUE(read.ok()) << read.why;
  const OutboxEvent* event = &read.event;
  EXPECT_EQ(event->id, *id);
  EXPECT_EQ(event->aggregate_id, "pedido-77");
  EXPECT_EQ(event->type, "pedido.confirmado");
  EXPECT_EQ(event->payload, R"({"pedidoId": "pedido-77", "totalCentavos": 1000})");
  // As a created-at column reaches the relay: ISO DateStyle, UTC, microseconds.
  EXPECT_EQ(event->created_at.size(), 29u) << event->created_at;
  EXPECT_EQ(event->created_at.substr(26), "+00") << event->created_at;
}

TEST_F(WriterTest, EmitEventRefusesWhatEnqueueRefuses) {
  pg::Connection app = db_->Connect();
  EXPECT_EQ(EmitEvent(app, kEvent).status().code(), absl::StatusCode::kFailedPrecondition);
  MustExec(app, "BEGIN");
  for (const NewEvent& bad : {NewEvent{"", "pedido.confirmado", "{}"}, NewEvent{"p", "t", "42"}}) {
    EXPECT_EQ(EmitEvent(app, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(PQtransactionStatus(app.get()), PQTRANS_INTRANS);
  MustExec(app, "ROLLBACK");
  // The SQL function checks the same for callers in any language.
  EXPECT_FALSE(app.Exec("SELECT outboxd_emit('p', 't', '42')").ok());
  EXPECT_FALSE(app.Exec("SELECT outboxd_emit('', 't', '{}')").ok());
  absl::StatusOr<std::string> missing = [&] {
    MustExec(app, "BEGIN");
    return EmitEvent(app, kEvent, {.table = "sem_schema.outbox"});
  }();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("outboxd setup"), absl::string_view::npos)
      << missing.status();
}

// Setup takes EXECUTE from PUBLIC: a role the owner did not grant it is told the GRANT.
TEST_F(WriterTest, EmitEventNamesTheGrantARoleWithoutExecuteNeeds) {
  const std::string role = db_->CreateRole("");
  pg::Connection app = *pg::Connection::Open(db_->ConninfoWith("user=" + role));
  MustExec(app, "BEGIN");
  absl::StatusOr<std::string> id = EmitEvent(app, kEvent);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied) << id.status();
  EXPECT_NE(id.status().message().find(
                "GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO this role"),
            absl::string_view::npos)
      << id.status();
  MustExec(app, "ROLLBACK");
  db_->Exec("GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO " + role);
  MustExec(app, "BEGIN");
  EXPECT_TRUE(EmitEvent(app, kEvent).ok());
  MustExec(app, "ROLLBACK");
}

}  // namespace
}  // namespace outboxd::outbox
