// Issue 13, hostile input through the real binary: a row value cannot forge a log
// line (point 6), a misspelt or refused --kafka property never echoes its value
// (point 8), and --kafka overrides that void the delivery promise are refused unless
// --allow-unsafe-kafka says otherwise, which then warns and shows in /metrics
// (point 9). Issue 27 point 9: `dead-letter list` prints a letter's fields escaped,
// and --json gives its payload back exactly.
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "outbox/dead_letter.h"
#include "simdjson.h"
#include "support/child_process.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// Nothing listens there: commands that check their flags first never get that far.
constexpr char kNoServer[] = "host=127.0.0.1 port=1 dbname=none connect_timeout=2";

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome Outboxd(std::vector<std::string> args) {
  args.insert(args.begin(), BinPath("outboxd"));
  std::unique_ptr<ChildProcess> child = ChildProcess::Start(args);
  Outcome outcome;
  outcome.exit_code = child->Wait(absl::Seconds(30)).value_or(-1);
  outcome.output = child->Log();
  return outcome;
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Lines of `log` that begin with `prefix` (a forged line would).
std::vector<std::string> LinesStartingWith(const std::string& log, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    if (absl::StartsWith(line, prefix)) out.push_back(line);
  }
  return out;
}

void InsertEvent(RelayHarness& h, const std::string& aggregate, const std::string& payload) {
  pg::Connection conn = h.db().Connect();
  absl::StatusOr<pg::Result> r =
      conn.ExecParams("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, $2, $3)",
                      {aggregate, "pedido.confirmado", payload});
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST(HostileInput, ANewlineInAnAggregateIdCannotForgeALogLine) {
  RelayHarness h(kTopics, 1);
  h.StartRelay();
  InsertEvent(h, "a\nFORGED line", "42");             // a JSON scalar: a poison event
  InsertEvent(h, "a\r\nFORGED crlf", R"({"n": 1})");  // follows no poison: published
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_dead_lettered_total", 1, absl::Seconds(30)))
      << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter WHERE aggregate_id = "
                          "E'a\\nFORGED line'"),
            "1");
  EXPECT_EQ(h.StopRelay(), 0);
  const std::string log = h.relay().Log();
  EXPECT_THAT(log, HasSubstr("of aggregate a\\nFORGED line dead-lettered"));
  EXPECT_THAT(LinesStartingWith(log, "FORGED"), ::testing::IsEmpty()) << log;
}

TEST(HostileInput, AMisspeltOrRefusedKafkaPropertyNeverEchoesItsValue) {
  const std::vector<std::vector<std::string>> cases = {
      {"--kafka", "sasl.pasword=Typo-Secret-77"},        // unknown name: a typo of a secret
      {"--kafka", "sasl.jaas.config=Jaas-Secret-66"},    // a Java client's secret property
      {"--kafka", "security.protocol=Proto-Secret-55"},  // a value librdkafka refuses
  };
  for (const std::vector<std::string>& kafka : cases) {
    const std::string value = kafka[1].substr(kafka[1].find('=') + 1);
    const std::string name = kafka[1].substr(0, kafka[1].find('='));
    for (const char* command : {"run", "poll"}) {
      std::vector<std::string> args = {command, "--pg", kNoServer, "--brokers", "127.0.0.1:9"};
      args.insert(args.end(), kafka.begin(), kafka.end());
      const Outcome outcome = Outboxd(args);
      EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
      EXPECT_THAT(outcome.output, HasSubstr("Kafka property " + name + "=[redacted]"));
      EXPECT_THAT(outcome.output, Not(HasSubstr(value))) << command;
      EXPECT_EQ(Lines(outcome.output), 1) << outcome.output;
    }
  }
}

