// RabbitMQ for tests, on the node named by OUTBOXD_TEST_AMQP (scripts/test starts it
// with scripts/rabbitmq) or on a node of the test's own for faults that touch the
// whole node (a memory alarm, a kill -9). Tests run as parallel processes on one node,
// so each uses names of its own (Name()), and a vhost of its own when it closes
// connections. The independent client is pika (tests/support/amqp_peer.py).
//
//   auto broker = test::TestBroker::Create(test::VhostKind::kOwn);
//   broker->BindQueue(broker->Name("orders"), broker->Name("orders_q"), "order.#");
//   ... publish to broker->url() ...
//   std::vector<test::AmqpMessage> got = broker->Drain(broker->Name("orders_q"));
//   broker->Ctl({"close_all_connections", "-p", broker->vhost(), "test"});
#ifndef OUTBOXD_TESTS_SUPPORT_AMQP_FIXTURE_H_
#define OUTBOXD_TESTS_SUPPORT_AMQP_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace outboxd::test {

// One message as pika read it back.
struct AmqpMessage {
  std::string routing_key;
  std::string message_id;
  std::string type;
  std::string content_type;
  std::string timestamp;      // seconds since the epoch, "" when unset
  std::string delivery_mode;  // "2" for persistent
  std::string headers;        // "name=value;name=value", sorted by name
  std::string body;
};

// Runs a command line through the shell; returns its exit code and sets `output`
// (stdout and stderr).
int RunCommand(const std::string& command, std::string* output);

class AmqpNode {
 public:
  // The node of OUTBOXD_TEST_AMQP / OUTBOXD_TEST_AMQP_CTL. Without them the test fails
  // and the process aborts: integration tests never skip.
  static const AmqpNode& Shared();
  // A node of its own (scripts/rabbitmq start in a temporary directory, 5-15 s),
  // stopped by the destructor. Aborts when it cannot start.
  static std::unique_ptr<AmqpNode> StartPrivate();
  ~AmqpNode();
  AmqpNode(const AmqpNode&) = delete;
  AmqpNode& operator=(const AmqpNode&) = delete;

  const std::string& url() const { return url_; }  // amqp://guest:guest@127.0.0.1:PORT/%2f
  // The same node over TLS (amqps://), and the CA file that signed its certificate.
  const std::string& tls_url() const { return tls_url_; }
  const std::string& ca_file() const { return ca_file_; }
  // A private node's directory, for scripts/rabbitmq kill|restart; "" for the shared one.
  const std::string& dir() const { return private_dir_; }
  // rabbitmqctl against this node; a non-zero exit fails the test. Returns the output.
  std::string Ctl(const std::vector<std::string>& args) const;

 private:
  AmqpNode() = default;
  std::string url_;
  std::string tls_url_;
  std::string ca_file_;
  std::string ctl_;
  std::string private_dir_;  // set when this object started the node
};

enum class VhostKind {
  kShared,  // the default vhost "/"
  kOwn,     // a fresh vhost guest may use (two rabbitmqctl calls, ~1 s each)
};

class TestBroker {
 public:
  // The destructor deletes the queues and exchanges BindQueue made, and an own vhost.
  static std::unique_ptr<TestBroker> Create(VhostKind kind = VhostKind::kShared,
                                            const AmqpNode& node = AmqpNode::Shared());
  ~TestBroker();

  // `base` made unique to this test (process and instance), e.g. for an exchange.
  std::string Name(const std::string& base) const { return prefix_ + base; }
  const std::string& vhost() const { return vhost_; }
  const std::string& url() const { return url_; }  // the node's URL with this vhost
  std::string Ctl(const std::vector<std::string>& args) const { return node_.Ctl(args); }

  // Declares the durable topic exchange, a durable queue and the binding.
  void BindQueue(const std::string& exchange, const std::string& queue,
                 const std::string& binding_key);
  // Takes every message from `queue`, oldest first.
  std::vector<AmqpMessage> Drain(const std::string& queue) const;

 private:
  TestBroker(const AmqpNode& node, VhostKind kind, std::string prefix);
  const AmqpNode& node_;
  VhostKind kind_;
  std::string prefix_;
  std::string vhost_;
  std::string url_;
  std::vector<std::pair<std::string, std::string>> bound_;  // exchange, queue
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_AMQP_FIXTURE_H_
