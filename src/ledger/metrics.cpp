#include "idemledger/ledger/metrics.hpp"

#include <array>

#include "idemledger/core/connection.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {
namespace {

constexpr std::string_view kOutcomes = "idemledger_ledger_outcomes_total";
constexpr std::string_view kOutcomesHelp =
    "Ledger calls by outcome: applied, duplicate, insufficient_funds, conflict, error.";
constexpr std::string_view kDeadLettered = "idemledger_dead_lettered_total";
constexpr std::string_view kDeadLetteredHelp =
    "Events failed into the dead-letter queue by the dispatcher, by reason.";
constexpr std::string_view kReconciliations = "idemledger_reconciliation_runs_total";
constexpr std::string_view kReconciliationsHelp = "Reconciliation runs, by result.";
constexpr std::string_view kQueue = "idemledger_queue_events";
constexpr std::string_view kQueueHelp = "Events not yet final, by status (read from the database).";
constexpr std::string_view kOldest = "idemledger_queue_oldest_seconds";
constexpr std::string_view kOldestHelp =
    "Seconds the longest-waiting event of each status has not moved; 0 if there is none.";
}  // namespace

LedgerMetrics::LedgerMetrics(prometheus::Registry& r)
    : registry(r),
      applied(counter(r, kOutcomes, kOutcomesHelp, {{"outcome", "applied"}})),
      duplicates(counter(r, kOutcomes, kOutcomesHelp, {{"outcome", "duplicate"}})),
      insufficient_funds(counter(r, kOutcomes, kOutcomesHelp, {{"outcome", "insufficient_funds"}})),
      conflicts(counter(r, kOutcomes, kOutcomesHelp, {{"outcome", "conflict"}})),
      errors(counter(r, kOutcomes, kOutcomesHelp, {{"outcome", "error"}})),
      refused(counter(r, kOutcomes, kOutcomesHelp, {{"outcome", "refused"}})),
      holds_expired(counter(r, "idemledger_holds_expired_total",
                            "Holds the sweeper released past their expiry.")),
      apply_duration(histogram(r, "idemledger_apply_duration_seconds",
                               "One Ledger call (one transaction), measured by the client.",
                               default_latency_buckets())),
      retries_scheduled(counter(r, "idemledger_retries_scheduled_total",
                                "Transient failures sent back to pending with a backoff.")),
      dead_lettered_failed(counter(r, kDeadLettered, kDeadLetteredHelp, {{"reason", "failed"}})),
      dead_lettered_stale(
          counter(r, kDeadLettered, kDeadLetteredHelp, {{"reason", "stale_recoveries_exhausted"}})),
      recovered(counter(r, "idemledger_recovered_total",
                        "Expired leases returned to pending by recover_stale().")),
      time_to_confirm(histogram(r, "idemledger_time_to_confirm_seconds",
                                "From intake recording an event to its final status.",
                                default_latency_buckets())),
      reconciliations_clean(
          counter(r, kReconciliations, kReconciliationsHelp, {{"result", "clean"}})),
      reconciliations_with_findings(
          counter(r, kReconciliations, kReconciliationsHelp, {{"result", "findings"}})),
      queue_pending(gauge(r, kQueue, kQueueHelp, {{"status", "pending"}})),
      queue_enqueued(gauge(r, kQueue, kQueueHelp, {{"status", "enqueued"}})),
      queue_processing(gauge(r, kQueue, kQueueHelp, {{"status", "processing"}})),
      dead_letters_open(
          gauge(r, "idemledger_dead_letters_open", "Dead letters no operator has resolved yet.")),
      last_reconciliation(gauge(r, "idemledger_last_reconciliation_timestamp_seconds",
                                "Unix time the last reconciliation run finished; 0 if none.")),
      holds_open(gauge(r, "idemledger_holds_open", "Holds reserving funds now.")),
      holds_overdue(gauge(r, "idemledger_holds_overdue",
                          "Holds still reserving funds past their expiry (sweeper behind).")),
      oldest_pending(gauge(r, kOldest, kOldestHelp, {{"status", "pending"}})),
      oldest_enqueued(gauge(r, kOldest, kOldestHelp, {{"status", "enqueued"}})),
      oldest_processing(gauge(r, kOldest, kOldestHelp, {{"status", "processing"}})),
      oldest_pending_record(
          gauge(r, "idemledger_idempotency_pending_oldest_seconds",
                "Seconds the oldest idempotency record has stayed pending; 0 if none.")),
      last_reconciliation_findings(
          gauge(r, "idemledger_last_reconciliation_findings",
                "Mismatches plus duplicates the last reconciliation run found.")),
      next_month_partition_missing(
          gauge(r, "idemledger_next_month_partition_missing",
                "1 when a partitioned schema has no partition for next month yet.")),
      partitioning_incomplete(
          gauge(r, "idemledger_partitioning_incomplete",
                "1 when a schema partitioned before migration 23 still has its system legs in one "
                "table.")) {}

