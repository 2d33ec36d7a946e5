// idemledger/log.hpp — structured logs the host can route into its own logger.
//
// Library components (Dispatcher, DeadLetterQueue, Reconciler) describe what
// they did as a LogRecord: level, message, the trace id intake assigned and
// the event id, plus a few typed fields. They hand it to a LogSink; nothing
// is formatted unless a sink is set. JsonLineLogSink writes one JSON object
// per line, the shape the example services use:
//
//   {"ts":"2026-11-29T21:04:01.123456Z","level":"warning","msg":"retry scheduled",
//    "trace_id":"5f0c...","event_id":"evt_42","error":"...55P03..."}
//
//   idemledger::JsonLineLogSink logs(stdout, idemledger::LogLevel::kInfo);
//   idemledger::Dispatcher dispatcher(ledger, {.log = &logs});
//
// Sinks must be thread-safe: components call them from any thread.
#ifndef IDEMLEDGER_LOG_HPP
#define IDEMLEDGER_LOG_HPP

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/mutex.hpp"

namespace idemledger {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
inline constexpr EnumNames<LogLevel, 4> kLogLevelNames{{{
    {LogLevel::kDebug, "debug"},
    {LogLevel::kInfo, "info"},
    {LogLevel::kWarning, "warning"},
    {LogLevel::kError, "error"},
}}};
constexpr const auto& enum_names(LogLevel) { return kLogLevelNames; }

// One named value: text or an integer (no floating point in our logs).
struct LogField {
  std::string_view key;
  std::variant<std::string_view, std::int64_t> value;
};

// What happened. Views are valid only during the LogSink::log() call.
struct LogRecord {
  LogLevel level = LogLevel::kInfo;
  absl::Time time;
  std::string_view message;
  std::string_view trace_id;  // empty when unknown
  std::string_view event_id;  // empty when not about one event
  std::span<const LogField> fields;
};

class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void log(const LogRecord& record) = 0;
};

// format_json_log_line()
//
// The record as one JSON object and a newline: "ts" (RFC 3339, UTC), "level",
// "msg", "trace_id" and "event_id" when set, then the fields in order. Keys
// and values are escaped; invalid UTF-8 is replaced, never passed through.
[[nodiscard]] std::string format_json_log_line(const LogRecord& record);

// JsonLineLogSink
//
// Writes records at or above `min_level` to `out` as JSON lines, one write
// and flush per line so lines from many threads never interleave.
// JsonLineLogSink is thread-safe. REQUIRES: `out` outlives the sink.
class JsonLineLogSink final : public LogSink {
 public:
  explicit JsonLineLogSink(std::FILE* out, LogLevel min_level = LogLevel::kInfo)
      : out_(out), min_level_(min_level) {}
  void log(const LogRecord& record) override;

 private:
  Mutex mu_;
  std::FILE* const out_ ABSL_PT_GUARDED_BY(mu_);
  const LogLevel min_level_;
};

// emit_log()
//
// Builds a record stamped now and hands it to `sink`; does nothing for a null
// sink. What library components call.
void emit_log(LogSink* sink, LogLevel level, std::string_view message, std::string_view trace_id,
              std::string_view event_id, std::span<const LogField> fields);
inline void emit_log(LogSink* sink, LogLevel level, std::string_view message,
                     std::string_view trace_id, std::string_view event_id,
                     std::initializer_list<LogField> fields = {}) {
  emit_log(sink, level, message, trace_id, event_id,
           std::span<const LogField>(fields.begin(), fields.size()));
}

}  // namespace idemledger

#endif  // IDEMLEDGER_LOG_HPP
