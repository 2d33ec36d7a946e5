#include "idemledger/ops/partitioning.hpp"

#include <fmt/format.h>

#include "idemledger/core/connection.hpp"
#include "src/ledger/internal/ddl_lock.hpp"

namespace idemledger {
namespace {

// Runs `SELECT {schema}.<function>($1::int)` and reads its integer answer.
absl::StatusOr<int> call_counting(Connection& conn, const PartitioningOptions& options,
                                  std::string_view function) {
  if (options.months_ahead < 0 || options.months_ahead > 120) {
    return absl::InvalidArgumentError(
        fmt::format("months_ahead must be in [0, 120], got {}", options.months_ahead));
  }
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedTransaction);
  if (!tx.ok()) return tx.status();
  if (absl::Status s = internal::lock_schema_ddl(conn, options.schema); !s.ok()) return s;
  absl::StatusOr<Result> r =
      conn.execute(options.schema.qualify(fmt::format("SELECT {{schema}}.{}($1::int)", function)),
                   Params(options.months_ahead));
  if (!r.ok()) return r.status();
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  return read_single<int>(*r, function);
}

}  // namespace

absl::StatusOr<int> enable_monthly_partitioning(Connection& conn,
                                                const PartitioningOptions& options) {
  return call_counting(conn, options, "enable_monthly_partitioning");
}

absl::StatusOr<int> ensure_monthly_partitions(Connection& conn,
                                              const PartitioningOptions& options) {
  return call_counting(conn, options, "ensure_monthly_partitions");
}

absl::StatusOr<bool> is_partitioned(Connection& conn, const Schema& schema) {
  absl::StatusOr<Result> r = conn.execute(schema.qualify("SELECT {schema}.is_partitioned()"));
  if (!r.ok()) return r.status();
  return read_single<bool>(*r, "is_partitioned");
}

}  // namespace idemledger
