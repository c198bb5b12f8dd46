// The Kubernetes fleet recipe ("Kubernetes: one pair per database" in docs/deploy.md), run
// as written: the overlay copied, its outboxd.toml edited as the recipe says (pg,
// brokers, slot), the recipe's `outboxd setup` line run, then the relay started the
// way deploy/kubernetes/base/deployment.yaml starts it (`run` with OUTBOXD_CONFIG
// naming that file). Setup must create the slot the relay streams and no other: an
// unused slot retains WAL, and a relay whose slot setup did not create exits 2.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "support/doc_commands.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTopics = {"pedido.confirmado"};
constexpr char kDoc[] = "docs/deploy.md";
constexpr char kRecipe[] = "cp -r deploy/kubernetes/overlays/orders";

// What a user edits in the copied outboxd.toml ("pg / brokers / slot"): those keys
// set to this database, this broker and the new pair's own slot. The orders overlay's
// SASL settings (`kafka`, `kafka-secret-file`) go too: the test's broker takes none.
void EditToml(const fs::path& toml, const std::string& pg, const std::string& brokers,
              const std::string& slot) {
  std::ifstream in(toml);
  ASSERT_TRUE(in.good()) << toml;
  std::stringstream edited;
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "pg ") || absl::StartsWith(line, "brokers ") ||
        absl::StartsWith(line, "slot ") || absl::StartsWith(line, "kafka")) {
      continue;
    }
    edited << line << "\n";
  }
  edited << "pg = \"" << pg << "\"\nbrokers = \"" << brokers << "\"\nslot = \"" << slot << "\"\n";
  std::ofstream(toml) << edited.str();
}

// A directory removed when the test ends, failed or not.
struct ScratchDir {
  explicit ScratchDir(fs::path p) : path(std::move(p)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  fs::path path;
};

// The replication slots of the test's database.
std::set<std::string> Slots(TestDatabase& db) {
  const std::string names = db.Scalar(
      "SELECT coalesce(string_agg(slot_name, ',' ORDER BY slot_name), '') "
      "FROM pg_replication_slots WHERE database = current_database()");
  std::set<std::string> slots;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    slots.emplace(name);
  }
  return slots;
}

TEST(FleetRecipe, SetupCreatesTheSlotTheOverlaysRelayStreams) {
  RelayHarness h(kTopics);
  // The harness ran setup on a slot of its own; the recipe's setup is the one tested.
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(), "')"));
  ASSERT_EQ(Slots(h.db()), std::set<std::string>{});

  const std::vector<std::string> blocks = DocBlocks(kDoc, "sh", kRecipe);
  ASSERT_EQ(blocks.size(), 1u) << kDoc << "'s fleet recipe";
  const ScratchDir scratch(fs::temp_directory_path() / absl::StrCat("fleet-recipe-", h.slot()));
  const fs::path& work = scratch.path;
  fs::create_directories(work / "deploy");
  fs::copy(fs::path(OUTBOXD_SOURCE_DIR) / "deploy/kubernetes", work / "deploy/kubernetes",
           fs::copy_options::recursive);

  // The recipe's first line, the copy, as written, in a checkout-like directory.
  const std::string copy = blocks.front().substr(0, blocks.front().find('\n'));
  ASSERT_TRUE(absl::StartsWith(copy, kRecipe)) << copy;
  ASSERT_EQ(std::system(absl::StrCat("cd '", work.string(), "' && ", copy).c_str()), 0) << copy;
  const fs::path toml = work / "deploy/kubernetes/overlays/payments/outboxd.toml";
  const std::string slot = absl::StrCat(h.slot(), "_payments");
  EditToml(toml, h.db().conninfo(), h.cluster().bootstraps(), slot);

  // Its `outboxd` lines, files named relative to the checkout.
  const auto commands = DocCommands(kDoc, kRecipe, h.db().conninfo(), h.cluster().bootstraps());
  ASSERT_EQ(commands.size(), 1u) << kDoc << "'s fleet recipe runs one outboxd line, setup";
  std::vector<std::string> setup = commands.front();
  ASSERT_EQ(setup.front(), "setup");
  for (std::string& arg : setup) {
    if (absl::StartsWith(arg, "deploy/")) arg = (work / arg).string();
  }
  std::string out;
  ASSERT_EQ(h.RunOutboxd(setup, &out), 0) << out;
  EXPECT_EQ(Slots(h.db()), std::set<std::string>{slot})
      << "setup must create the overlay's slot, and no unused one that retains WAL\n"
      << out;

  // The pod: `outboxd run`, its settings from the overlay's file.
  h.set_relay(ChildProcess::Start({BinPath("outboxd"), "run", "--metrics", "127.0.0.1:0"},
                                  {absl::StrCat("OUTBOXD_CONFIG=", toml.string())}));
  ASSERT_TRUE(WaitForStreaming(h.relay())) << h.relay().Log();
  EXPECT_TRUE(h.relay().WaitForLog(slot, absl::Seconds(5))) << h.relay().Log();
  h.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) "
      "VALUES ('pedido-1', 'pedido.confirmado', '{\"n\": 1}')");
  EXPECT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
