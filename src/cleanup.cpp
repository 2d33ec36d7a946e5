#include "idemledger/cleanup.hpp"

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "idemledger/connection.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {

absl::StatusOr<CleanupReport> cleanup_idempotency_records(Connection& conn,
                                                          const CleanupOptions& options) {
  if (absl::Status s = internal::validate_identifier("schema", options.schema); !s.ok()) return s;
  const std::string sql = internal::with_schema(
      "WITH victims AS ("
      "  SELECT p.idempotency_key FROM {schema}.processed_events p"
      "   WHERE p.outcome IN ('success', 'insufficient_funds')"
      "     AND p.created_at < now() - $1::bigint * interval '1 millisecond'"
      "   ORDER BY p.created_at LIMIT $2::bigint"
      "   FOR UPDATE SKIP LOCKED) "
      "DELETE FROM {schema}.processed_events d USING victims v "
      "WHERE d.idempotency_key = v.idempotency_key",
      options.schema);
  const std::string ttl_ms = std::to_string(absl::ToInt64Milliseconds(options.ttl));
  const std::string batch = std::to_string(options.batch_size);
  CleanupReport report;
  // Partitioned: whole months past the TTL go at once; the batches below then
  // find only the younger rows.
  absl::StatusOr<Result> dropped = conn.execute(
      internal::with_schema("SELECT {schema}.drop_expired_idempotency_partitions($1::bigint)",
                            options.schema),
      {Param(ttl_ms)});
  if (!dropped.ok()) return dropped.status();
  (void)absl::SimpleAtoi(dropped->at(0, 0).value_or("0"), &report.partitions_dropped);
  for (;;) {
    absl::StatusOr<Result> r = conn.execute(sql, {Param(ttl_ms), Param(batch)});
    if (!r.ok()) return r.status();
    ++report.batches;
    report.deleted += r->affected_rows;
    if (r->affected_rows < options.batch_size) break;
    if (options.max_batches > 0 && report.batches >= options.max_batches) break;
    absl::SleepFor(options.pause);
  }
  return report;
}

}  // namespace idemledger
