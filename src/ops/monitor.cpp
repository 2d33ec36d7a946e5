#include "idemledger/ops/monitor.hpp"

#include <fmt/format.h>

#include "idemledger/core/connection.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {

absl::StatusOr<HealthReport> check_health(Connection& conn, const MonitorOptions& options) {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      options.schema.qualify(
          "SELECT"
          " (SELECT count(*) FROM {schema}.payment_events WHERE status = 'processing'"
          "   AND updated_at < now() - $1::double precision * interval '1 millisecond'),"
          " (SELECT count(*) FROM {schema}.payment_events WHERE status IN ('pending', 'enqueued')"
          "   AND updated_at < now() - $2::double precision * interval '1 millisecond'),"
          " (SELECT count(*) FROM {schema}.dead_letter_queue WHERE created_at > now() - interval "
          "'1 hour'),"
          " (SELECT count(*) FROM {schema}.processed_events WHERE outcome = 'pending'"
          "   AND created_at < now() - $3::double precision * interval '1 millisecond'),"
          " {schema}.next_month_partition_missing(),"
          " (SELECT count(*) FROM {schema}.holds WHERE state = 'held'"
          "   AND expires_at < now() - $4::double precision * interval '1 millisecond'),"
          " {schema}.partitioning_incomplete()"),
      Params(options.processing_zombie_after, options.queued_zombie_after,
             options.stuck_record_after, options.overdue_hold_after));
  if (!r.ok()) return r.status();
  absl::StatusOr<Row> row = r->single_row("check_health");
  if (!row.ok()) return row.status();
  HealthReport h;
  for (const auto& [column, field] :
       {std::pair{0, &h.zombie_processing}, std::pair{1, &h.zombie_queued},
        std::pair{2, &h.dead_letters_last_hour}, std::pair{3, &h.stuck_idempotency_records},
        std::pair{5, &h.overdue_holds}}) {
    absl::StatusOr<std::int64_t> v = row->get<std::int64_t>(column);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  absl::StatusOr<bool> partition_missing = row->get<bool>(4);
  if (!partition_missing.ok()) return partition_missing.status();
  absl::StatusOr<bool> incomplete = row->get<bool>(6);
  if (!incomplete.ok()) return incomplete.status();
  h.dlq_flood = h.dead_letters_last_hour > options.dlq_flood_per_hour;
  h.next_month_partition_missing = *partition_missing;
  h.partitioning_incomplete = *incomplete;

  AlertSink& sink = alert_sink_or_default(options.alerts);
  const auto raise = [&](std::string_view key, std::string_view message,
                         AlertSeverity severity = AlertSeverity::kCritical) {
    sink.alert({.severity = severity, .key = key, .message = message});
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
  if (h.partitioning_incomplete) {
    raise("partitioning_incomplete",
          "system_entries is not partitioned on a partitioned schema (converted before migration "
          "23): it grows as one table; run enable_monthly_partitioning (idemledger-admin "
          "partitions enable) in a maintenance window",
          AlertSeverity::kWarning);
  }
  if (h.overdue_holds > 0) {
    raise("overdue_holds",
          fmt::format("{} holds still reserve funds more than {} past their expiry: is the hold "
                      "sweeper (Ledger::expire_holds) running?",
                      h.overdue_holds, absl::FormatDuration(options.overdue_hold_after)));
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
