#include "idemledger/core/connection.hpp"

#include <fmt/format.h>

#include "absl/time/clock.h"
#include "idemledger/core/schema.hpp"
#include "src/core/internal/absl_compat.hpp"

namespace idemledger {

absl::StatusOr<Result> Connection::execute_atomically(std::span<const Statement> statements) {
  const bool own_transaction = !in_transaction();
  if (own_transaction) {
    if (absl::StatusOr<Result> begin = execute("BEGIN"); !begin.ok()) return begin.status();
  }
  absl::StatusOr<Result> last;
  for (const Statement& statement : statements) {
    last = execute(statement.sql, statement.params);
    if (!last.ok()) {
      if (own_transaction) (void)execute("ROLLBACK");
      return last;
    }
  }
  if (own_transaction) {
    if (absl::StatusOr<Result> commit = execute("COMMIT"); !commit.ok()) return commit.status();
  }
  return last;
}

absl::StatusOr<bool> Connection::wait_for_notification(absl::Duration timeout) {
  absl::SleepFor(timeout);
  return false;
}

absl::StatusOr<Transaction> Transaction::begin(Connection& conn, IsolationLevel level) {
  std::string_view sql = "BEGIN";
  switch (level) {
    case IsolationLevel::kReadCommitted:
      break;
    case IsolationLevel::kRepeatableRead:
      sql = "BEGIN ISOLATION LEVEL REPEATABLE READ";
      break;
    case IsolationLevel::kSerializable:
      sql = "BEGIN ISOLATION LEVEL SERIALIZABLE";
      break;
  }
  if (absl::StatusOr<Result> r = conn.execute(sql); !r.ok()) return r.status();
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
