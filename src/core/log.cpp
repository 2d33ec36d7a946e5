#include "idemledger/core/log.hpp"

#include "absl/time/clock.h"
#include "src/core/internal/text.hpp"

namespace idemledger {

std::string format_json_log_line(const LogRecord& record) {
  internal::JsonLine line;
  line.add("ts", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", record.time, absl::UTCTimeZone()))
      .add("level", to_string(record.level))
      .add("msg", record.message);
  if (!record.trace_id.empty()) line.add("trace_id", record.trace_id);
  if (!record.event_id.empty()) line.add("event_id", record.event_id);
  for (const LogField& f : record.fields) {
    std::visit([&](const auto& v) { line.add(f.key, v); }, f.value);
  }
  return line.finish();
}

void JsonLineLogSink::log(const LogRecord& record) {
  if (record.level < min_level_) return;
  const std::string line = format_json_log_line(record);
  MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

void emit_log(LogSink* sink, LogLevel level, std::string_view message, std::string_view trace_id,
              std::string_view event_id, std::span<const LogField> fields) {
  if (sink == nullptr) return;
  sink->log({.level = level,
             .time = absl::Now(),
             .message = message,
             .trace_id = trace_id,
             .event_id = event_id,
             .fields = fields});
}

}  // namespace idemledger
