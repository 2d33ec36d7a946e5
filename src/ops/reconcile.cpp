#include "idemledger/ops/reconcile.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "idemledger/core/connection.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"
#include "src/ledger/internal/balance_check.hpp"

namespace idemledger {
namespace {

std::string with_users(std::string_view sql, std::string_view users_sql, const Schema& schema) {
  std::string s = schema.qualify(sql);
  s.replace(s.find("{users}"), 7, users_sql);
  return s;
}

// An empty report that knows whether it is read on a standby, and how far
// behind that standby's replay is.
absl::StatusOr<ReconcileReport> new_report(Connection& conn) {
  absl::StatusOr<std::optional<absl::Duration>> lag = standby_replay_lag(conn);
  if (!lag.ok()) return lag.status();
  ReconcileReport report;
  report.standby_lag = *lag;
  return report;
}

}  // namespace

Reconciler::Reconciler(ReconcilerOptions options) : options_(std::move(options)) {}

absl::Status Reconciler::check_batch(Connection& conn, std::string_view users_sql,
                                     std::span<const Param> params, ReconcileReport& report) const {
  internal::BalanceCheck check{.last_user_id = report.last_user_id};
  if (absl::Status s =
          internal::check_user_balances(conn, options_.schema, users_sql, params, check);
      !s.ok()) {
    return s;
  }
  report.users_checked += check.users_checked;
  report.accounts_checked += check.accounts_checked;
  report.last_user_id = check.last_user_id;
  for (BalanceMismatch& m : check.mismatches) report.mismatches.push_back(std::move(m));
  return find_duplicates(conn, users_sql, params, report);
}

absl::Status Reconciler::find_duplicates(Connection& conn, std::string_view users_sql,
                                         std::span<const Param> params,
                                         ReconcileReport& report) const {
  absl::StatusOr<Result> duplicates = conn.execute(
      with_users("WITH checked AS ({users}) "
                 "SELECT b.source_event_id, b.event_type, count(*) FROM {schema}.balance_events b "
                 "JOIN checked c ON c.id = b.user_id "
                 "GROUP BY b.source_event_id, b.event_type HAVING count(*) > 1 ORDER BY 1, 2",
                 users_sql, options_.schema),
      params);
  if (!duplicates.ok()) return duplicates.status();
  for (std::size_t i = 0; i < duplicates->rows.size(); ++i) {
    const Row row = duplicates->row(i);
    auto read = row.read<std::string, std::string, std::int64_t>();
    if (!read.ok()) return read.status();
    auto& [id, type, copies] = *read;
    report.duplicates.push_back(
        {.source_event_id = std::move(id), .event_type = std::move(type), .copies = copies});
  }
  return absl::OkStatus();
}

absl::Status Reconciler::find_imbalances(Connection& conn, ReconcileReport& report) const {
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedSnapshot);
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Result> r = conn.execute(options_.schema.qualify(
      "SELECT asset, sum(amount) FROM (SELECT asset, amount FROM {schema}.balance_events "
      "UNION ALL SELECT asset, amount FROM {schema}.system_entries) legs "
      "GROUP BY asset HAVING sum(amount) <> 0::numeric ORDER BY asset"));
  if (!r.ok()) return r.status();
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    auto read = r->row(i).read<std::string, Amount>();
    if (!read.ok()) return read.status();
    report.imbalances.push_back(
        {.asset = std::get<0>(*read), .sum = std::get<1>(*read).to_string()});
  }
  return tx->commit();
}

absl::Status Reconciler::finish(Connection& conn, std::string_view kind, absl::Time started,
                                const ReconcileReport& report) const {
  emit_log(options_.log, report.clean() ? LogLevel::kInfo : LogLevel::kError, "reconciliation", "",
           "",
           {{"kind", kind},
            {"users_checked", report.users_checked},
            {"mismatches", static_cast<std::int64_t>(report.mismatches.size())},
            {"duplicates", static_cast<std::int64_t>(report.duplicates.size())},
            {"took_ms", absl::ToInt64Milliseconds(absl::Now() - started)}});
  if (options_.metrics != nullptr) {
    (report.clean() ? options_.metrics->reconciliations_clean
                    : options_.metrics->reconciliations_with_findings)
        .Increment();
  }
  if (!report.clean()) {
    AlertSink& sink = alert_sink_or_default(options_.alerts);
    const std::string key = fmt::format("reconciliation_mismatch:{}", kind);
    std::string message = fmt::format(
        "reconciliation ({}): {} of {} accounts out of balance, {} duplicate ledger entries, {} "
        "assets not summing to zero",
        kind, report.mismatches.size(), report.accounts_checked, report.duplicates.size(),
        report.imbalances.size());
    for (std::size_t i = 0; i < std::min<std::size_t>(report.mismatches.size(), 10); ++i) {
      const BalanceMismatch& m = report.mismatches[i];
      message += fmt::format("; user {} {} has {} (held {}) expected {} (held {})", m.user_id,
                             m.asset, m.balance, m.held, m.expected, m.expected_held);
    }
    for (const AssetImbalance& a : report.imbalances) {
      message += fmt::format("; {} entries sum to {}", a.asset, a.sum);
    }
    sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
  }
  if (report.standby_lag) return absl::OkStatus();  // a standby cannot record the run
  const std::string started_text =
      absl::FormatTime(absl::RFC3339_full, started, absl::UTCTimeZone());
  return internal::execute_pinned(
             conn,
             options_.schema.qualify(
                 "INSERT INTO {schema}.reconciliation_runs "
                 "(kind, started_at, users_checked, mismatches, duplicates) "
                 "VALUES ($1, $2::timestamptz, $3::bigint, $4::bigint, $5::bigint)"),
             Params(kind, started_text, report.users_checked,
                    static_cast<std::int64_t>(report.mismatches.size() + report.imbalances.size()),
                    static_cast<std::int64_t>(report.duplicates.size())))
      .status();
}

