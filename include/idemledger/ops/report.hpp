// idemledger/ops/report.hpp — what an operator asks at 3 a.m., as typed answers.
//
//   absl::StatusOr<idemledger::StatusReport> s = idemledger::status_report(conn, {.schema =
//   schema}); for (const auto& row : s->by_status) print(row.status, row.events,
//   row.oldest_update); absl::StatusOr<std::vector<idemledger::StatsRow>> t =
//   idemledger::ledger_stats(conn, schema);
//
// The admin CLI (idemledger-admin status / stats) prints these; hosts can
// serve them on their own dashboards. Each is a handful of indexed reads.
// Thread-safe (no state).
#ifndef IDEMLEDGER_OPS_REPORT_HPP
#define IDEMLEDGER_OPS_REPORT_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/event_status.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ops/monitor.hpp"

namespace idemledger {

class Connection;

struct QueueStatusRow {
  EventStatus status;
  std::int64_t events = 0;
  absl::Time oldest_update;
};

struct StatusReport {
  std::vector<QueueStatusRow> by_status;  // statuses that have events, in FSM order
  std::int64_t open_dead_letters = 0;
  std::optional<absl::Time> last_reconciliation;  // nullopt: never ran
  HealthReport health;
};

// status_report()
//
// Events by status, open dead letters, the last reconciliation, and
// check_health()'s findings (which also alert through options.alerts).
[[nodiscard]] absl::StatusOr<StatusReport> status_report(Connection& conn,
                                                         const MonitorOptions& options);

// One line of ledger_stats(): events by type and status, idempotency outcomes,
// ledger entries and balances, each with its count and (where it has one) total.
struct StatsRow {
  std::string what;
  std::int64_t count = 0;
  std::optional<Amount> total;
};

[[nodiscard]] absl::StatusOr<std::vector<StatsRow>> ledger_stats(Connection& conn,
                                                                 const Schema& schema);

// What the ledger owes its users in one asset — the figure an operator holds
// against the custody wallets — and how the system accounts stand.
struct AssetLiabilities {
  std::string asset;
  int decimals = 0;
  std::int64_t accounts = 0;
  Amount owed;       // SUM(user balances): everything users own, held included
  Amount held;       // reserved by open holds (withdrawals on their way out)
  Amount available;  // owed - held
  // The system accounts, each the sum of its entries: the chain side
  // (deposits make it negative, withdrawals positive) and the fees collected.
  // Double entry: owed = SUM(initial balances) - external - fees.
  Amount external;
  Amount fees;
};

// liabilities(): one snapshot (REPEATABLE READ), every registered asset.
[[nodiscard]] absl::StatusOr<std::vector<AssetLiabilities>> liabilities(Connection& conn,
                                                                        const Schema& schema);

}  // namespace idemledger

#endif  // IDEMLEDGER_OPS_REPORT_HPP
