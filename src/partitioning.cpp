#include "idemledger/partitioning.hpp"

#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "src/internal/ddl_lock.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {
namespace {

// Runs `SELECT {schema}.<function>($1::int)` and reads its integer answer.
absl::StatusOr<int> call_counting(Connection& conn, const PartitioningOptions& options,
                                  std::string_view function) {
  if (absl::Status s = internal::validate_identifier("schema", options.schema); !s.ok()) return s;
  if (options.months_ahead < 0 || options.months_ahead > 120) {
    return absl::InvalidArgumentError(
        fmt::format("months_ahead must be in [0, 120], got {}", options.months_ahead));
  }
  absl::StatusOr<Transaction> tx = Transaction::begin(conn);
  if (!tx.ok()) return tx.status();
  if (absl::Status s = internal::lock_schema_ddl(conn, options.schema); !s.ok()) return s;
  const std::string months = std::to_string(options.months_ahead);
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema(fmt::format("SELECT {{schema}}.{}($1::int)", function), options.schema),
      {Param(months)});
  if (!r.ok()) return r.status();
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  int n = 0;
  if (!absl::SimpleAtoi(r->at(0, 0).value_or(""), &n)) {
    return absl::InternalError(fmt::format("{} answered no count", function));
  }
  return n;
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

absl::StatusOr<bool> is_partitioned(Connection& conn, std::string_view schema) {
  if (absl::Status s = internal::validate_identifier("schema", schema); !s.ok()) return s;
  absl::StatusOr<Result> r =
      conn.execute(internal::with_schema("SELECT {schema}.is_partitioned()", schema));
  if (!r.ok()) return r.status();
  return r->at(0, 0) == "t";
}

}  // namespace idemledger
