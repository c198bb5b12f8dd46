// Reads the outbox rows a new slot will not stream, inside the snapshot exported
// when the slot was created: exactly the rows committed before the slot's
// consistent point, so backfill then stream leaves no gap and no overlap. Which rows:
// a BackfillRequest left by `outboxd setup` (the rows a polling relay left pending, or
// after --recreate-slot the rows written after the last acknowledged position).
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::CreatedSlot slot, pg::CreateSlotWithSnapshot(repl, "outboxd"));
//   OUTBOXD_ASSIGN_OR_RETURN(BackfillReader reader,
//                            BackfillReader::Open(conninfo, options, request, slot.snapshot));
//   for (;;) {
//     OUTBOXD_ASSIGN_OR_RETURN(pg::Result rows, reader.Next(1000));   // id, aggregate_id,
//     if (rows.rows() == 0) break;                                     // type, payload,
//     ...                                                              // created_at
//   }
//   OUTBOXD_RETURN_IF_ERROR(reader.Close());
#ifndef OUTBOXD_RELAY_BACKFILL_H_
#define OUTBOXD_RELAY_BACKFILL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "outbox/event.h"
#include "outbox/relay_state.h"
#include "pg/connection.h"

namespace outboxd::relay {

struct BackfillSource {
  std::string table;  // [schema.]name
  outbox::ColumnMapping columns;
  std::string published_at_column = "publicado_em";  // ignored if the table has none
  // Order; created_at if absent, transaction order (xmin) without either.
  std::string seq_column = "seq";
};

class BackfillReader {
 public:
  static absl::StatusOr<BackfillReader> Open(const std::string& conninfo,
                                             const BackfillSource& source,
                                             const outbox::BackfillRequest& request,
                                             const std::string& snapshot);
  // The next rows (none at the end), columns in OutboxEvent order, as the relay
  // renders them from the stream (text, ISO dates in UTC).
  absl::StatusOr<pg::Result> Next(int rows);
  absl::Status Close();
  // How many rows the snapshot holds for it, counted at Open (the progress line's total).
  int64_t rows() const { return rows_; }

 private:
  BackfillReader(pg::Connection conn, int64_t rows) : conn_(std::move(conn)), rows_(rows) {}
  pg::Connection conn_;
  int64_t rows_;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_BACKFILL_H_
