// How idemledger-admin shows a long job (reconcile --full, cleanup) while it
// runs, on stderr so stdout stays the result (and --json stays JSON):
// - on a terminal, one line redrawn in place at most 10 times a second:
//     reconcile --full: 12,000 of 100,000 users (12%), 5,230 users/s, ETA 15 s
// - otherwise (a pipe, a log file, cron), a plain line at most every 5 s;
// - with --quiet, nothing.
// Whatever the mode but quiet, the last line says how it ended:
//     reconcile --full: 100,000 users in 19.1 s (5,235 users/s)
//
// The rate is the average since the start; the ETA is what is left of the
// total counted at the start at that rate (none when there is no total, or
// when done has passed it: rows arrived meanwhile).
//
// Not thread-safe: one reporter per job, fed by the job's own thread.
#ifndef IDEMLEDGER_TOOLS_ADMIN_PROGRESS_HPP
#define IDEMLEDGER_TOOLS_ADMIN_PROGRESS_HPP

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/progress.hpp"

namespace idemledger::admin {

enum class ProgressMode { kTerminal, kLines, kQuiet };

// 1234567 -> "1,234,567".
inline std::string grouped(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// "12 s", "3 min 5 s", "2 h 4 min".
inline std::string human_duration(absl::Duration d) {
  const std::int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return std::to_string(s) + " s";
  if (s < 3600) return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  return std::to_string(s / 3600) + " h " + std::to_string(s % 3600 / 60) + " min";
}

// One progress line, without a line end. Pure: the tests call it directly.
inline std::string progress_line(std::string_view job, std::string_view unit, const Progress& p,
                                 absl::Duration elapsed) {
  std::string line = std::string(job) + ": " + grouped(p.done);
  if (p.total) line += " of " + grouped(*p.total);
  line += " " + std::string(unit);
  if (p.total && *p.total > 0) {
    const std::int64_t percent = std::min<std::int64_t>(100, p.done * 100 / *p.total);
    line += " (" + std::to_string(percent) + "%)";
  }
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (seconds > 0 && p.done > 0) {
    const double rate = static_cast<double>(p.done) / seconds;
    line += ", " + grouped(static_cast<std::int64_t>(rate)) + " " + std::string(unit) + "/s";
    if (p.total && *p.total > p.done) {
      line +=
          ", ETA " + human_duration(absl::Seconds(static_cast<double>(*p.total - p.done) / rate));
    }
  }
  return line;
}

// The last line: "<job>: N <unit> in 1.2 s (R <unit>/s)".
inline std::string finished_line(std::string_view job, std::string_view unit, std::int64_t done,
                                 absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  char took[32];
  std::snprintf(took, sizeof took, "%.1f s", seconds);
  std::string line =
      std::string(job) + ": " + grouped(done) + " " + std::string(unit) + " in " + took;
  if (seconds > 0) {
    line += " (" + grouped(static_cast<std::int64_t>(static_cast<double>(done) / seconds)) + " " +
            std::string(unit) + "/s)";
  }
  return line;
}

class ProgressReporter {
 public:
  ProgressReporter(std::string job, std::string unit, ProgressMode mode, std::FILE* out = stderr)
      : job_(std::move(job)), unit_(std::move(unit)), mode_(mode), out_(out) {}

  // For the job's options: `.progress = reporter.callback()`.
  ProgressFn callback() {
    return [this](const Progress& p) { update(p); };
  }

  void update(const Progress& p) {
    const absl::Time now = absl::Now();
    const absl::Duration every =
        mode_ == ProgressMode::kTerminal ? absl::Milliseconds(100) : absl::Seconds(5);
    if (mode_ == ProgressMode::kQuiet || now - last_ < every) return;
    last_ = now;
    const std::string line = progress_line(job_, unit_, p, now - started_);
    if (mode_ == ProgressMode::kTerminal) {
      std::fprintf(out_, "\r\033[K%s", line.c_str());  // back to the line's start, clear it
      drawn_ = true;
    } else {
      std::fprintf(out_, "%s\n", line.c_str());
    }
    std::fflush(out_);
  }

  void finish(std::int64_t done) {
    if (mode_ == ProgressMode::kQuiet) return;
    if (drawn_) std::fprintf(out_, "\r\033[K");
    std::fprintf(out_, "%s\n", finished_line(job_, unit_, done, absl::Now() - started_).c_str());
    std::fflush(out_);
  }

 private:
  std::string job_;
  std::string unit_;
  ProgressMode mode_;
  std::FILE* out_;
  absl::Time started_ = absl::Now();
  absl::Time last_ = absl::InfinitePast();
  bool drawn_ = false;
};

}  // namespace idemledger::admin

#endif  // IDEMLEDGER_TOOLS_ADMIN_PROGRESS_HPP
