// Row -> OutboxEvent with the configured column names.
#include "outbox/event.h"

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace outboxd::outbox {
namespace {

// The contract's own headers, in any case: neither a --header nor a row's headers
// column may take their names (nats/sink.cc sets Nats-Msg-Id).
constexpr std::array<std::string_view, 8> kOwnHeaders = {
    "id", "type", "aggregate_id", "created_at", "lsn", "content-type", kSlotHeader, "nats-msg-id"};

int FindColumn(const pgoutput::Relation& relation, const std::string& name) {
  for (size_t i = 0; i < relation.columns.size(); ++i) {
    if (relation.columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

std::span<const std::string_view> OwnHeaderNames() { return kOwnHeaders; }

std::string OwnHeaderRegex() {
  std::string names;
  for (std::string_view own : kOwnHeaders) {
    absl::StrAppend(&names, names.empty() ? "" : "|", absl::string_view(own.data(), own.size()));
  }
  return absl::StrCat("^(", names, ")$");
}

bool IsOwnHeader(std::string_view name) {
  for (std::string_view own : kOwnHeaders) {
    if (SameHeaderName(name, own)) return true;
  }
  return false;
}

absl::Status EventMapper::SetRelation(const pgoutput::Relation& relation) {
  ready_ = false;
  struct Wanted {
    const std::string& name;
    const char* flag;
    int* index;
  };
  const Wanted wanted[] = {
      {mapping_.id, "--id-column", &id_},
      {mapping_.aggregate_id, "--aggregate-column", &aggregate_id_},
      {mapping_.type, "--type-column", &type_},
      {mapping_.payload, "--payload-column", &payload_},
      {mapping_.created_at, "--created-at-column", &created_at_},
      {mapping_.headers, "--headers-column", &headers_},
  };
  for (const Wanted& w : wanted) {
    if ((w.index == &created_at_ || w.index == &headers_) && w.name.empty()) {  // none
      *w.index = -1;
      continue;
    }
    *w.index = FindColumn(relation, w.name);
    if (*w.index < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("table ", relation.nspname, ".", relation.relname, " has no column \"",
                       w.name, "\"; add it or name the right column with ", w.flag));
    }
  }
  column_count_ = relation.columns.size();
  ready_ = true;
  return absl::OkStatus();
}

absl::StatusOr<OutboxEvent> EventMapper::Map(const pgoutput::Tuple& tuple) const {
  if (!ready_) return absl::FailedPreconditionError("insert before the outbox Relation message");
  if (tuple.size() != column_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("row has ", tuple.size(), " columns, the relation ", column_count_));
  }
  OutboxEvent event;
  struct Field {
    int index;
    const std::string& name;
    std::string_view* out;
  };
  const Field fields[] = {
      {id_, mapping_.id, &event.id},
      {aggregate_id_, mapping_.aggregate_id, &event.aggregate_id},
      {type_, mapping_.type, &event.type},
      {payload_, mapping_.payload, &event.payload},
      {created_at_, mapping_.created_at, &event.created_at},
  };
  for (const Field& f : fields) {
    if (f.index < 0) continue;  // no created-at column
    const pgoutput::TupleValue& value = tuple[f.index];
    if (value.kind != pgoutput::ValueKind::kText) {
      return absl::InvalidArgumentError(
          absl::StrCat("column ", f.name, " is ",
                       value.kind == pgoutput::ValueKind::kNull ? "NULL" : "not in text form"));
    }
    *f.out = value.data;
  }
  if (headers_ >= 0) {  // NULL: no headers of the row's own
    const pgoutput::TupleValue& value = tuple[headers_];
    if (value.kind == pgoutput::ValueKind::kText) {
      event.headers = value.data;
    } else if (value.kind != pgoutput::ValueKind::kNull) {
      return absl::InvalidArgumentError(
          absl::StrCat("column ", mapping_.headers, " is not in text form"));
    }
  }
  return event;
}

OutboxEvent EventMapper::MapPresent(const pgoutput::Tuple& tuple) const {
  OutboxEvent event;
  const std::pair<int, std::string_view*> fields[] = {
      {id_, &event.id},           {aggregate_id_, &event.aggregate_id}, {type_, &event.type},
      {payload_, &event.payload}, {created_at_, &event.created_at},     {headers_, &event.headers}};
  for (const auto& [index, out] : fields) {
    if (index < 0 || static_cast<size_t>(index) >= tuple.size()) continue;
    if (tuple[index].kind == pgoutput::ValueKind::kText) *out = tuple[index].data;
  }
  return event;
}

std::string MissingCreatedAtNote(std::string_view table, std::string_view column) {
  return absl::StrCat("table ", absl::string_view(table.data(), table.size()), " has no column \"",
                      absl::string_view(column.data(), column.size()),
                      "\" (--created-at-column): outboxd run sends the transaction's commit "
                      "time as the created_at header, and status and cleanup cannot tell its "
                      "rows' age (status shows it unknown, cleanup keeps the rows)");
}

std::string_view IsoTimestamp(std::string_view ts, std::string& buffer) {
  buffer.assign(ts);
  if (buffer.size() > 10 && buffer[10] == ' ') buffer[10] = 'T';
  // The offset PostgreSQL prints is "+HH", "+HH:MM" or "+HH:MM:SS"; ISO wants "+HH:MM".
  size_t sign = buffer.find_last_of("+-");
  if (sign != std::string::npos && sign > 10 && buffer.size() - sign == 3) buffer.append(":00");
  return buffer;
}

}  // namespace outboxd::outbox
