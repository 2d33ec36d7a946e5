// idemledger/ledger/metrics.hpp — what the library records about money moving.
//
//   prometheus::Registry registry;                // the host's own, usually
//   idemledger::LedgerMetrics metrics(registry);
//   idemledger::Ledger ledger({.metrics = &metrics});
//   ... ledger.process_deposit(conn, event) ...
//   (void)idemledger::refresh_queue_gauges(conn, "idemledger", metrics);
//   std::string body = idemledger::render(registry);
//
// The instruments are prometheus-cpp's, created in the registry the host
// passes (core/metrics.hpp says how); building LedgerMetrics twice on one
// registry shares them.
//
// LedgerMetrics is thread-safe (its instruments are).
#ifndef IDEMLEDGER_LEDGER_METRICS_HPP
#define IDEMLEDGER_LEDGER_METRICS_HPP

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
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
//   idemledger_apply_duration_seconds           one Ledger call, client side (a batch is one call)
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
//   idemledger_partitioning_incomplete          1 when a schema partitioned
//       before migration 23 still has its system legs in one table
// The gauges are read from the database by refresh_queue_gauges(); the
// Prometheus rules in deploy/prometheus/ alert on them.
struct LedgerMetrics {
  explicit LedgerMetrics(prometheus::Registry& registry);

  // Counts one outcome of `asset` (a registered asset's code, or "default").
  // At most kMaxAssets codes get a series of their own; later ones count
  // under "other", so the label stays bounded whatever happens.
  void count_for_asset(std::string_view asset, std::string_view outcome);
  static constexpr std::size_t kMaxAssets = 256;

  prometheus::Registry& registry;
  prometheus::Counter& applied;
  prometheus::Counter& duplicates;
  prometheus::Counter& insufficient_funds;
  prometheus::Counter& conflicts;
  prometheus::Counter& errors;
  prometheus::Counter& refused;
  prometheus::Counter& holds_expired;
  prometheus::Histogram& apply_duration;
  prometheus::Counter& retries_scheduled;
  prometheus::Counter& dead_lettered_failed;
  prometheus::Counter& dead_lettered_stale;
  prometheus::Counter& recovered;
  prometheus::Histogram& time_to_confirm;
  prometheus::Counter& reconciliations_clean;
  prometheus::Counter& reconciliations_with_findings;
  prometheus::Gauge& queue_pending;
  prometheus::Gauge& queue_enqueued;
  prometheus::Gauge& queue_processing;
  prometheus::Gauge& dead_letters_open;
  prometheus::Gauge& last_reconciliation;
  prometheus::Gauge& holds_open;
  prometheus::Gauge& holds_overdue;
  prometheus::Gauge& oldest_pending;
  prometheus::Gauge& oldest_enqueued;
  prometheus::Gauge& oldest_processing;
  prometheus::Gauge& oldest_pending_record;
  prometheus::Gauge& last_reconciliation_findings;
  prometheus::Gauge& next_month_partition_missing;
  prometheus::Gauge& partitioning_incomplete;

 private:
  Mutex mu_;
  // One counter per outcome name of each asset seen, found without a
  // registry lookup (which would hash the label set) on every call.
  static constexpr std::size_t kMaxOutcomes = 8;
  struct AssetSeries {
    std::array<std::pair<std::string, prometheus::Counter*>, kMaxOutcomes> by_outcome{};
    std::size_t size = 0;
  };
  absl::flat_hash_map<std::string, AssetSeries> assets_ ABSL_GUARDED_BY(mu_);
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
