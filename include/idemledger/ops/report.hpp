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

}  // namespace idemledger

#endif  // IDEMLEDGER_OPS_REPORT_HPP
