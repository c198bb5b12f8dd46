// Replays a committed fuzz corpus through its fuzz target in the ordinary (g++) build,
// so every seed and every crash reproducer saved there stays a regression test without
// clang or libFuzzer. scripts/fuzz does the actual fuzzing. One executable per target
// (each defines LLVMFuzzerTestOneInput), told its corpus by tests/fuzz/CMakeLists.txt:
// OUTBOXD_FUZZ_CORPUS (the folder under tests/fuzz/corpus/) and OUTBOXD_FUZZ_MIN_INPUTS.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(FuzzCorpus, ReplaysTheCommittedCorpus) {
  const std::filesystem::path dir =
      std::filesystem::path(OUTBOXD_SOURCE_DIR) / "tests/fuzz/corpus" / OUTBOXD_FUZZ_CORPUS;
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
  // The committed seeds at least (for pgoutput: tests/pgoutput/captured_messages.h).
  EXPECT_GE(inputs, OUTBOXD_FUZZ_MIN_INPUTS);
}

}  // namespace
