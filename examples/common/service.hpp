// Shared by the example services: configuration from the environment (with
// startup errors that say what is wrong), JSON log lines, and SIGTERM/SIGINT
// turned into a flag a service loop can watch.
#ifndef IDEMLEDGER_EXAMPLES_COMMON_SERVICE_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_SERVICE_HPP

#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/schema.hpp"
#include "idemledger/pg/connection.hpp"

namespace example {

// Prints "config: <what>" and exits 2: a service must not start half-configured.
[[noreturn]] inline void config_error(const std::string& what) {
  std::fprintf(stderr, "config: %s\n", what.c_str());
  std::exit(2);
}

inline std::string env_string(const char* name,
                              std::optional<std::string> fallback = std::nullopt) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  if (!fallback) config_error(std::string(name) + " is required");
  return *fallback;
}

inline long env_long(const char* name, long fallback, long min, long max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < min || n > max) {
    config_error(std::string(name) + " must be an integer in [" + std::to_string(min) + ", " +
                 std::to_string(max) + "], got \"" + v + "\"");
  }
  return n;
}

// IDEMLEDGER_SCHEMA (default "idemledger"), checked once at startup: a bad
// name stops the service with the rule it broke, before it listens.
inline idemledger::Schema env_schema() {
  absl::StatusOr<idemledger::Schema> schema =
      idemledger::Schema::create(env_string("IDEMLEDGER_SCHEMA", "idemledger"));
  if (!schema.ok()) config_error("IDEMLEDGER_SCHEMA: " + std::string(schema.status().message()));
  return *schema;
}

// A service's database sessions: named after the service in pg_stat_activity
// (unless IDEMLEDGER_DSN names them), and IDEMLEDGER_PREPARED_STATEMENTS=0
// sends every statement unnamed, which PgBouncer before 1.21 needs in
// transaction pooling mode; 1 (default) prepares.
inline idemledger::pg::ConnectionOptions env_connection_options(std::string service) {
  return {.prepared_statements = env_long("IDEMLEDGER_PREPARED_STATEMENTS", 1, 0, 1) == 1,
          .application_name = std::move(service)};
}

// Lines logged on this thread while a LogBatch lives are written together
// when it ends: one write for a group commit's answers instead of one each.
// Each line keeps the time it was logged at. Batches nest: each writes its own.
class LogBatch {
 public:
  LogBatch() : outer_(std::exchange(current_, this)) {}
  ~LogBatch() {
    current_ = outer_;
    write_out(lines_);
  }
  LogBatch(const LogBatch&) = delete;
  LogBatch& operator=(const LogBatch&) = delete;

  // Writes `line` now, or with this thread's batch.
  static void write_or_join(std::string line) {
    if (current_ == nullptr) return write_out(line);
    current_->lines_ += line;
  }

 private:
  static void write_out(const std::string& text) {
    if (text.empty()) return;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  static inline thread_local LogBatch* current_ = nullptr;
  LogBatch* const outer_;
  std::string lines_;
};

// One JSON object per line on stdout; `fields` gets "ts" and "level" added.
inline void log(const char* level, nlohmann::json fields) {
  fields["ts"] = absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone());
  fields["level"] = level;
  LogBatch::write_or_join(fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                          "\n");
}

// What the process used over its life, for its "stopped" line: CPU (user +
// system, every thread), peak resident memory, and context switches (every
// thread, given up or taken: on a virtual machine each costs more than most
// requests' own work). bench/run_load.sh reads them to say where a
// service's time and memory go.
inline nlohmann::json resource_usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto ms = [](const timeval& t) {
    return static_cast<long long>(t.tv_sec) * 1000 + t.tv_usec / 1000;
  };
  return {{"cpu_ms", ms(u.ru_utime) + ms(u.ru_stime)},
          {"max_rss_kb", u.ru_maxrss},
          {"context_switches", u.ru_nvcsw + u.ru_nivcsw}};
}

// Set by SIGTERM / SIGINT; service loops finish their current work and exit.
// A lock-free atomic, so the handler may set it and any thread read it (a
// volatile sig_atomic_t is only for the thread the signal interrupts).
inline std::atomic<bool> stop_requested = false;
static_assert(std::atomic<bool>::is_always_lock_free, "set in a signal handler");
inline void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { stop_requested = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// A service's main(): runs `run`, and whatever escapes it (a thread or
// socket the system refuses) ends the process with exit code 1 and its
// reason logged, never an unexplained abort.
template <class Run>
int guarded_main(const char* service, Run run) {
  try {
    return run();
  } catch (const std::exception& e) {
    log("error", {{"msg", std::string(service) + " failed"}, {"error", e.what()}});
  } catch (...) {
    log("error", {{"msg", std::string(service) + " failed"}});
  }
  return 1;
}

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_SERVICE_HPP
