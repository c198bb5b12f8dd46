// Issue 20: docs/schema.md gives the DDL of every table outboxd uses. Its ```sql
// blocks are run as written in one database, `outboxd setup` runs in another, and the
// two catalogs must describe the same columns, defaults, identities, indexes,
// constraints and publication: the page cannot drift from the code that creates them.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/doc_commands.h"
#include "support/pg_fixture.h"

namespace outboxd::test {
namespace {

// One sorted line per column, index, constraint and published table in schema public.
constexpr char kCatalog[] = R"sql(
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
  SELECT format('column %s.%s %s%s%s%s', c.relname, a.attname,
                format_type(a.atttypid, a.atttypmod),
                CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), ''),
                CASE a.attidentity WHEN 'a' THEN ' IDENTITY ALWAYS'
                                   WHEN 'd' THEN ' IDENTITY BY DEFAULT' ELSE '' END)
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
     AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
  UNION ALL
  SELECT format('constraint %s %s', conrelid::regclass, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('publication %s %s insert=%s update=%s delete=%s truncate=%s', p.pubname,
                t.tablename, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate)
    FROM pg_publication p JOIN pg_publication_tables t USING (pubname)
) lines(line)
)sql";

TEST(SchemaDoc, TheDocumentedDdlCreatesExactlyWhatSetupCreates) {
  auto by_setup = TestDatabase::Create();
  auto child = ChildProcess::Start(
      {BinPath("outboxd"), "setup", "--pg", by_setup->conninfo(), "--slot", by_setup->name()});
  ASSERT_EQ(child->Wait(absl::Seconds(60)), 0) << child->Log();

  auto by_doc = TestDatabase::Create();
  const std::vector<std::string> blocks = DocBlocks("docs/schema.md", "sql", "-- schema");
  ASSERT_EQ(blocks.size(), 6u) << "outbox, dead letter, relay state, inbox, publication, emit key";
  pg::Connection conn = by_doc->Connect();
  for (const std::string& sql : blocks) {
    auto r = conn.Exec(sql);
    ASSERT_TRUE(r.ok()) << sql << "\n" << r.status();
  }

  const std::string expected = by_setup->Scalar(kCatalog);
  EXPECT_NE(expected.find("column outbox_dead_letter.payload text NOT NULL"), std::string::npos)
      << expected;
  EXPECT_EQ(by_doc->Scalar(kCatalog), expected);

  // And setup finds them all: it creates only the slot.
  child = ChildProcess::Start(
      {BinPath("outboxd"), "setup", "--pg", by_doc->conninfo(), "--slot", by_doc->name()});
  ASSERT_EQ(child->Wait(absl::Seconds(60)), 0) << child->Log();
  EXPECT_EQ(by_doc->Scalar(kCatalog), expected);
}

}  // namespace
}  // namespace outboxd::test
