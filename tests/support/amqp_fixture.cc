// AmqpNode: rabbitmqctl through the node's own wrapper (DIR/rabbitmqctl, which
// carries its cookie and epmd port). TestBroker: add_vhost + set_permissions for an
// own vhost, delete_vhost on teardown; pika (tests/support/amqp_peer.py) binds, drains
// and deletes.
#include "support/amqp_fixture.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "support/fatal.h"

namespace outboxd::test {
namespace {

std::string Quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string Join(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += " " + Quote(a);
  return out;
}

std::string UniqueName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  std::random_device device;
  return prefix + std::to_string(getpid()) + "_" + std::to_string(++counter) + "_" +
         std::to_string(device() % 100000);
}

// The value of `export NAME='value'` in a scripts/rabbitmq env file.
std::string EnvFileValue(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  std::string line;
  std::string prefix = "export " + name + "='";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0 && line.size() > prefix.size()) {
      return line.substr(prefix.size(), line.size() - prefix.size() - 1);
    }
  }
  return "";
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, '\t')) out.push_back(field);
  if (!line.empty() && line.back() == '\t') out.push_back("");
  return out;
}

const std::string kPeer = std::string(OUTBOXD_SOURCE_DIR) + "/tests/support/amqp_peer.py";
// Debian's interpreter, where python3-pika is installed (a python3 earlier in PATH,
// e.g. pyenv's, lacks it).
const std::string kPython = "/usr/bin/python3";
const std::string kScript = std::string(OUTBOXD_SOURCE_DIR) + "/scripts/rabbitmq";

}  // namespace

int RunCommand(const std::string& command, std::string* output) {
  output->clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const AmqpNode& AmqpNode::Shared() {
  static const AmqpNode* node = [] {
    const char* url = std::getenv("OUTBOXD_TEST_AMQP");
    const char* ctl = std::getenv("OUTBOXD_TEST_AMQP_CTL");
    if (url == nullptr || *url == '\0' || ctl == nullptr || *ctl == '\0') {
      Fatal(
          "OUTBOXD_TEST_AMQP / OUTBOXD_TEST_AMQP_CTL not set: run scripts/test, or "
          "scripts/rabbitmq start DIR and source DIR/env");
    }
    auto* n = new AmqpNode();
    n->url_ = url;
    n->ctl_ = ctl;
    const char* tls_url = std::getenv("OUTBOXD_TEST_AMQPS");
    const char* ca_file = std::getenv("OUTBOXD_TEST_AMQP_CA");
    n->tls_url_ = tls_url == nullptr ? "" : tls_url;
    n->ca_file_ = ca_file == nullptr ? "" : ca_file;
    return n;
  }();
  return *node;
}

std::unique_ptr<AmqpNode> AmqpNode::StartPrivate() {
  char dir[] = "/tmp/outboxd-test-rmq.XXXXXX";
  if (mkdtemp(dir) == nullptr) Fatal("mkdtemp failed");
  std::string output;
  if (RunCommand(Quote(kScript) + " start " + Quote(dir), &output) != 0) {
    RunCommand(Quote(kScript) + " stop " + Quote(dir), &output);
    Fatal("scripts/rabbitmq start failed: " + output);
  }
  std::unique_ptr<AmqpNode> node(new AmqpNode());
  node->private_dir_ = dir;
  node->url_ = EnvFileValue(node->private_dir_ + "/env", "OUTBOXD_TEST_AMQP");
  node->ctl_ = EnvFileValue(node->private_dir_ + "/env", "OUTBOXD_TEST_AMQP_CTL");
  node->tls_url_ = EnvFileValue(node->private_dir_ + "/env", "OUTBOXD_TEST_AMQPS");
  node->ca_file_ = EnvFileValue(node->private_dir_ + "/env", "OUTBOXD_TEST_AMQP_CA");
  return node;
}

AmqpNode::~AmqpNode() {
  if (private_dir_.empty()) return;
  std::string output;
  RunCommand(Quote(kScript) + " stop " + Quote(private_dir_), &output);
}

std::string AmqpNode::Ctl(const std::vector<std::string>& args) const {
  std::string output;
  int code = RunCommand(Quote(ctl_) + Join(args), &output);
  EXPECT_EQ(code, 0) << "rabbitmqctl" << Join(args) << ": " << output;
  return output;
}

std::unique_ptr<TestBroker> TestBroker::Create(VhostKind kind, const AmqpNode& node) {
  std::string prefix = UniqueName("outboxd_t") + "_";
  if (kind == VhostKind::kOwn) {
    node.Ctl({"add_vhost", prefix + "vhost"});
    node.Ctl({"set_permissions", "-p", prefix + "vhost", "guest", ".*", ".*", ".*"});
  }
  return std::unique_ptr<TestBroker>(new TestBroker(node, kind, std::move(prefix)));
}

TestBroker::TestBroker(const AmqpNode& node, VhostKind kind, std::string prefix)
    : node_(node), kind_(kind), prefix_(std::move(prefix)) {
  vhost_ = kind == VhostKind::kOwn ? prefix_ + "vhost" : "/";
  // amqp://user:pass@host:port/VHOST with VHOST replaced ("%2f" is "/").
  url_ = node.url().substr(0, node.url().rfind('/'));
  url_ += kind == VhostKind::kOwn ? "/" + vhost_ : "/%2f";
}

TestBroker::~TestBroker() {
  if (kind_ == VhostKind::kOwn) {
    node_.Ctl({"delete_vhost", vhost_});
    return;
  }
  for (const auto& [exchange, queue] : bound_) {
    std::string output;
    int code =
        RunCommand(kPython + " " + Quote(kPeer) + Join({"delete", url_, exchange, queue}), &output);
    EXPECT_EQ(code, 0) << output;
  }
}

void TestBroker::BindQueue(const std::string& exchange, const std::string& queue,
                           const std::string& binding_key) {
  bound_.emplace_back(exchange, queue);
  std::string output;
  int code = RunCommand(
      kPython + " " + Quote(kPeer) + Join({"bind", url_, exchange, queue, binding_key}), &output);
  ASSERT_EQ(code, 0) << output;
}

std::vector<AmqpMessage> TestBroker::Drain(const std::string& queue) const {
  std::string output;
  int code = RunCommand(kPython + " " + Quote(kPeer) + Join({"drain", url_, queue}), &output);
  EXPECT_EQ(code, 0) << output;
  std::vector<AmqpMessage> messages;
  std::stringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = SplitTabs(line);
    if (f.size() != 8) {
      ADD_FAILURE() << "amqp_peer.py drain: unexpected line: " << line;
      continue;
    }
    messages.push_back({f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]});
  }
  return messages;
}

}  // namespace outboxd::test
