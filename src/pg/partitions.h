// A range-partitioned table as the catalog describes it: whether a table is
// partitioned, its leaf partitions with their bounds, and whether a publication
// publishes its changes as the root's (publish_via_partition_root) or as the leaves'.
// The outbox may be partitioned by its created-at column (docs/operations.md); the
// commands that read or delete its rows go through here.
//
//   OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, outbox));
//   OUTBOXD_ASSIGN_OR_RETURN(std::vector<pg::Partition> leaves, pg::Partitions(conn, outbox));
//   for (const pg::Partition& p : leaves) conn.Exec("DELETE FROM " + p.quoted + " ...");
#ifndef OUTBOXD_PG_PARTITIONS_H_
#define OUTBOXD_PG_PARTITIONS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pg/connection.h"
#include "pg/table_name.h"

namespace outboxd::pg {

// One leaf partition of a partitioned table.
struct Partition {
  TableName name;  // schema-qualified: partitions may live in another schema
  bool is_default = false;
  // The range's bounds as the server renders them (timestamptz text in the
  // session's time zone), nullopt for MINVALUE/MAXVALUE, a DEFAULT partition, or a
  // list or hash partition.
  std::optional<std::string> from;
  std::optional<std::string> to;
};

// True for a partitioned table (relkind 'p'); false for a plain one or none.
absl::StatusOr<bool> IsPartitioned(Connection& conn, const TableName& table);

// The leaf partitions of `table`, by name; just `table` itself when it is not
// partitioned (so a caller deletes leaf by leaf either way).
absl::StatusOr<std::vector<Partition>> Leaves(Connection& conn, const TableName& table);

// Whether `publication` exists with publish_via_partition_root; nullopt when it
// does not exist.
absl::StatusOr<std::optional<bool>> PublishesViaRoot(Connection& conn,
                                                     const std::string& publication);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_PARTITIONS_H_
