// The backfill coordinator: when `outboxd setup` left a BackfillRequest (rows a new
// slot will not stream), makes a fresh slot with an exported snapshot and publishes
// the rows committed before it through the pipeline, as one tracked transaction
// ending at the slot's consistent point; then streaming starts there. One relay
// backfills a slot at a time (an advisory lock); another one stands by meanwhile.
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::Lsn start,
//                            Backfill(options, session, pipeline, slot, request));
#ifndef OUTBOXD_RELAY_BACKFILL_COORDINATOR_H_
#define OUTBOXD_RELAY_BACKFILL_COORDINATOR_H_

#include "absl/status/statusor.h"
#include "outbox/relay_state.h"
#include "pg/lsn.h"
#include "pg/slot.h"
#include "relay/pipeline.h"
#include "relay/relay_options.h"
#include "relay/session.h"

namespace outboxd::relay {

// Publishes the rows `request` covers and waits for every acknowledgement; returns
// the position to stream from. Unavailable with SQLSTATE 55006 while another relay
// backfills the slot.
// With --standby-slot, nothing is published before the named standbys have the rows.
absl::StatusOr<pg::Lsn> Backfill(const RelayOptions& options, Session& session, Pipeline& pipeline,
                                 const pg::SlotInfo& slot, const outbox::BackfillRequest& request,
                                 StopSignal& stop);

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_BACKFILL_COORDINATOR_H_
