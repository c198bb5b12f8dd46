// Replays the committed fuzz corpus through the fuzz target in the ordinary (g++)
// build, so every seed and every crash reproducer saved there stays a regression test
// without clang or libFuzzer. scripts/fuzz does the actual fuzzing.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(PgoutputFuzz, ReplaysTheCommittedCorpus) {
  const std::filesystem::path dir =
      std::filesystem::path(OUTBOXD_SOURCE_DIR) / "tests/fuzz/corpus/pgoutput";
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    SCOPED_TRACE(entry.path().string());
    std::ifstream file(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0);
    ++inputs;
  }
  EXPECT_GE(inputs, 49);  // the messages of tests/pgoutput/captured_messages.h
}

}  // namespace
