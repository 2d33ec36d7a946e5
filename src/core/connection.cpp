#include "idemledger/core/connection.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "idemledger/core/schema.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {

namespace {

// Runs `work` inside the caller's transaction, or, when there is none,
// inside one of its own: BEGIN, then COMMIT if `work` succeeded, else
// ROLLBACK.
absl::StatusOr<Result> in_a_transaction(Connection& conn,
                                        absl::FunctionRef<absl::StatusOr<Result>()> work) {
  const bool own_transaction = !conn.in_transaction();
  if (own_transaction) {
    if (absl::StatusOr<Result> begin = conn.execute("BEGIN"); !begin.ok()) return begin.status();
  }
  absl::StatusOr<Result> answer = work();
  if (own_transaction) {
    if (!answer.ok()) {
      (void)conn.execute("ROLLBACK");
    } else if (absl::StatusOr<Result> commit = conn.execute("COMMIT"); !commit.ok()) {
      return commit.status();
    }
  }
  return answer;
}

}  // namespace

absl::StatusOr<Result> Connection::execute_atomically(std::span<const Statement> statements) {
  return in_a_transaction(*this, [&]() -> absl::StatusOr<Result> {
    absl::StatusOr<Result> last;
    for (const Statement& statement : statements) {
      last = execute(statement.sql, statement.params);
      if (!last.ok()) break;
    }
    return last;
  });
}

absl::StatusOr<Result> Connection::execute_atomically_then(std::span<const Statement> statements,
                                                           std::span<const Statement> then) {
  if (then.empty()) return execute_atomically(statements);
  return in_a_transaction(*this, [&]() -> absl::StatusOr<Result> {
    absl::StatusOr<Result> answer = execute_atomically(statements);  // joins the block
    for (const Statement& statement : then) {
      if (!answer.ok()) break;
      if (absl::StatusOr<Result> r = execute(statement.sql, statement.params); !r.ok()) {
        answer = r.status();
      }
    }
    return answer;
  });
}

absl::StatusOr<Result> Connection::open_transaction(std::string_view begin_sql,
                                                    std::span<const Statement> then) {
  absl::StatusOr<Result> last = execute(begin_sql);
  for (const Statement& statement : then) {
    if (!last.ok()) break;
    last = execute(statement.sql, statement.params);
  }
  return last;
}

namespace internal {

absl::StatusOr<Result> execute_with_settings(Connection& conn, const StatementSettings& settings,
                                             std::string_view sql, std::span<const Param> params) {
  if (!conn.in_transaction()) {
    // The settings end with the batch's own commit.
    const std::array<Statement, 2> batch = {Statement{settings.set, settings.params},
                                            Statement{sql, params}};
    return conn.execute_atomically(batch);
  }
  // Joining the caller's transaction: its own values come back after the
  // statement, in the same round trip.
  const std::array<Statement, 3> batch = {Statement{settings.keep, {}},
                                          Statement{settings.set, settings.params},
                                          Statement{sql, params}};
  const std::array<Statement, 1> then = {Statement{settings.restore, {}}};
  return conn.execute_atomically_then(batch, then);
}

absl::StatusOr<Result> execute_pinned(Connection& conn, std::string_view sql,
                                      std::span<const Param> params) {
  static constexpr StatementSettings kPinned = {
      .set = kPinSearchPathSql,
      .params = {},
      .keep =
          "SELECT pg_catalog.set_config('idemledger.callers_search_path', "
          "pg_catalog.current_setting('search_path'), true)",
      .restore =
          "SELECT pg_catalog.set_config('search_path', "
          "pg_catalog.current_setting('idemledger.callers_search_path'), true)"};
  return execute_with_settings(conn, kPinned, sql, params);
}

}  // namespace internal

absl::StatusOr<bool> Connection::wait_for_notification(absl::Duration timeout) {
  absl::SleepFor(timeout);
  return false;
}