TEST(HostileInput, KafkaOverridesThatCanLoseOrReorderEventsAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--kafka", "enable.idempotence=false"}, "enable.idempotence=false"},
      {{"--kafka", "acks=1"}, "acks=1"},
      {{"--kafka", "acks=0"}, "acks=0"},
      {{"--kafka", "message.timeout.ms=30000"}, "message.timeout.ms=30000"},
      {{"--kafka", "partitioner=random"}, "partitioner=random"},
  };
  for (const auto& [kafka, named] : cases) {
    std::vector<std::string> args = {"run", "--pg", kNoServer, "--brokers", "127.0.0.1:9"};
    args.insert(args.end(), kafka.begin(), kafka.end());
    const Outcome outcome = Outboxd(args);
    EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
    EXPECT_THAT(outcome.output, HasSubstr("error --kafka " + named + " ("));
    EXPECT_THAT(outcome.output, HasSubstr("pass --allow-unsafe-kafka"));
    EXPECT_EQ(Lines(outcome.output), 1) << outcome.output;
  }
  // poll: the same, except a message timeout (a failed attempt leaves the row pending).
  Outcome poll =
      Outboxd({"poll", "--pg", kNoServer, "--brokers", "127.0.0.1:9", "--kafka", "acks=0"});
  EXPECT_EQ(poll.exit_code, 2);
  EXPECT_THAT(poll.output, HasSubstr("--kafka acks=0 ("));
  EXPECT_THAT(poll.output, HasSubstr("--allow-unsafe-kafka"));
  poll = Outboxd({"poll", "--pg", kNoServer, "--brokers", "127.0.0.1:9", "--kafka",
                  "message.timeout.ms=30000"});
  EXPECT_THAT(poll.output, Not(HasSubstr("--allow-unsafe-kafka"))) << poll.output;
}

TEST(HostileInput, AllowUnsafeKafkaRunsWithAWarningAndAGauge) {
  RelayHarness h(kTopics, 1);
  const std::vector<std::string> unsafe = {"--kafka", "enable.idempotence=false", "--kafka",
                                           "acks=1"};

  // Refused by every command that produces, the dead-letter replay included.
  std::string output;
  std::vector<std::string> replay = {"dead-letter",     "replay",    "--pg",
                                     h.db().conninfo(), "--brokers", h.cluster().bootstraps()};
  replay.insert(replay.end(), unsafe.begin(), unsafe.end());
  EXPECT_EQ(h.RunOutboxd(replay, &output), 2) << output;
  EXPECT_THAT(output, HasSubstr("--allow-unsafe-kafka"));
  replay.push_back("--allow-unsafe-kafka");
  EXPECT_EQ(h.RunOutboxd(replay, &output), 0) << output;
  EXPECT_THAT(output, HasSubstr("warning --allow-unsafe-kafka: running with --kafka "
                                "enable.idempotence=false"));

  std::vector<std::string> args = unsafe;
  args.push_back("--allow-unsafe-kafka");
  h.StartRelay(args);
  EXPECT_THAT(h.relay().Log(), HasSubstr("warning --allow-unsafe-kafka: running with --kafka "
                                         "enable.idempotence=false ("));
  EXPECT_THAT(h.relay().Log(), HasSubstr("acks=1 ("));
  InsertEvent(h, "pedido-1", R"({"n": 1})");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(MetricValue(h.Metrics(h.relay()), "outboxd_unsafe_kafka_config"), 1);
  EXPECT_EQ(h.StopRelay(), 0);

  // Without the override the gauge says so too.
  h.StartRelay();
  EXPECT_EQ(MetricValue(h.Metrics(h.relay()), "outboxd_unsafe_kafka_config"), 0);
  EXPECT_THAT(h.relay().Log(), Not(HasSubstr("allow-unsafe-kafka")));
  EXPECT_EQ(h.StopRelay(), 0);
}

// A database whose text holds any bytes (SQL_ASCII), dropped with the test's.
class AnyBytesDatabase {
 public:
  explicit AnyBytesDatabase(TestDatabase& db) : db_(db), name_(db.name() + "_bytes") {
    db_.Exec("CREATE DATABASE " + name_ +
             " TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'");
  }
  ~AnyBytesDatabase() { db_.Exec("DROP DATABASE " + name_ + " WITH (FORCE)"); }
  std::string conninfo() const { return db_.ConninfoWith("dbname=" + name_); }

 private:
  TestDatabase& db_;
  std::string name_;
};

// No byte a terminal acts on: controls other than the line ends, DEL, C1 controls
// (0xc2 0x80..0x9f), bytes of no UTF-8 sequence (0xff here).
bool PlainText(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f || c == 0xff || c == 0xfe) return false;
    if (c == 0xc2 && i + 1 < text.size() &&
        (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80)
      return false;
  }
  return true;
}

