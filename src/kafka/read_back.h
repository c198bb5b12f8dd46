// ReadBack: which of one relay's messages a Kafka topic already holds, so that a relay
// resuming from its confirmed position sends again only what the broker lacks
// (--dedupe, relay/resume_dedupe.h owns the rule). Each partition is read backwards
// from its high watermark in chunks (a consumer with assign + seek, no group, all
// partitions fetched at once), doubling each round, until it meets a message of this
// relay (its mark: the outboxd_slot header, outbox/message_format.h) whose lsn header
// lies below the window's start: everything older was confirmed and is never sent
// again. A partition is also finished by a chunk whose messages, whoever made them,
// were all made before the window's events could be (their Kafka timestamp below
// not_before): a relay new to a topic that others write to has no message of its own
// to stop at. Every message of this relay met on the way counts, by its id and key
// (sink::HeldIdentity) with its lsn. Other producers' messages are read past and
// ignored. Presence is only ever by that identity: a gap (a dead letter, a message
// too large for the broker) is never inferred away. Every partition is read and the
// messages are the topic's, not a partition's: after the partition count changed (a
// key now hashed to another partition) an event is still found wherever the earlier
// process put it, so that needs no fallback.
//
// Where a partition cannot be read back whole (no read permission, retention already
// deleted part of the window, more than max_messages to read, a timeout) the answer
// says so per partition; what was read so far is still true, so the caller only loses
// the promise of no duplicates there, never an event.
//
//   OUTBOXD_ASSIGN_OR_RETURN(TopicHoldings held,
//                            ReadBackTopic({.brokers = b, .mark_name = "outboxd_slot",
//                                           .mark_value = "app/outboxd", .since = confirmed},
//                                          "pedido.confirmado"));
//   auto copies = held.messages.find(sink::HeldIdentity(id, key));  // then its lsn
#ifndef OUTBOXD_KAFKA_READ_BACK_H_
#define OUTBOXD_KAFKA_READ_BACK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace outboxd::kafka {

struct ReadBackOptions {
  std::string brokers;
  // --kafka properties (security ones matter here); producer-only ones are ignored.
  std::vector<std::pair<std::string, std::string>> properties;
  // The header every message of this relay carries ({"outboxd_slot", "app/outboxd"}).
  std::string mark_name;
  std::string mark_value;
  // The window's start: a message of this relay below it ends a partition's read.
  uint64_t since = 0;
  // Milliseconds since the epoch before which no event of the window can have been
  // produced (0: unknown). A chunk made wholly of older messages ends a partition's
  // read; an own message of the window older than it (clocks apart) turns it off.
  int64_t not_before_ms = 0;
  int64_t max_messages = 400000;  // per partition, own and others'
  absl::Duration timeout = absl::Seconds(30);
};

// Why a partition (-1: the whole topic) could not be read back whole.
struct ReadBackFallback {
  int32_t partition = -1;
  // no_read_permission | retention | window_too_large | timeout | unavailable, and
  // in_flight (kafka/publisher.cc: an earlier session's messages still unacknowledged)
  std::string reason;
  std::string detail;  // one line, for the log
};

struct TopicHoldings {
  // This relay's messages found, by sink::HeldIdentity (id and key): the lsn header of
  // each copy.
  absl::flat_hash_map<std::string, std::vector<std::string>> messages;
  std::vector<ReadBackFallback> fallbacks;
  int64_t messages_read = 0;
  int partitions = 0;
  // An own message of the window was stamped before not_before_ms: the clocks disagree
  // by more than the caller's margin, and no chunk ended a read by its age.
  bool clock_disagrees = false;
};

// The lsn header "X/Y" as a number; 0 for text that is not one.
uint64_t ParseLsnHeader(std::string_view text);

// Reads `topic` back as described above. A topic the cluster does not have holds
// nothing. Errors only for properties librdkafka refuses; a broker that cannot be read
// is a fallback.
absl::StatusOr<TopicHoldings> ReadBackTopic(const ReadBackOptions& options, std::string_view topic);

}  // namespace outboxd::kafka

#endif  // OUTBOXD_KAFKA_READ_BACK_H_
