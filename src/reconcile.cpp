#include "idemledger/reconcile.hpp"

#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {
namespace {

// Checks the users `users_sql` selects ($1.. as given): every row is one user
// with its balance, expected balance and whether they differ.
constexpr std::string_view kCheckSql =
    "WITH checked AS ({users}) "
    "SELECT u.id, u.balance::text, (u.initial_balance + coalesce(s.total, 0))::text, "
    "       u.balance <> u.initial_balance + coalesce(s.total, 0) "
    "FROM {schema}.users u JOIN checked c ON c.id = u.id "
    "LEFT JOIN LATERAL (SELECT sum(b.amount) AS total FROM {schema}.balance_events b "
    "                   WHERE b.user_id = u.id) s ON true "
    "ORDER BY u.id";

constexpr std::string_view kDuplicatesSql =
    "WITH checked AS ({users}) "
    "SELECT b.source_event_id, b.event_type, count(*) FROM {schema}.balance_events b "
    "JOIN checked c ON c.id = b.user_id "
    "GROUP BY b.source_event_id, b.event_type HAVING count(*) > 1 ORDER BY 1, 2";

std::string with_users(std::string_view sql, std::string_view users_sql, std::string_view schema) {
  std::string s(sql);
  s.replace(s.find("{users}"), 7, users_sql);
  return internal::with_schema(s, schema);
}

}  // namespace

Reconciler::Reconciler(ReconcilerOptions options)
    : options_(std::move(options)),
      schema_status_(internal::validate_identifier("schema", options_.schema)) {}

absl::Status Reconciler::check_batch(Connection& conn, std::string_view users_sql,
                                     std::span<const Param> params, ReconcileReport& report) const {
  absl::StatusOr<Result> users =
      conn.execute(with_users(kCheckSql, users_sql, options_.schema), params);
  if (!users.ok()) return users.status();
  for (const auto& row : users->rows) {
    ++report.users_checked;
    std::int64_t id = 0;
    (void)absl::SimpleAtoi(row[0].value_or("0"), &id);
    report.last_user_id = std::max(report.last_user_id, id);
    if (row[3] == "t") {
      report.mismatches.push_back(
          {.user_id = id, .balance = row[1].value_or(""), .expected = row[2].value_or("")});
    }
  }
  absl::StatusOr<Result> duplicates =
      conn.execute(with_users(kDuplicatesSql, users_sql, options_.schema), params);
  if (!duplicates.ok()) return duplicates.status();
  for (const auto& row : duplicates->rows) {
    DuplicateLedgerEntry d{.source_event_id = row[0].value_or(""),
                           .event_type = row[1].value_or("")};
    (void)absl::SimpleAtoi(row[2].value_or("0"), &d.copies);
    report.duplicates.push_back(std::move(d));
  }
  return absl::OkStatus();
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
        .increment();
  }
  if (!report.clean()) {
    AlertSink& sink = alert_sink_or_default(options_.alerts);
    const std::string key = fmt::format("reconciliation_mismatch:{}", kind);
    std::string message = fmt::format(
        "reconciliation ({}): {} of {} users out of balance, {} duplicate ledger entries", kind,
        report.mismatches.size(), report.users_checked, report.duplicates.size());
    for (std::size_t i = 0; i < std::min<std::size_t>(report.mismatches.size(), 10); ++i) {
      const BalanceMismatch& m = report.mismatches[i];
      message += fmt::format("; user {} has {} expected {}", m.user_id, m.balance, m.expected);
    }
    sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
  }
  const std::string started_text =
      absl::FormatTime(absl::RFC3339_full, started, absl::UTCTimeZone());
  const std::string users = std::to_string(report.users_checked);
  const std::string mismatches = std::to_string(report.mismatches.size());
  const std::string duplicates = std::to_string(report.duplicates.size());
  return conn
      .execute(
          internal::with_schema("INSERT INTO {schema}.reconciliation_runs "
                                "(kind, started_at, users_checked, mismatches, duplicates) "
                                "VALUES ($1, $2::timestamptz, $3::bigint, $4::bigint, $5::bigint)",
                                options_.schema),
          {Param(kind), Param(started_text), Param(users), Param(mismatches), Param(duplicates)})
      .status();
}

absl::StatusOr<ReconcileReport> Reconciler::hot_path(Connection& conn,
                                                     absl::Duration window) const {
  if (!schema_status_.ok()) return schema_status_;
  const absl::Time started = absl::Now();
  ReconcileReport report;
  {
    absl::StatusOr<Transaction> tx = Transaction::begin(conn, IsolationLevel::kRepeatableRead);
    if (!tx.ok()) return tx.status();
    const std::string window_ms = std::to_string(absl::ToInt64Milliseconds(window));
    const Param params[] = {Param(window_ms)};
    const std::string touched = internal::with_schema(
        "SELECT DISTINCT user_id AS id FROM {schema}.balance_events "
        "WHERE created_at > now() - $1::bigint * interval '1 millisecond'",
        options_.schema);
    if (absl::Status s = check_batch(conn, touched, params, report); !s.ok()) return s;
    if (absl::Status s = tx->commit(); !s.ok()) return s;
  }
  if (absl::Status s = finish(conn, "hot", started, report); !s.ok()) return s;
  return report;
}

absl::StatusOr<ReconcileReport> Reconciler::full(Connection& conn,
                                                 std::int64_t after_user_id) const {
  if (!schema_status_.ok()) return schema_status_;
  const absl::Time started = absl::Now();
  ReconcileReport report;
  report.last_user_id = after_user_id;
  const std::string batch_sql = internal::with_schema(
      "SELECT id FROM {schema}.users WHERE id > $1::bigint ORDER BY id LIMIT $2::bigint",
      options_.schema);
  const std::string limit = std::to_string(options_.batch_users);
  for (;;) {
    const std::int64_t checked_before = report.users_checked;
    const std::string after = std::to_string(report.last_user_id);
    const Param params[] = {Param(after), Param(limit)};
    absl::StatusOr<Transaction> tx = Transaction::begin(conn, IsolationLevel::kRepeatableRead);
    if (!tx.ok()) return tx.status();
    if (absl::Status s = check_batch(conn, batch_sql, params, report); !s.ok()) return s;
    if (absl::Status s = tx->commit(); !s.ok()) return s;
    if (report.users_checked - checked_before < options_.batch_users) break;
  }
  if (absl::Status s = finish(conn, "full", started, report); !s.ok()) return s;
  return report;
}

}  // namespace idemledger
