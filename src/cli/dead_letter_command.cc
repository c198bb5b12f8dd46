// outboxd dead-letter list|replay: what could not be published, and republishing it
// in order once the cause is fixed (a topic created, a payload corrected in the
// table, a size limit raised).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/terminal_escape.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/logging.h"
#include "cli/relay_flags.h"
#include "cli/secrets.h"
#include "cli/sink_flags.h"
#include "ops/dead_letter_replay.h"
#include "outbox/dead_letter.h"
#include "outbox/names.h"
#include "outbox/stored_letter.h"
#include "pg/connection.h"

namespace outboxd::cli {
namespace {

// A field for `list`'s table, as the table holds it, escaped as the logs do; but a
// stand-in (outbox/stored_letter.h) is escaped already: printed as it is while it is
// plain printable ASCII, so that its backslashes are not doubled.
std::string Shown(const std::string& stored) {
  const bool printable =
      std::all_of(stored.begin(), stored.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (printable && absl::StrContains(stored, outbox::kStandInMarker)) return stored;
  return EscapeForTerminal(stored);
}

// One letter as a JSON object on one line, every field a string but seq.
std::string LetterJson(const outbox::DeadLetter& l) {
  std::string out = absl::StrFormat("{\"seq\":%d", l.seq);
  const std::pair<const char*, const std::string*> fields[] = {{"id", &l.id},
                                                               {"aggregate_id", &l.aggregate_id},
                                                               {"type", &l.type},
                                                               {"topic", &l.topic},
                                                               {"created_at", &l.created_at},
                                                               {"lsn", &l.lsn},
                                                               {"dead_at", &l.dead_at},
                                                               {"error", &l.error},
                                                               {"payload", &l.payload},
                                                               {"headers", &l.headers}};
  for (const auto& [key, value] : fields) {
    absl::StrAppend(&out, ",\"", key, "\":");
    AppendJsonForTerminal(out, *value);
  }
  // The relay that filed it; null for a letter from before slots were recorded.
  absl::StrAppend(&out, ",\"slot\":");
  if (l.slot) {
    AppendJsonForTerminal(out, *l.slot);
  } else {
    out += "null";
  }
  out.push_back('}');
  return out;
}

struct DeadLetterCommand {
  PgFlags pg;
  std::string table = "outbox";
  std::string slot = "outboxd";
  std::string aggregate;
  FormatFlags format;
  ops::ReplayOptions replay;
  SinkFlags sink_flags;  // the sink: replay.make_sink
  bool json = false;
  CLI::App* list = nullptr;
  CLI::App* replay_cmd = nullptr;

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("dead-letter",
                                       "List or replay events that could not be "
                                       "published");
    cmd->require_subcommand(1);
    list = cmd->add_subcommand("list",
                               "Show the dead letters in order, one line each: control characters "
                               "and bytes that are not UTF-8 are printed escaped, as in the logs");
    replay_cmd = cmd->add_subcommand("replay",
                                     "Republish dead letters in order, removing each "
                                     "once acknowledged");
    for (CLI::App* sub : {list, replay_cmd}) {
      AddPgFlags(sub, pg);
      Flag(sub, "table", table, "Outbox table (dead letters live in <table>_dead_letter)")
          ->capture_default_str();
      Flag(sub, "slot", slot,
           "The relay's replication slot: only the letters its relay filed (and those from "
           "before slots were recorded, which count for every slot)")
          ->capture_default_str();
      Flag(sub, "aggregate", aggregate, "Only this aggregate's dead letters");
    }
    Switch(list, "json", json,
           "Print each letter as one JSON object on its own line (JSON Lines), its payload "
           "included, instead of the table: seq, id, aggregate_id, type, topic, created_at, lsn, "
           "dead_at, error, payload (bytes that are not UTF-8 as U+FFFD), slot (null for a letter "
           "from before slots were recorded)");
    AddSinkFlags(replay_cmd, sink_flags, "Kafka bootstrap servers (required with --sink kafka)");
    Flag(replay_cmd, "topic", replay.topic_template,
         "Topic template for the replay (default: each letter's original topic)");
    // As the relay that dead-lettered them ran: letters hold the payload, not the value.
    AddFormatFlags(replay_cmd, format);
    return cmd;
  }

  int Run() {
    absl::StatusOr<pg::TableName> outbox_table = outbox::ParseOutboxTable(table);
    if (!outbox_table.ok()) return Fail(outbox_table.status(), Phase::kStarting);
    replay.table_name = outbox_table->name;
    absl::StatusOr<pg::Connection> conn = ConnectPg(pg);
    if (!conn.ok()) return Fail(conn.status(), Phase::kStarting);
    outbox::DeadLetterStore store(table, slot);
    if (!aggregate.empty()) replay.aggregate = aggregate;
    const int code = list->parsed() ? List(*conn, store) : Replay(*conn, store);
    NameOtherSlots(*conn, store);
    return code;
  }

  // A person who forgot --slot sees no letters, or not all: name the slots that have
  // some. A hint only: a failure to read them changes nothing.
  void NameOtherSlots(pg::Connection& conn, const outbox::DeadLetterStore& store) {
    absl::StatusOr<std::map<std::string, int64_t>> others = store.OtherSlots(conn);
    if (!others.ok() || others->empty()) return;
    std::string named;
    for (const auto& [other, count] : *others) {
      absl::StrAppend(&named, named.empty() ? "" : ", ", count, " of slot ", EscapeForLog(other));
    }
    spdlog::info(
        "left alone: dead letters other relays filed ({}); pass --slot with a relay's "
        "slot for its letters",
        named);
  }

  int List(pg::Connection& conn, const outbox::DeadLetterStore& store) {
    absl::StatusOr<std::vector<outbox::DeadLetter>> letters = store.List(conn, replay.aggregate);
    if (!letters.ok()) return Fail(letters.status(), Phase::kStarting);
    if (json) {
      for (const outbox::DeadLetter& l : *letters) std::printf("%s\n", LetterJson(l).c_str());
      return kExitOk;
    }
    std::printf("%-6s %-20s %-16s %-20s %-36s %s\n", "seq", "dead_at", "aggregate", "type", "id",
                "error");
    for (const outbox::DeadLetter& original : *letters) {
      // As the table holds it: a value text cannot hold, or a key of kilobytes, shows
      // as its stand-in (outbox/stored_letter.h), as a WHERE clause must name it; any
      // other value escaped, since any writer of the outbox chose it. One line of
      // plain text either way.
      const outbox::DeadLetter l = outbox::ToStored(original).text;
      std::printf("%-6lld %-20s %-16s %-20s %-36s %s\n", static_cast<long long>(l.seq),
                  Shown(l.dead_at).c_str(), Shown(l.aggregate_id).c_str(), Shown(l.type).c_str(),
                  Shown(l.id).c_str(), Shown(l.error).c_str());
    }
    std::printf("%zu dead letter(s)\n", letters->size());
    return kExitOk;
  }

  int Replay(pg::Connection& conn, const outbox::DeadLetterStore& store) {
    // CloudEvents as the relay made them: its default source, the sink's prefix.
    replay.format.ce_source = pg::DefaultCloudEventSource(pg.conninfo, table);
    for (absl::Status s : {ResolveSinkFlags(sink_flags), ResolveFormat(format, replay.format)}) {
      if (!s.ok()) return Fail(s, Phase::kStarting);
    }
    replay.format.ce_prefix = CloudEventsPrefix(sink_flags);
    // A letter whose delivery fails stays in the table: a finite timeout loses nothing.
    absl::StatusOr<sink::SinkFactory> make_sink =
        MakeSinkFactory(sink_flags, kafka::MessageTimeout::kMayBeFinite);
    if (!make_sink.ok()) return Fail(make_sink.status(), Phase::kStarting);
    replay.make_sink = *std::move(make_sink);
    absl::StatusOr<ops::ReplayReport> report = ops::ReplayDeadLetters(conn, store, replay);
    if (!report.ok()) return Fail(report.status(), Phase::kRunning);
    for (const auto& [topic, count] : report->replayed_to)
      spdlog::info("replayed {} dead letter(s) to {}", count, LogSafe(topic));
    for (const std::string& failure : report->failures)
      spdlog::error("not replayed: {}", LogSafe(failure));
    spdlog::info("replayed {} dead letter(s); {} aggregate(s) still blocked", report->replayed,
                 report->failures.size());
    return report->failures.empty() ? kExitOk : kExitFailure;
  }
};

}  // namespace

Command RegisterDeadLetter(CLI::App& app) { return RegisterCommand<DeadLetterCommand>(app); }

}  // namespace outboxd::cli
