#include "pg/partitions.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::pg {
namespace {

std::optional<std::string> Bound(const Result& r, int row, int col) {
  if (r.IsNull(row, col)) return std::nullopt;
  return std::string(r.Get(row, col));
}

}  // namespace

absl::StatusOr<bool> IsPartitioned(Connection& conn, const TableName& table) {
  OUTBOXD_ASSIGN_OR_RETURN(
      Result r, conn.ExecParams("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)",
                                {table.quoted}));
  return r.rows() > 0 && r.Get(0, 0) == "t";
}

absl::StatusOr<std::vector<Partition>> Leaves(Connection& conn, const TableName& table) {
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, IsPartitioned(conn, table));
  if (!partitioned) return std::vector<Partition>{Partition{table}};
  // The bounds from pg_get_expr's text ("FOR VALUES FROM ('a') TO ('b')"): the
  // catalog keeps them only as a node tree. A bound that is not a quoted literal
  // (MINVALUE, MAXVALUE) stays NULL.
  OUTBOXD_ASSIGN_OR_RETURN(
      Result r, conn.ExecParams(
                    "SELECT n.nspname, c.relname, pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', "
                    "substring(pg_get_expr(c.relpartbound, c.oid) from $$FROM \\('([^']*)'\\)$$), "
                    "substring(pg_get_expr(c.relpartbound, c.oid) from $$TO \\('([^']*)'\\)$$) "
                    "FROM pg_partition_tree(to_regclass($1)) t JOIN pg_class c ON c.oid = t.relid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.isleaf ORDER BY 2",
                    {table.quoted}));
  std::vector<Partition> leaves;
  for (int i = 0; i < r.rows(); ++i) {
    Partition p;
    OUTBOXD_ASSIGN_OR_RETURN(
        p.name, TableName::Parse(absl::StrCat(SqlIdentifier(std::string(r.Get(i, 0))), ".",
                                              SqlIdentifier(std::string(r.Get(i, 1))))));
    p.is_default = r.Get(i, 2) == "t";
    p.from = Bound(r, i, 3);
    p.to = Bound(r, i, 4);
    leaves.push_back(std::move(p));
  }
  return leaves;
}

absl::StatusOr<std::optional<bool>> PublishesViaRoot(Connection& conn,
                                                     const std::string& publication) {
  OUTBOXD_ASSIGN_OR_RETURN(
      Result r,
      conn.ExecParams("SELECT pubviaroot FROM pg_publication WHERE pubname = $1", {publication}));
  if (r.rows() == 0) return std::nullopt;
  return r.Get(0, 0) == "t";
}

}  // namespace outboxd::pg
