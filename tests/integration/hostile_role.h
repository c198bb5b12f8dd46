// What the trust tests' hostile role does (issue 27, docs/security.md "What we
// tested"), and the legitimate writer it attacks alongside. The role plants code where
// one of outboxd's roles might run it (a row-level security policy, an implicit cast),
// each piece recording in evil.ran who ran it, and forges logical decoding messages
// with outboxd's prefix; the writer's events must all arrive, in order per aggregate.
//
//   PlantAttackerSchema(db, attacker);
//   PlantPolicyTable(db, attacker);
//   EventLoad load(db.Connect(), EventLoad::Writes::kRowsAndMessages);
//   EmitRaw(attacker_conn, UnsignedSql(FieldsSql(id, "pedido-1", "{}")));
//   load.Stop();
//   ExpectDeliveredInOrder(h, load.committed(), absl::Seconds(60));
//   ExpectAttackerCodeNeverRan(db, attacker, "evil.outbox_p20200101", h.relay().Log());
#ifndef OUTBOXD_TESTS_INTEGRATION_HOSTILE_ROLE_H_
#define OUTBOXD_TESTS_INTEGRATION_HOSTILE_ROLE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "support/relay_harness.h"
#include "pg/connection.h"
#include "support/child_process.h"
#include "support/pg_fixture.h"

namespace outboxd::test {

// --- Code the role plants -------------------------------------------------------------

// Schema evil, owned by `attacker`, and evil.ran, where its code writes who ran it
// (any role may insert there, so the record survives whoever runs it).
void PlantAttackerSchema(TestDatabase& db, const std::string& attacker);
// Against the outbox's owner: evil.outbox_p20200101, marked as an older outboxd marked
// the partitions it detached, SELECT granted to PUBLIC, with a row-level security
// policy calling evil.spy(), which grants `attacker` everything on public.outbox when
// the owner runs it.
void PlantPolicyTable(TestDatabase& db, const std::string& attacker);
// Against a superuser's inbox cleanup: evil.inbox_p20200101, marked the same way, its
// processado_em of a type whose implicit cast to timestamptz makes `attacker` a
// superuser.
void PlantCastTable(TestDatabase& db, const std::string& attacker);
// None of the attacker's code ran (evil.ran is empty), the `planted` table is still
// there, and its role got nothing: not a superuser, no SELECT on the outbox.
void ExpectAttackerCodeNeverRan(TestDatabase& db, const std::string& attacker,
                                const std::string& planted, const std::string& context);

// `outboxd run` as `conninfo`'s role on the harness's slot and cluster, its cleanup job
// every second (retention 1 s for the outbox and the inbox), then `extra_args`; waits
// until it streams.
std::unique_ptr<ChildProcess> StartRelayAs(RelayHarness& h, const std::string& conninfo,
                                           const std::vector<std::string>& extra_args = {});

// --- Logical decoding messages (the WAL-only source) ---------------------------------

// Gives EXECUTE on pg_logical_emit_message back to PUBLIC, as PostgreSQL ships it and
// as setup leaves it when a non-superuser runs it or with --keep-public-emit-message:
// the database in which any role can write a logical message.
void GrantEmitMessageToPublic(TestDatabase& db);
// outboxd_emit(aggregate, 'pedido.confirmado', payload): the event's id.
std::string Emit(pg::Connection& conn, const std::string& aggregate, const std::string& payload);
// A message with outboxd's prefix, its content the SQL bytea expression `content_sql`.
void EmitRaw(pg::Connection& conn, const std::string& content_sql, bool transactional = true);
// The fields of outbox/emitted_event.h after the version (and mac), as a SQL bytea
// expression, with `payload` (no quote or backslash in it).
std::string FieldsSql(const std::string& id, const std::string& aggregate,
                      const std::string& payload,
                      const std::string& created_at = "2026-12-03 15:40:00.5+00");
// Version 1, unsigned, as outboxd 1.x's function wrote it.
std::string UnsignedSql(const std::string& fields_sql);
// Version 2 signed with the key in `key_table`, read by `conn`'s role: what only
// outboxd_emit can write (with the real key), for contents it would never write.
void EmitSigned(pg::Connection& conn, const std::string& fields_sql,
                const std::string& key_table = "outboxd_emit_key");

// --- The legitimate writer -------------------------------------------------------------

// The ids of committed events, per aggregate in commit order.
using Committed = std::map<std::string, std::vector<std::string>>;

// Every committed id reached the collector; per aggregate, the first delivery of each
// id respects commit order. Returns how many messages were duplicates.
size_t ExpectDeliveredInOrder(RelayHarness& h, const Committed& committed, absl::Duration timeout);

// Writes single- and multi-event transactions over 13 aggregates on `conn` until
// stopped; what it records is committed. kRowsAndMessages alternates outbox rows (an
// INSERT only: the id is drawn first, so the role needs no SELECT) and outboxd_emit
// calls within a transaction, for `run --source both`.
class EventLoad {
 public:
  enum class Writes { kMessages, kRowsAndMessages };
  explicit EventLoad(pg::Connection conn, Writes writes = Writes::kMessages);
  ~EventLoad() { Stop(); }
  void Stop();
  // Waits (up to 60 s) until `n` more transactions committed.
  bool WaitForMore(int n);
  int transactions();
  Committed committed();

 private:
  void Run();
  std::string Write(const std::string& aggregate, const std::string& payload, bool as_row);

  pg::Connection conn_;
  const Writes writes_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  int transactions_ = 0;
  Committed committed_;
  std::thread thread_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_INTEGRATION_HOSTILE_ROLE_H_
