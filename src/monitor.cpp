#include "idemledger/monitor.hpp"

#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {

absl::StatusOr<HealthReport> check_health(Connection& conn, const MonitorOptions& options) {
  if (absl::Status s = internal::validate_identifier("schema", options.schema); !s.ok()) return s;
  const std::string processing_ms =
      std::to_string(absl::ToInt64Milliseconds(options.processing_zombie_after));
  const std::string queued_ms =
      std::to_string(absl::ToInt64Milliseconds(options.queued_zombie_after));
  const std::string stuck_ms =
      std::to_string(absl::ToInt64Milliseconds(options.stuck_record_after));
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema(
          "SELECT"
          " (SELECT count(*) FROM {schema}.payment_events WHERE status = 'processing'"
          "   AND updated_at < now() - $1::bigint * interval '1 millisecond'),"
          " (SELECT count(*) FROM {schema}.payment_events WHERE status IN ('pending', 'enqueued')"
          "   AND updated_at < now() - $2::bigint * interval '1 millisecond'),"
          " (SELECT count(*) FROM {schema}.dead_letter_queue WHERE created_at > now() - interval "
          "'1 hour'),"
          " (SELECT count(*) FROM {schema}.processed_events WHERE outcome = 'pending'"
          "   AND created_at < now() - $3::bigint * interval '1 millisecond'),"
          " {schema}.next_month_partition_missing()",
          options.schema),
      {Param(processing_ms), Param(queued_ms), Param(stuck_ms)});
  if (!r.ok()) return r.status();
  HealthReport h;
  (void)absl::SimpleAtoi(r->at(0, 0).value_or("0"), &h.zombie_processing);
  (void)absl::SimpleAtoi(r->at(0, 1).value_or("0"), &h.zombie_queued);
  (void)absl::SimpleAtoi(r->at(0, 2).value_or("0"), &h.dead_letters_last_hour);
  (void)absl::SimpleAtoi(r->at(0, 3).value_or("0"), &h.stuck_idempotency_records);
  h.dlq_flood = h.dead_letters_last_hour > options.dlq_flood_per_hour;
  h.next_month_partition_missing = r->at(0, 4) == "t";

  AlertSink& sink = alert_sink_or_default(options.alerts);
  const auto raise = [&](std::string_view key, const std::string& message) {
    sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
  };
  if (h.zombie_processing > 0 || h.zombie_queued > 0) {
    raise("zombie_events",
          fmt::format(
              "{} events stuck in processing > {}, {} pending/enqueued > {}: are workers and lease "
              "recovery running?",
              h.zombie_processing, absl::FormatDuration(options.processing_zombie_after),
              h.zombie_queued, absl::FormatDuration(options.queued_zombie_after)));
  }
  if (h.next_month_partition_missing) {
    raise("partition_missing",
          "no partition for next month: its rows will be refused; run "
          "ensure_monthly_partitions (idemledger-admin partitions)");
  }
  if (h.dlq_flood) {
    raise("dlq_flood", fmt::format("{} dead letters in the last hour (threshold {})",
                                   h.dead_letters_last_hour, options.dlq_flood_per_hour));
  }
  if (h.stuck_idempotency_records > 0) {
    raise(
        "stuck_idempotency_records",
        fmt::format("{} idempotency records pending for more than {}", h.stuck_idempotency_records,
                    absl::FormatDuration(options.stuck_record_after)));
  }
  return h;
}

}  // namespace idemledger
