// The procedures of the repository's docs, read by tests and run as written, so that
// README.md and docs/*.md cannot drift from the binary: a fenced ```sql block is
// executed as it stands, a ```sh block's `outboxd` lines become argument lists.
//
//   for (const std::string& sql : DocBlocks("docs/usage.md", "sql", "CREATE TABLE outbox ("))
//     db.Exec(sql);
//   auto commands = DocCommands("docs/usage.md", "outboxd setup --pg \"$PG\" --poll-only",
//                               db.conninfo(), cluster.bootstraps());
//   // {{"setup", "--pg", "<conninfo>", "--poll-only"}, {"poll", "--pg", ...}}
#ifndef OUTBOXD_TESTS_SUPPORT_DOC_COMMANDS_H_
#define OUTBOXD_TESTS_SUPPORT_DOC_COMMANDS_H_

#include <string>
#include <vector>

namespace outboxd::test {

// The bodies of the ```<lang> blocks of `doc` (a path relative to the repository)
// whose first line starts with `marker`, in document order.
std::vector<std::string> DocBlocks(const std::string& doc, const std::string& lang,
                                   const std::string& marker);

// The `outboxd` lines of the first ```sh block of `doc` whose first line starts with
// `marker`, as argument lists without the leading "outboxd". What a user would fill in
// or leave out is done here: `# comments` and `[optional ...]` parts are dropped,
// "$PG" becomes `pg`, and the word after --brokers (`...`, `kafka:9092`) `brokers`.
// A missing block is a test failure and an empty list.
std::vector<std::vector<std::string>> DocCommands(const std::string& doc, const std::string& marker,
                                                  const std::string& pg,
                                                  const std::string& brokers);

// Debezium's outbox table (its outbox event router's documented layout: no timestamp,
// no polling columns), as docs/usage.md's "A Debezium-style outbox table" gives it.
std::string DebeziumTableDdl();

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_DOC_COMMANDS_H_
