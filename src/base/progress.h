// Progress a person can watch: a long operation (a backfill, a cleanup, a dead-letter
// replay, a relay catching up after an outage) says how far it is, how fast it goes
// and how long is left, on one stderr line rewritten in place ("\r") at most four
// times a second. That line is drawn only when the CLI turned it on (stderr a
// terminal, --log-format text: SetProgressLineEnabled); a log, a pipe or a json
// collector sees only the summary logged at the end, in every case.
//
//   Progress progress({.what = "cleanup of public.outbox", .total = eligible});
//   while (...) progress.Add(deleted);   // "cleanup of public.outbox: 5000/20000 rows
//   progress.Finish();                   //  (25%), 4800 rows/s, 3s left"
//                                        // then, logged: "cleanup of public.outbox
//                                        // done: 20000 rows in 4.1s (4878 rows/s)"
#ifndef OUTBOXD_BASE_PROGRESS_H_
#define OUTBOXD_BASE_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace outboxd {

// Process-wide, set once by the CLI after its flags: whether progress lines may be
// drawn on stderr (a terminal, and text logs). Off by default: library users and
// tests see nothing.
void SetProgressLineEnabled(bool enabled);
bool ProgressLineEnabled();
// For the text log formatter: true when a progress line is on screen (and forgets
// it); the caller then starts its log line with "\r\x1b[K", so the log line replaces
// the progress line instead of continuing it. The next update draws it again below.
bool TakeProgressLine();

class Progress {
 public:
  // What is counted: rows or events as numbers, WAL as bytes (shown in MiB).
  enum class Unit { kRows, kEvents, kLetters, kBytes };
  struct Options {
    std::string what;              // "backfill of slot outboxd"
    Unit unit = Unit::kRows;       // done and total
    std::optional<int64_t> total;  // unknown: no percentage, no time left
    // A second count, for the rate shown when `done` is not what a person counts
    // (catch-up: done in WAL bytes, rate in events): see Update's `items`.
    std::optional<Unit> rate_unit;
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // Where a progress line goes; empty: the stderr line when enabled. Tests capture
    // it. An empty line means "erase it".
    std::function<void(std::string_view)> draw;
  };

  explicit Progress(Options options);
  ~Progress();  // Finish()es if not done yet
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Absolute figures: `done` so far, and (with a rate_unit) `items` so far.
  void Update(int64_t done, int64_t items = 0);
  void Add(int64_t more) { Update(done_ + more, items_ + more); }
  void SetTotal(int64_t total) { options_.total = total; }

  // Per second, over the last kWindow (nullopt before two samples a moment apart).
  std::optional<double> Rate() const;      // of `done`
  std::optional<double> ItemRate() const;  // of `items` (of `done` without rate_unit)
  // (total - done) at Rate() (nullopt: total or rate unknown; zero when done).
  std::optional<absl::Duration> TimeLeft() const;
  int64_t done() const { return done_; }
  std::optional<int64_t> total() const { return options_.total; }

  // "what: 5000/20000 rows (25%), 4800 rows/s, 3s left"
  std::string Line() const;
  // "what done: 20000 rows in 4.1s (4878 rows/s)", averaged over the whole run.
  std::string Summary() const;
  // Erases the line and logs the summary (info). Once; later calls do nothing.
  void Finish();

  // The rate is measured over this much recent time, so it follows a change of pace
  // (a broker slowing down) within seconds instead of averaging it away.
  static constexpr absl::Duration kWindow = absl::Seconds(10);
  // Redraws at most this often: four a second reads as live; more only costs
  // terminal writes.
  static constexpr absl::Duration kRedraw = absl::Milliseconds(250);

 private:
  struct Sample {
    absl::Time at;
    int64_t done;
    int64_t items;
  };
  void Record(absl::Time now);
  // Per second across the window, of one count of the samples.
  std::optional<double> RateOf(int64_t Sample::*count) const;
  void Draw(std::string_view line);

  Options options_;
  absl::Time started_;
  absl::Time last_draw_ = absl::InfinitePast();
  int64_t done_ = 0;
  int64_t items_ = 0;
  std::deque<Sample> samples_;  // oldest first; the first one just before the window
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace outboxd

#endif  // OUTBOXD_BASE_PROGRESS_H_
