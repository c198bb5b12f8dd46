// Reads fenced blocks out of the repository's Markdown (see doc_commands.h).
#include "support/doc_commands.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace outboxd::test {
namespace {

std::string ReadDoc(const std::string& doc) {
  std::ifstream in(std::string(OUTBOXD_SOURCE_DIR) + "/" + doc);
  EXPECT_TRUE(in.good()) << "cannot read " << doc;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One shell line as a user would run it: comment and optional parts dropped,
// placeholders filled in. Empty unless it is an `outboxd` line.
std::vector<std::string> CommandLine(const std::string& line, const std::string& pg,
                                     const std::string& brokers) {
  std::istringstream words(line.substr(0, line.find('#')));
  std::vector<std::string> args;
  bool optional = false;
  for (std::string word; words >> word;) {
    if (word.front() == '[') optional = true;
    if (optional) {
      optional = word.back() != ']';
      continue;
    }
    if (word == "\"$PG\"") word = pg;
    if (!args.empty() && args.back() == "--brokers") word = brokers;
    args.push_back(word);
  }
  if (args.empty() || args.front() != "outboxd") return {};
  args.erase(args.begin());
  return args;
}

}  // namespace

std::vector<std::string> DocBlocks(const std::string& doc, const std::string& lang,
                                   const std::string& marker) {
  const std::string text = ReadDoc(doc);
  const std::string fence = "```" + lang + "\n";
  std::vector<std::string> blocks;
  for (size_t at = text.find(fence + marker); at != std::string::npos;
       at = text.find(fence + marker, at + 1)) {
    const size_t start = at + fence.size();
    blocks.push_back(text.substr(start, text.find("```", start) - start));
  }
  return blocks;
}

std::vector<std::vector<std::string>> DocCommands(const std::string& doc, const std::string& marker,
                                                  const std::string& pg,
                                                  const std::string& brokers) {
  const std::vector<std::string> blocks = DocBlocks(doc, "sh", marker);
  EXPECT_FALSE(blocks.empty()) << doc << " has no ```sh block starting with " << marker;
  std::vector<std::vector<std::string>> commands;
  if (blocks.empty()) return commands;
  std::istringstream block(blocks.front());
  for (std::string line; std::getline(block, line);) {
    std::vector<std::string> args = CommandLine(line, pg, brokers);
    if (!args.empty()) commands.push_back(std::move(args));
  }
  return commands;
}

std::string DebeziumTableDdl() {
  const std::vector<std::string> blocks =
      DocBlocks("docs/usage.md", "sql", "CREATE TABLE dbz_outbox (");
  EXPECT_EQ(blocks.size(), 1u) << "docs/usage.md's Debezium-style outbox table";
  return blocks.empty() ? "" : blocks.front();
}

}  // namespace outboxd::test
