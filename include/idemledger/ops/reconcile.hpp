// idemledger/ops/reconcile.hpp — do the sums still match?
//
// "The queue drains" and "the sums match" are different signals; this is the
// second. For every account of the users checked: balance == initial_balance
// + SUM(its entries) and held == SUM(its open holds); no (source_event_id,
// event_type) appears twice; and, in a full pass, every asset's entries —
// user legs and system legs — sum to zero (double entry).
//
//   Reconciler r({.schema = "idemledger", .alerts = &pager});
//   absl::StatusOr<ReconcileReport> hot = r.hot_path(conn, absl::Minutes(10));
//   absl::StatusOr<ReconcileReport> all = r.full(conn);          // in batches
//   if (!all->clean()) ...                                        // alerted already
//
// Consistency: each check reads a user's balance and its ledger in one
// snapshot (BEGIN ISOLATION LEVEL REPEATABLE READ inside the transaction —
// never a session setting, so it works behind PgBouncer). The hot path uses
// one snapshot for all recently touched users; the full pass one per batch of
// users, so its memory is bounded by the batch and the mismatches found.
// A run is recorded in reconciliation_runs; mismatches raise a critical alert.
//
// On a standby (a DSN with target_session_attrs=prefer-standby keeps the
// reads off the primary) the checks are the same, as of what the standby
// has replayed: the report carries its replay lag at the start
// (standby_replay_lag()), and the run is not recorded (a standby cannot
// write; the alert still fires).
//
// Reconciler is thread-safe (configuration only).
#ifndef IDEMLEDGER_OPS_RECONCILE_HPP
#define IDEMLEDGER_OPS_RECONCILE_HPP

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/alert.hpp"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/log.hpp"
#include "idemledger/core/progress.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/metrics.hpp"

namespace idemledger {

class Connection;

struct DuplicateLedgerEntry {
  std::string source_event_id;
  std::string event_type;
  std::int64_t copies = 0;
};

// An asset whose entries do not sum to zero: a posting was half-written.
struct AssetImbalance {
  std::string asset;
  std::string sum;
};

struct ReconcileReport {
  std::int64_t users_checked = 0;
  std::int64_t accounts_checked = 0;
  std::vector<BalanceMismatch> mismatches;  // account, actual and expected balance and held
  std::vector<DuplicateLedgerEntry> duplicates;
  std::vector<AssetImbalance> imbalances;  // full pass only
  std::int64_t last_user_id = 0;           // where a full pass got to: resume after it
  // Set when read on a standby: how far behind its primary it was at the start.
  std::optional<absl::Duration> standby_lag;
  [[nodiscard]] bool clean() const {
    return mismatches.empty() && duplicates.empty() && imbalances.empty();
  }
};

// standby_replay_lag()
//
// nullopt on a primary; on a standby, how far its replay is behind: zero
// when it has replayed all the WAL it received, else the age of the last
// transaction it replayed.
[[nodiscard]] absl::StatusOr<std::optional<absl::Duration>> standby_replay_lag(Connection& conn);

struct ReconcilerOptions {
  Schema schema = kDefaultSchema;
  std::int64_t batch_users = 1000;   // users per snapshot in a full pass
  AlertSink* alerts = nullptr;       // nullptr means stderr_alert_sink()
  LedgerMetrics* metrics = nullptr;  // runs by result; nullptr records nothing
  LogSink* log = nullptr;            // one line per run; nullptr logs nothing
  // A full pass: after each batch, users checked of those counted at the start.
  ProgressFn progress;
};

class Reconciler {
 public:
  explicit Reconciler(ReconcilerOptions options);

  // hot_path()
  //
  // Users with ledger entries in the last `window`, in one snapshot.
  [[nodiscard]] absl::StatusOr<ReconcileReport> hot_path(Connection& conn,
                                                         absl::Duration window) const;

  // full()
  //
  // Every user with id > `after_user_id`, in batches of batch_users, then the
  // per-asset zero-sum of all entries in one snapshot.
  [[nodiscard]] absl::StatusOr<ReconcileReport> full(Connection& conn,
                                                     std::int64_t after_user_id = 0) const;

 private:
  absl::Status check_batch(Connection& conn, std::string_view users_sql,
                           std::span<const Param> params, ReconcileReport& report) const;
  absl::Status find_duplicates(Connection& conn, std::string_view users_sql,
                               std::span<const Param> params, ReconcileReport& report) const;
  absl::Status find_imbalances(Connection& conn, ReconcileReport& report) const;
  absl::Status finish(Connection& conn, std::string_view kind, absl::Time started,
                      const ReconcileReport& report) const;

  ReconcilerOptions options_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_OPS_RECONCILE_HPP