absl::StatusOr<std::optional<absl::Duration>> standby_replay_lag(Connection& conn) {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      "SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL "
      "WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
      "ELSE (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000000.0)::bigint END");
  if (!r.ok()) return r.status();
  absl::StatusOr<Row> row = r->single_row("standby replay lag");
  if (!row.ok()) return row.status();
  absl::StatusOr<std::optional<std::int64_t>> us = row->get_optional<std::int64_t>(0);
  if (!us.ok()) return us.status();
  if (!*us) return std::optional<absl::Duration>();
  return std::optional<absl::Duration>(absl::Microseconds(std::max<std::int64_t>(**us, 0)));
}

absl::StatusOr<ReconcileReport> Reconciler::hot_path(Connection& conn,
                                                     absl::Duration window) const {
  const absl::Time started = absl::Now();
  absl::StatusOr<ReconcileReport> report_or = new_report(conn);
  if (!report_or.ok()) return report_or.status();
  ReconcileReport& report = *report_or;
  {
    absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedSnapshot);
    if (!tx.ok()) return tx.status();
    const Params params(window);
    const std::string touched = options_.schema.qualify(
        "SELECT user_id AS id FROM {schema}.balance_events "
        "WHERE created_at > now() - $1::double precision * interval '1 millisecond' "
        "UNION SELECT user_id FROM {schema}.holds "
        "WHERE updated_at > now() - $1::double precision * interval '1 millisecond'");
    if (absl::Status s = check_batch(conn, touched, params, report); !s.ok()) return s;
    if (absl::Status s = tx->commit(); !s.ok()) return s;
  }
  if (absl::Status s = finish(conn, "hot", started, report); !s.ok()) return s;
  return report_or;
}

absl::StatusOr<ReconcileReport> Reconciler::full(Connection& conn,
                                                 std::int64_t after_user_id) const {
  const absl::Time started = absl::Now();
  absl::StatusOr<ReconcileReport> report_or = new_report(conn);
  if (!report_or.ok()) return report_or.status();
  ReconcileReport& report = *report_or;
  report.last_user_id = after_user_id;
  const std::string batch_sql = options_.schema.qualify(
      "SELECT id FROM {schema}.users WHERE id > $1::bigint ORDER BY id LIMIT $2::bigint");
  Progress progress;
  if (options_.progress) {
    absl::StatusOr<Result> r = internal::execute_pinned(
        conn, options_.schema.qualify("SELECT count(*) FROM {schema}.users WHERE id > $1::bigint"),
        Params(after_user_id));
    if (!r.ok()) return r.status();
    absl::StatusOr<std::int64_t> total = read_single<std::int64_t>(*r, "users to check");
    if (!total.ok()) return total.status();
    progress.total = *total;
  }
  for (;;) {
    const std::int64_t checked_before = report.users_checked;
    const Params params(report.last_user_id, options_.batch_users);
    absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedSnapshot);
    if (!tx.ok()) return tx.status();
    if (absl::Status s = check_batch(conn, batch_sql, params, report); !s.ok()) return s;
    if (absl::Status s = tx->commit(); !s.ok()) return s;
    if (options_.progress) {
      progress.done = report.users_checked;
      options_.progress(progress);
    }
    if (report.users_checked - checked_before < options_.batch_users) break;
  }
  if (absl::Status s = find_imbalances(conn, report); !s.ok()) return s;
  if (absl::Status s = finish(conn, "full", started, report); !s.ok()) return s;
  return report_or;
}

}  // namespace idemledger
