// idemledger/ops/monitor.hpp — what must page a human before customers notice.
//
//   HealthReport h = *idemledger::check_health(conn, {.schema = "idemledger", .alerts = &pager});
//   if (!h.healthy()) ...   // each finding already alerted (use a CooldownAlertSink)
//
// Findings, each one query's worth (one statement, partial indexes):
// - zombie events: `processing` not moved for 5 min, `pending`/`enqueued` for
//   15 min (workers dead, queue stuck, lease recovery not running);
// - DLQ flood: more than `dlq_flood_per_hour` dead letters in the last hour;
// - stuck idempotency records: outcome `pending` for 5 min (a writer that
//   never finished; the ledger itself never commits one);
// - holds past their expiry still reserving funds (the sweeper,
//   Ledger::expire_holds, is not running or not keeping up);
// - a partitioned schema (partitioning.hpp) with no partition for next month;
// - a schema partitioned before migration 23, whose system legs are not yet
//   (a warning, not unhealthy: run enable_monthly_partitioning() once more).
//
// Thread-safe (no state).
#ifndef IDEMLEDGER_OPS_MONITOR_HPP
#define IDEMLEDGER_OPS_MONITOR_HPP

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/alert.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

struct MonitorOptions {
  Schema schema = kDefaultSchema;
  absl::Duration processing_zombie_after = absl::Minutes(5);
  absl::Duration queued_zombie_after = absl::Minutes(15);
  std::int64_t dlq_flood_per_hour = 100;
  absl::Duration stuck_record_after = absl::Minutes(5);
  absl::Duration overdue_hold_after = absl::Minutes(5);  // past expires_at
  AlertSink* alerts = nullptr;                           // nullptr means stderr_alert_sink()
};

struct HealthReport {
  std::int64_t zombie_processing = 0;
  std::int64_t zombie_queued = 0;  // pending or enqueued
  std::int64_t dead_letters_last_hour = 0;
  std::int64_t stuck_idempotency_records = 0;
  std::int64_t overdue_holds = 0;
  bool dlq_flood = false;
  bool next_month_partition_missing = false;  // partitioned schemas only
  bool partitioning_incomplete = false;       // warned, not counted in healthy()
  [[nodiscard]] bool healthy() const {
    return zombie_processing == 0 && zombie_queued == 0 && !dlq_flood &&
           stuck_idempotency_records == 0 && overdue_holds == 0 && !next_month_partition_missing;
  }
};

[[nodiscard]] absl::StatusOr<HealthReport> check_health(Connection& conn,
                                                        const MonitorOptions& options);

}  // namespace idemledger

#endif  // IDEMLEDGER_OPS_MONITOR_HPP
