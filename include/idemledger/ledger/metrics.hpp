// idemledger/ledger/metrics.hpp — what the library records about money moving.
//
//   idemledger::MetricsRegistry registry;
//   idemledger::LedgerMetrics metrics(registry);
//   idemledger::Ledger ledger({.metrics = &metrics});
//   ... ledger.process_deposit(conn, event) ...
//   (void)idemledger::refresh_queue_gauges(conn, "idemledger", metrics);
//   std::string body = registry.render();
//
// LedgerMetrics is thread-safe (its instruments are).
#ifndef IDEMLEDGER_LEDGER_METRICS_HPP
#define IDEMLEDGER_LEDGER_METRICS_HPP

#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

// LedgerMetrics
//
// The instruments the library records when given one (LedgerOptions,
// DispatcherOptions, ReconcilerOptions):
//   idemledger_ledger_outcomes_total{outcome}   applied | duplicate |
//       insufficient_funds | refused | conflict | error — one per Ledger call
//   idemledger_asset_outcomes_total{asset,outcome}  the same by asset, for
//       calls the database accepted (registered assets only: bounded)
//   idemledger_holds_expired_total              holds the sweeper released
//   idemledger_apply_duration_seconds           one Ledger call, client side
//   idemledger_retries_scheduled_total          transient failure -> pending
//   idemledger_dead_lettered_total{reason}      dead letters written
//   idemledger_recovered_total                  expired leases -> pending
//   idemledger_time_to_confirm_seconds          intake record -> final status
//   idemledger_reconciliation_runs_total{kind,result}
//   idemledger_queue_events{status}             pending/enqueued/processing now
//   idemledger_dead_letters_open                DLQ rows nobody resolved yet
//   idemledger_last_reconciliation_timestamp_seconds
//   idemledger_holds_open, idemledger_holds_overdue   held now; held past expiry
//   idemledger_queue_oldest_seconds{status}     how long the longest-waiting
//       event of each status has not moved (0: none); zombie events
//   idemledger_idempotency_pending_oldest_seconds  the oldest idempotency
//       record still `pending` (a writer that never finished; 0: none)
//   idemledger_last_reconciliation_findings     mismatches + duplicates the
//       last reconciliation run found
//   idemledger_next_month_partition_missing     1 when a partitioned schema
//       has no partition for next month
// The gauges are read from the database by refresh_queue_gauges(); the
// Prometheus rules in deploy/prometheus/ alert on them.
struct LedgerMetrics {
  explicit LedgerMetrics(MetricsRegistry& registry);

  // Counts one outcome of `asset` (a registered asset's code, or "default").
  // At most kMaxAssets codes get a series of their own; later ones count
  // under "other", so the label stays bounded whatever happens.
  void count_for_asset(std::string_view asset, std::string_view outcome);
  static constexpr std::size_t kMaxAssets = 256;

  MetricsRegistry& registry;
  Counter& applied;
  Counter& duplicates;
  Counter& insufficient_funds;
  Counter& conflicts;
  Counter& errors;
  Counter& refused;
  Counter& holds_expired;
  Histogram& apply_duration;
  Counter& retries_scheduled;
  Counter& dead_lettered_failed;
  Counter& dead_lettered_stale;
  Counter& recovered;
  Histogram& time_to_confirm;
  Counter& reconciliations_clean;
  Counter& reconciliations_with_findings;
  Gauge& queue_pending;
  Gauge& queue_enqueued;
  Gauge& queue_processing;
  Gauge& dead_letters_open;
  Gauge& last_reconciliation;
  Gauge& holds_open;
  Gauge& holds_overdue;
  Gauge& oldest_pending;
  Gauge& oldest_enqueued;
  Gauge& oldest_processing;
  Gauge& oldest_pending_record;
  Gauge& last_reconciliation_findings;
  Gauge& next_month_partition_missing;

 private:
  Mutex mu_;
  absl::flat_hash_set<std::string> assets_seen_ ABSL_GUARDED_BY(mu_);
};

// refresh_queue_gauges()
//
// One statement reading queue depth and age by status, open dead letters,
// the last reconciliation (when, and what it found), holds, the oldest
// unfinished idempotency record and next month's partition into `metrics`;
// call it before rendering.
// REQUIRES: migrate() ran for `schema`.
[[nodiscard]] absl::Status refresh_queue_gauges(Connection& conn, const Schema& schema,
                                                LedgerMetrics& metrics);

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_METRICS_HPP
