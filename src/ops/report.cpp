#include "idemledger/ops/report.hpp"

#include <algorithm>

#include "idemledger/core/connection.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {

absl::StatusOr<StatusReport> status_report(Connection& conn, const MonitorOptions& options) {
  StatusReport report;
  absl::StatusOr<Result> by_status = internal::execute_pinned(
      conn,
      options.schema.qualify(
          "SELECT status, count(*), min(updated_at) FROM {schema}.payment_events GROUP BY status"));
  if (!by_status.ok()) return by_status.status();
  for (std::size_t i = 0; i < by_status->rows.size(); ++i) {
    const Row row = by_status->row(i);
    auto read = row.read<EventStatus, std::int64_t, absl::Time>();
    if (!read.ok()) return read.status();
    auto& [status, events, oldest] = *read;
    report.by_status.push_back({.status = status, .events = events, .oldest_update = oldest});
  }
  std::sort(report.by_status.begin(), report.by_status.end(),
            [](const QueueStatusRow& a, const QueueStatusRow& b) { return a.status < b.status; });

  absl::StatusOr<Result> totals = internal::execute_pinned(
      conn,
      options.schema.qualify(
          "SELECT (SELECT count(*) FROM {schema}.dead_letter_queue WHERE resolved_at IS NULL), "
          "(SELECT max(finished_at) FROM {schema}.reconciliation_runs)"));
  if (!totals.ok()) return totals.status();
  absl::StatusOr<Row> row = totals->single_row("status totals");
  if (!row.ok()) return row.status();
  absl::StatusOr<std::int64_t> open = row->get<std::int64_t>(0);
  absl::StatusOr<std::optional<absl::Time>> last = row->get_optional<absl::Time>(1);
  if (!open.ok()) return open.status();
  if (!last.ok()) return last.status();
  report.open_dead_letters = *open;
  report.last_reconciliation = *last;

  absl::StatusOr<HealthReport> health = check_health(conn, options);
  if (!health.ok()) return health.status();
  report.health = *health;
  return report;
}

absl::StatusOr<std::vector<StatsRow>> ledger_stats(Connection& conn, const Schema& schema) {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      schema.qualify(
          "SELECT 'event ' || event_type || ' ' || asset || ' ' || status, count(*), sum(amount) "
          "FROM {schema}.payment_events GROUP BY 1 "
          "UNION ALL SELECT 'outcome ' || outcome, count(*), NULL FROM {schema}.processed_events "
          "GROUP BY 1 "
          "UNION ALL SELECT 'entries user ' || asset, count(*), sum(amount) "
          "FROM {schema}.balance_events GROUP BY 1 "
          "UNION ALL SELECT 'entries ' || account || ' ' || asset, count(*), sum(amount) "
          "FROM {schema}.system_entries GROUP BY 1 "
          "UNION ALL SELECT 'accounts ' || asset, count(*), sum(balance) FROM {schema}.accounts "
          "GROUP BY 1 "
          "UNION ALL SELECT 'holds ' || asset || ' ' || state, count(*), sum(amount + fee) "
          "FROM {schema}.holds GROUP BY 1 "
          "UNION ALL SELECT 'users', count(*), NULL FROM {schema}.users "
          "ORDER BY 1"));
  if (!r.ok()) return r.status();
  std::vector<StatsRow> rows;
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    auto read = r->row(i).read<std::string, std::int64_t, std::optional<Amount>>();
    if (!read.ok()) return read.status();
    auto& [what, count, total] = *read;
    rows.push_back({.what = std::move(what), .count = count, .total = total});
  }
  return rows;
}

absl::StatusOr<std::vector<AssetLiabilities>> liabilities(Connection& conn, const Schema& schema) {
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedSnapshot);
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Result> r = conn.execute(schema.qualify(
      "SELECT s.code, s.decimals, coalesce(a.accounts, 0), coalesce(a.owed, 0), "
      "       coalesce(a.held, 0), coalesce(e.external, 0), coalesce(e.fees, 0) "
      "FROM {schema}.assets s "
      "LEFT JOIN (SELECT asset, count(*) AS accounts, sum(balance) AS owed, sum(held) AS held "
      "           FROM {schema}.accounts GROUP BY asset) a ON a.asset = s.code "
      "LEFT JOIN (SELECT asset, sum(amount) FILTER (WHERE account = 'external') AS external, "
      "                  sum(amount) FILTER (WHERE account = 'fees') AS fees "
      "           FROM {schema}.system_entries GROUP BY asset) e ON e.asset = s.code "
      "ORDER BY s.code"));
  if (!r.ok()) return r.status();
  std::vector<AssetLiabilities> out;
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    auto read = r->row(i).read<std::string, int, std::int64_t, Amount, Amount, Amount, Amount>();
    if (!read.ok()) return read.status();
    auto& [code, decimals, accounts, owed, held, external, fees] = *read;
    absl::StatusOr<Amount> available = owed.checked_sub(held);
    if (!available.ok()) return available.status();
    out.push_back({.asset = std::move(code),
                   .decimals = decimals,
                   .accounts = accounts,
                   .owed = owed,
                   .held = held,
                   .available = *available,
                   .external = external,
                   .fees = fees});
  }
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  return out;
}

}  // namespace idemledger