// Issue 27 point 9: the fields of a dead letter are whatever a writer of the outbox
// put in a row. Before, `list` printed them raw: an OSC set the terminal's title, ESC
// [2J cleared the screen, a newline printed a fake letter.
TEST(HostileInput, DeadLetterListPrintsEachLetterEscapedOnOneLineAndJsonGivesThePayloadBack) {
  auto db = TestDatabase::Create();
  AnyBytesDatabase bytes(*db);
  absl::StatusOr<pg::Connection> opened = pg::Connection::Open(bytes.conninfo());
  ASSERT_TRUE(opened.ok()) << opened.status();
  pg::Connection& conn = *opened;
  const outbox::DeadLetterStore store("outbox");
  ASSERT_TRUE(conn.Exec(store.CreateSql(conn)).ok());
  const outbox::DeadLetter letter{
      .id = "7d0f7a8e-1111-4c1e-9e10-3f1d2a7c9e10",
      .aggregate_id = "agg\x1b]0;pwned\x07\n99     2026-12-04T00:00:00Z FORGED\xff",
      .type =
          "t\x1b[2J\x1b[H\xc2\x9b"
          "31m",
      .payload = "{\"nota\": \"a\\nb\"}\n\x1b[31m\xc2\x9b \xc3\xa3 \\ \"",
      .created_at = "2026-12-04T00:00:00+00:00",
      .lsn = "0/16B3748",
      .topic = "pedido.confirmado",
      .error = "refused\r\n\xfe fake line",
  };
  ASSERT_TRUE(store.Insert(conn, letter).ok());

  Outcome list = Outboxd({"dead-letter", "list", "--pg", bytes.conninfo()});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_TRUE(PlainText(list.output)) << list.output;
  EXPECT_THAT(LinesStartingWith(list.output, "99 "), ::testing::IsEmpty()) << list.output;
  const std::vector<std::string> line =
      LinesStartingWith(list.output, absl::StrCat("1", std::string(6, ' '), "20"));
  ASSERT_EQ(line.size(), 1u) << list.output;
  // A value the table cannot hold as text shows as its stored stand-in (escaped, with
  // its hash: outbox/stored_letter.h), one that it can escaped as the logs do.
  for (const char* escaped :
       {"agg\\x1b]0;pwned\\x07\\x0a99     2026-12-04T00:00:00Z FORGED\\xff~sha256:",
        "t\\x1b[2J\\x1b[H\\u009b31m", "refused\\x0d\\x0a\\xfe fake line~sha256:"}) {
    EXPECT_THAT(line[0], HasSubstr(escaped)) << list.output;
  }
  EXPECT_THAT(list.output, HasSubstr("\n1 dead letter(s)\n"));

  Outcome json = Outboxd({"dead-letter", "list", "--json", "--pg", bytes.conninfo()});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_TRUE(PlainText(json.output)) << json.output;
  ASSERT_EQ(Lines(json.output), 1) << json.output;  // JSON Lines: one letter, one line
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json.output).get(doc), simdjson::SUCCESS) << json.output;
  const auto field = [&doc](const char* key) {
    std::string_view value;
    EXPECT_EQ(doc[key].get(value), simdjson::SUCCESS) << key;
    return std::string(value);
  };
  EXPECT_EQ(field("payload"), letter.payload);  // exact: what a person needs to fix it
  EXPECT_EQ(field("type"), letter.type);
  EXPECT_EQ(field("topic"), letter.topic);
  EXPECT_EQ(field("lsn"), letter.lsn);
  EXPECT_EQ(field("id"), letter.id);
  // Bytes that are not UTF-8 cannot be JSON text: U+FFFD in their place.
  EXPECT_EQ(field("aggregate_id"),
            "agg\x1b]0;pwned\x07\n99     2026-12-04T00:00:00Z FORGED\xef\xbf\xbd");
  // The error is the relay's text, kept as the table holds it: its stand-in here.
  EXPECT_THAT(field("error"), ::testing::StartsWith("refused\\x0d\\x0a\\xfe fake line~sha256:"));
  int64_t seq = 0;
  EXPECT_EQ(doc["seq"].get(seq), simdjson::SUCCESS);
  EXPECT_EQ(seq, 1);
}

}  // namespace
}  // namespace outboxd::test