void LedgerMetrics::count_for_asset(std::string_view asset, std::string_view outcome) {
  prometheus::Counter* found = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = assets_.find(internal::to_absl(asset));
    if (it == assets_.end()) {
      const std::string label = assets_.size() < kMaxAssets ? std::string(asset) : "other";
      it = assets_.try_emplace(label).first;
    }
    AssetSeries& s = it->second;
    for (std::size_t i = 0; i < s.size && found == nullptr; ++i) {
      if (s.by_outcome[i].first == outcome) found = s.by_outcome[i].second;
    }
    if (found == nullptr) {
      found = &counter(registry, "idemledger_asset_outcomes_total",
                       "Ledger calls the database accepted, by asset and outcome.",
                       {{"asset", it->first}, {"outcome", std::string(outcome)}});
      // Outcome names are a fixed handful; past the cache, the registry answers.
      if (s.size < s.by_outcome.size()) s.by_outcome[s.size++] = {std::string(outcome), found};
    }
  }
  found->Increment();
}

absl::Status refresh_queue_gauges(Connection& conn, const Schema& schema, LedgerMetrics& metrics) {
  // Each count uses its partial index; terminal rows are never scanned.
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      schema.qualify(
          "SELECT (SELECT count(*) FROM {schema}.payment_events WHERE status = 'pending'), "
          "(SELECT count(*) FROM {schema}.payment_events WHERE status = 'enqueued'), "
          "(SELECT count(*) FROM {schema}.payment_events WHERE status = 'processing'), "
          "(SELECT count(*) FROM {schema}.dead_letter_queue WHERE resolved_at IS NULL), "
          "(SELECT coalesce(extract(epoch FROM max(finished_at))::bigint, 0) "
          "FROM {schema}.reconciliation_runs), "
          "(SELECT count(*) FROM {schema}.holds WHERE state = 'held'), "
          "(SELECT count(*) FROM {schema}.holds WHERE state = 'held' AND expires_at < now()), "
          // Ages as the monitor (ops/monitor.hpp) reads them: since the row last moved.
          "(SELECT coalesce(extract(epoch FROM now() - min(updated_at))::bigint, 0) "
          "FROM {schema}.payment_events WHERE status = 'pending'), "
          "(SELECT coalesce(extract(epoch FROM now() - min(updated_at))::bigint, 0) "
          "FROM {schema}.payment_events WHERE status = 'enqueued'), "
          "(SELECT coalesce(extract(epoch FROM now() - min(updated_at))::bigint, 0) "
          "FROM {schema}.payment_events WHERE status = 'processing'), "
          "(SELECT coalesce(extract(epoch FROM now() - min(created_at))::bigint, 0) "
          "FROM {schema}.processed_events WHERE outcome = 'pending'), "
          "coalesce((SELECT mismatches + duplicates FROM {schema}.reconciliation_runs "
          "ORDER BY finished_at DESC LIMIT 1), 0), "
          "{schema}.next_month_partition_missing()::int, "
          "{schema}.partitioning_incomplete()::int"));
  if (!r.ok()) return r.status();
  absl::StatusOr<Row> row = r->single_row("refresh_queue_gauges");
  if (!row.ok()) return row.status();
  const std::array<prometheus::Gauge*, 14> gauges = {&metrics.queue_pending,
                                                     &metrics.queue_enqueued,
                                                     &metrics.queue_processing,
                                                     &metrics.dead_letters_open,
                                                     &metrics.last_reconciliation,
                                                     &metrics.holds_open,
                                                     &metrics.holds_overdue,
                                                     &metrics.oldest_pending,
                                                     &metrics.oldest_enqueued,
                                                     &metrics.oldest_processing,
                                                     &metrics.oldest_pending_record,
                                                     &metrics.last_reconciliation_findings,
                                                     &metrics.next_month_partition_missing,
                                                     &metrics.partitioning_incomplete};
  for (std::size_t i = 0; i < gauges.size(); ++i) {
    absl::StatusOr<std::int64_t> v = row->get<std::int64_t>(i);
    if (!v.ok()) return v.status();
    gauges[i]->Set(static_cast<double>(*v));
  }
  return absl::OkStatus();
}

}  // namespace idemledger