namespace {

std::string_view begin_sql(IsolationLevel level) {
  switch (level) {
    case IsolationLevel::kReadCommitted:
      break;
    case IsolationLevel::kRepeatableRead:
      return "BEGIN ISOLATION LEVEL REPEATABLE READ";
    case IsolationLevel::kSerializable:
      return "BEGIN ISOLATION LEVEL SERIALIZABLE";
  }
  return "BEGIN";
}

// The lower of the limit ($1, milliseconds) and the session's own setting
// (0 = none; current_setting() shows it with a unit, "30s", "1min", which
// interval input reads). It runs under the caller's search_path, so every
// operator has pg_catalog's exact argument types (numeric * numeric, not
// numeric * integer): a function of a schema on that path cannot win the
// overload (docs/schema.md, "Names inside the functions").
constexpr std::string_view kIdleLimitSql =
    "SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', "
    "LEAST($1::bigint, NULLIF((extract(epoch FROM "
    "pg_catalog.current_setting('idle_in_transaction_session_timeout')::interval) * 1000.0)"
    "::bigint, 0::bigint))::text, true)";

}  // namespace

absl::StatusOr<Transaction> Transaction::begin(Connection& conn, IsolationLevel level) {
  return begin(conn, TransactionOptions{.isolation = level});
}

absl::StatusOr<Transaction> Transaction::begin(Connection& conn,
                                               const TransactionOptions& options) {
  if (conn.in_transaction()) {
    // A BEGIN there is only a warning, and this scope's COMMIT or ROLLBACK
    // would end the caller's transaction with it.
    return absl::FailedPreconditionError(
        "a transaction cannot begin inside another: the connection is already in one, whose "
        "work this scope's commit or rollback would end; call it outside a transaction");
  }
  const absl::Duration limit = options.idle_limit;
  if (limit < absl::ZeroDuration() || limit > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        "a transaction's idle_limit must be between zero (none) and one hour");
  }
  // Rounded up: a positive limit must not become 0, which means none.
  const std::int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(limit, absl::Milliseconds(1)));
  const auto params = Params(ms);
  // The pin first: the idle limit's statement is then parsed under it.
  std::array<Statement, 2> settings;
  std::size_t n = 0;
  if (options.pin_search_path) settings[n++] = {internal::kPinSearchPathSql, {}};
  if (limit > absl::ZeroDuration()) settings[n++] = {kIdleLimitSql, params.span()};
  if (n == 0) {
    if (absl::StatusOr<Result> r = conn.execute(begin_sql(options.isolation)); !r.ok()) {
      return r.status();
    }
    return Transaction(conn);
  }
  if (absl::StatusOr<Result> r =
          conn.open_transaction(begin_sql(options.isolation), std::span(settings).first(n));
      !r.ok()) {
    if (conn.in_transaction()) (void)conn.execute("ROLLBACK");
    return r.status();
  }
  return Transaction(conn);
}

Transaction::Transaction(Transaction&& other) noexcept
    : conn_(other.conn_), active_(std::exchange(other.active_, false)) {}

Transaction::~Transaction() {
  if (active_) (void)rollback();
}

absl::Status Transaction::commit() {
  if (!active_) return absl::FailedPreconditionError("transaction is no longer active");
  active_ = false;
  return conn_->execute("COMMIT").status();
}

absl::Status Transaction::rollback() {
  if (!active_) return absl::OkStatus();
  active_ = false;
  return conn_->execute("ROLLBACK").status();
}

absl::Status Transaction::run_savepoint_command(std::string_view verb, std::string_view name) {
  if (!active_) return absl::FailedPreconditionError("transaction is no longer active");
  if (!internal::is_sql_identifier(name)) {
    return absl::InvalidArgumentError("savepoint name must match [a-z_][a-z0-9_]{0,62}");
  }
  return conn_->execute(fmt::format("{} {}", verb, name)).status();
}

absl::Status Transaction::savepoint(std::string_view name) {
  return run_savepoint_command("SAVEPOINT", name);
}
absl::Status Transaction::rollback_to(std::string_view name) {
  return run_savepoint_command("ROLLBACK TO SAVEPOINT", name);
}
absl::Status Transaction::release(std::string_view name) {
  return run_savepoint_command("RELEASE SAVEPOINT", name);
}

}  // namespace idemledger
