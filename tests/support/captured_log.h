// Routes spdlog's default logger into a string for a test's duration, each line as
// "<level> <message>". Safe while other threads log.
//
//   test::CapturedLog log;
//   ... code that logs ...
//   EXPECT_THAT(log.Take(), HasSubstr("error event a1"));
#ifndef OUTBOXD_TESTS_SUPPORT_CAPTURED_LOG_H_
#define OUTBOXD_TESTS_SUPPORT_CAPTURED_LOG_H_

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace outboxd::test {

class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("captured", sink_);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  // What was logged since the last Take().
  std::string Take() { return sink_->Take(); }

 private:
  class StringSink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string Take() {
      std::lock_guard lock(mutex_);
      return std::exchange(text_, "");
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t line;
      formatter_->format(msg, line);
      text_.append(line.data(), line.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };

  std::shared_ptr<StringSink> sink_ = std::make_shared<StringSink>();
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_CAPTURED_LOG_H_
