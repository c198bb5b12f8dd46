// Backfill before streaming: lock, fresh slot and snapshot, rows through the pipeline.
#include "relay/backfill_coordinator.h"

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/status_macros.h"
#include "pg/connection.h"
#include "relay/backfill.h"

namespace outboxd::relay {

absl::StatusOr<pg::Lsn> Backfill(const RelayOptions& options, Session& session, Pipeline& pipeline,
                                 const pg::SlotInfo& slot, const outbox::BackfillRequest& request,
                                 StopSignal& stop) {
  pg::Connection& control = session.control();
  // One relay backfills; another one started meanwhile stands by.
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result locked,
                           control.ExecParams("SELECT pg_try_advisory_lock(hashtext($1))",
                                              {"outboxd backfill " + options.slot}));
  if (locked.Get(0, 0) != "t") {
    return pg::WithSqlState(
        absl::UnavailableError(absl::StrCat("another relay is backfilling slot ", options.slot)),
        "55006");
  }
  // A slot left by an interrupted backfill never streamed and confirmed nothing:
  // start again with a fresh one (and a fresh snapshot).
  if (slot.exists) OUTBOXD_RETURN_IF_ERROR(pg::DropSlot(control, options.slot));
  OUTBOXD_ASSIGN_OR_RETURN(pg::CreatedSlot created,
                           pg::CreateSlotWithSnapshot(session.replication(), options.slot));
  OUTBOXD_ASSIGN_OR_RETURN(
      BackfillReader reader,
      BackfillReader::Open(options.conninfo, {.table = options.table, .columns = options.columns},
                           request, created.snapshot));
  spdlog::info("created slot {} at {}; publishing the outbox rows committed before it first",
               options.slot, pg::FormatLsn(created.consistent_point));
  if (options.source != Source::kTable) {
    // The WAL-only outbox's trade-off (docs/usage.md, "A WAL-only outbox"): said where it bites.
    spdlog::warn(
        "events emitted with outboxd_emit before {} and not yet acknowledged are not "
        "republished: no table holds them (--source {})",
        pg::FormatLsn(created.consistent_point),
        options.source == Source::kMessages ? "messages" : "both");
  }
  // All backfilled rows form one tracked "transaction" ending at the consistent
  // point: the watermark cannot pass it before every one is acknowledged.
  OUTBOXD_RETURN_IF_ERROR(session.AwaitStandbys(created.consistent_point, stop));
  pipeline.BeginBackfill(created.consistent_point);
  Progress progress({.what = absl::StrCat("backfill of slot ", options.slot),
                     .unit = Progress::Unit::kEvents,
                     .total = reader.rows()});
  int64_t published = 0;
  while (true) {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Result rows, reader.Next(1000));
    if (rows.rows() == 0) break;
    for (int i = 0; i < rows.rows(); ++i) {
      OUTBOXD_RETURN_IF_ERROR(pipeline.PublishBackfilled({.id = rows.Get(i, 0),
                                                          .aggregate_id = rows.Get(i, 1),
                                                          .type = rows.Get(i, 2),
                                                          .payload = rows.Get(i, 3),
                                                          .created_at = rows.Get(i, 4)}));
    }
    published += rows.rows();
    progress.Update(published);
  }
  progress.Finish();
  OUTBOXD_RETURN_IF_ERROR(reader.Close());
  OUTBOXD_RETURN_IF_ERROR(pipeline.EndBackfill(created.consistent_point));
  OUTBOXD_RETURN_IF_ERROR(session.state().FinishBackfill(control, options.slot));
  spdlog::info("backfill done: {} events acknowledged; streaming from {}", published,
               pg::FormatLsn(created.consistent_point));
  return created.consistent_point;
}

}  // namespace outboxd::relay
