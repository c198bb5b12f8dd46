// The verdict of a chaos run, from three independent sources: the outbox table (what
// committed), the dead-letter table, and what the Reader (reader.h) read from the
// broker, Kafka, RabbitMQ or NATS.
//
// Order, precisely: replay the run as a consumer that drops repeated ids would, first
// every message in the order read (Kafka: per partition in offset order, an aggregate
// lives in one partition; RabbitMQ: the one queue as consumed; NATS: the one stream in
// sequence order), then the dead-letter table in its arrival order (as `outboxd
// dead-letter replay` would publish it). For each aggregate, the events that consumer
// keeps (first occurrences) must come in commit order: by commit LSN (the `lsn` header
// / the dead letter's lsn), then by outbox seq within a transaction. A redelivered
// window may go back in time: the repeats are dropped, so they are counted as
// duplicates, never as disorder; an event seen for the first time after a later one
// of its aggregate is disorder. An event both published and dead-lettered (replayed
// after its aggregate was poisoned) is one duplicate.
//
// After a PostgreSQL failover (--replica) the outbox table read is the surviving
// timeline's. An id in the broker that is neither there nor rolled back is a ghost:
// committed on the old primary, published, and lost with it (counted, not a loss; the
// driver requires none with --standby-slot). A slot re-created on the new primary
// backfills the unacknowledged rows with its consistent point as their lsn header, so
// one id may then carry two lsn headers.
#ifndef OUTBOXD_TESTS_CHAOS_CHECKER_H_
#define OUTBOXD_TESTS_CHAOS_CHECKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "chaos/reader.h"
#include "pg/connection.h"

namespace outboxd::chaos {

struct Verdict {
  int64_t committed = 0;              // outbox rows
  int64_t messages = 0;               // Kafka messages read
  int64_t published = 0;              // committed events found in Kafka
  int64_t dead_lettered = 0;          // rows of the dead-letter table
  int64_t lost = 0;                   // committed, in neither
  int64_t duplicates = 0;             // Kafka repeats + events in both Kafka and the table
  int64_t in_both = 0;                // of which: published, then dead-lettered on a replay
  int64_t rolled_back_seen = 0;       // rolled-back ids found anywhere
  int64_t unknown = 0;                // ids found in Kafka/dead letters but never written
  int64_t ghosts = 0;                 // failover: ids committed on a timeline that was lost
  int64_t poison_published = 0;       // poison events that reached Kafka
  int64_t disorder = 0;               // first occurrences against commit order
  int64_t lsn_mismatch = 0;           // one id with two different lsn headers
  std::vector<std::string> examples;  // the first few problems, one line each

  bool ok() const {
    return lost == 0 && rolled_back_seen == 0 && unknown == 0 && poison_published == 0 &&
           disorder == 0 && lsn_mismatch == 0;
  }
};

struct OutboxRow {
  std::string id;
  int64_t seq = 0;
  std::string aggregate;
};

struct DeadLetterRow {
  std::string id;
  std::string aggregate;
  std::string lsn;
};

struct CheckInput {
  std::vector<OutboxRow> outbox;            // what committed
  std::vector<DeadLetterRow> dead_letters;  // in arrival (seq) order
  std::vector<Delivery> deliveries;         // as read, per partition in offset order
  absl::flat_hash_set<std::string> rolled_back;
  absl::flat_hash_set<std::string> poison;
  // The run failed PostgreSQL over (see the header comment): unknown ids are ghosts,
  // and a backfill's second lsn header is no mismatch.
  bool failover = false;
};

// Fills input.outbox and input.dead_letters from the database.
absl::Status ReadTables(pg::Connection& conn, CheckInput& input);

Verdict Check(const CheckInput& input);

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_CHECKER_H_
