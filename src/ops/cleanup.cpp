#include "idemledger/ops/cleanup.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "absl/time/clock.h"
#include "idemledger/core/connection.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {
namespace {

// What may go: a final outcome older than the TTL ($1, in milliseconds).
constexpr std::string_view kExpired =
    " WHERE p.outcome IN ('success', 'insufficient_funds')"
    "   AND p.created_at < now() - $1::double precision * interval '1 millisecond'";

}  // namespace

absl::StatusOr<CleanupReport> cleanup_idempotency_records(Connection& conn,
                                                          const CleanupOptions& options) {
  if (options.ttl < kMinIdempotencyTtl || options.batch_size < 1) {
    return absl::InvalidArgumentError(
        fmt::format("cleanup: ttl must be at least {} and batch_size at least 1, got {} and {}",
                    absl::FormatDuration(kMinIdempotencyTtl), absl::FormatDuration(options.ttl),
                    options.batch_size));
  }
  const std::string sql = options.schema.qualify(
      "WITH victims AS (SELECT p.idempotency_key FROM {schema}.processed_events p" +
      std::string(kExpired) +
      "   ORDER BY p.created_at LIMIT $2::bigint"
      "   FOR UPDATE SKIP LOCKED) "
      "DELETE FROM {schema}.processed_events d USING victims v "
      "WHERE d.idempotency_key = v.idempotency_key");
  CleanupReport report;
  // Partitioned: whole months past the TTL go at once; the batches below then
  // find only the younger rows. One call of a pinned function (migration 22)
  // with a keyword type: nothing in it is named through the search_path.
  absl::StatusOr<Result> dropped = conn.execute(
      options.schema.qualify("SELECT {schema}.drop_expired_idempotency_partitions($1::bigint)"),
      Params(options.ttl));
  if (!dropped.ok()) return dropped.status();
  absl::StatusOr<std::int64_t> months = read_single<std::int64_t>(*dropped, "drop partitions");
  if (!months.ok()) return months.status();
  report.partitions_dropped = *months;
  Progress progress;
  if (options.progress) {
    absl::StatusOr<Result> r = internal::execute_pinned(
        conn,
        options.schema.qualify("SELECT count(*) FROM {schema}.processed_events p " +
                               std::string(kExpired)),
        Params(options.ttl));
    if (!r.ok()) return r.status();
    absl::StatusOr<std::int64_t> total = read_single<std::int64_t>(*r, "expired records");
    if (!total.ok()) return total.status();
    progress.total = *total;
  }
  for (;;) {
    absl::StatusOr<Result> r =
        internal::execute_pinned(conn, sql, Params(options.ttl, options.batch_size));
    if (!r.ok()) return r.status();
    ++report.batches;
    report.deleted += r->affected_rows;
    if (options.progress) {
      progress.done = report.deleted;
      options.progress(progress);
    }
    if (r->affected_rows < options.batch_size) break;
    if (options.max_batches > 0 && report.batches >= options.max_batches) break;
    absl::SleepFor(options.pause);
  }
  return report;
}

}  // namespace idemledger
