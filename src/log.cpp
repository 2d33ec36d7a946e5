#include "idemledger/log.hpp"

#include <nlohmann/json.hpp>

#include "absl/time/clock.h"

namespace idemledger {

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

std::string format_json_log_line(const LogRecord& record) {
  // nlohmann::ordered_json keeps "ts", "level", "msg" first, as people read them.
  nlohmann::ordered_json line;
  line["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", record.time, absl::UTCTimeZone());
  line["level"] = to_string(record.level);
  line["msg"] = record.message;
  if (!record.trace_id.empty()) line["trace_id"] = record.trace_id;
  if (!record.event_id.empty()) line["event_id"] = record.event_id;
  for (const LogField& f : record.fields) {
    std::visit([&](const auto& v) { line[std::string(f.key)] = v; }, f.value);
  }
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

void JsonLineLogSink::log(const LogRecord& record) {
  if (record.level < min_level_) return;
  const std::string line = format_json_log_line(record);
  internal::MutexLock lock(&mu_);
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
