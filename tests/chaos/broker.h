// The mock Kafka cluster of a chaos run: bin/outboxd-mock-broker in a process of its
// own (so the relays' kill -9 never touches it), with the chaos topics created at
// start and faults sent as commands to its control FIFO.
//
//   auto broker = MockBroker::Start(dir, kTopics, 4);
//   (*broker)->Command("down all");
#ifndef OUTBOXD_TESTS_CHAOS_BROKER_H_
#define OUTBOXD_TESTS_CHAOS_BROKER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "support/child_process.h"

namespace outboxd::chaos {

class MockBroker {
 public:
  static absl::StatusOr<std::unique_ptr<MockBroker>> Start(const std::string& dir,
                                                           const std::vector<std::string>& topics,
                                                           int partitions);
  ~MockBroker();

  const std::string& bootstraps() const { return bootstraps_; }
  // Sends one control command ("down all", "rtt all 300", "produce-errors 6 3") and
  // waits for the broker's answer; an "error: ..." answer is an error.
  absl::Status Command(const std::string& command);

 private:
  MockBroker(std::unique_ptr<test::ChildProcess> process, std::string fifo, std::string bootstraps);
  // Number of answer lines ("ok" / "error: ...") in the broker's output so far.
  int Answers(std::string* last) const;

  std::unique_ptr<test::ChildProcess> process_;
  std::string fifo_;
  std::string bootstraps_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_BROKER_H_
