// idemledger/ops/cleanup.hpp — keep processed_events from growing forever.
//
//   absl::StatusOr<CleanupReport> r = idemledger::cleanup_idempotency_records(
//       conn, {.schema = "idemledger", .ttl = absl::Hours(24 * 30)});
//
// Deletes idempotency records whose outcome is final (success,
// insufficient_funds) and older than `ttl`, in batches that skip rows another
// transaction holds (FOR UPDATE SKIP LOCKED) and pause in between, so the
// ledger keeps its throughput. Never a `pending` record: that one may belong
// to a transaction in flight.
//
// On a partitioned schema (partitioning.hpp) whole months older than `ttl`
// with no `pending` record are dropped first.
//
// Why this is safe: a replay after cleanup still cannot apply twice — the
// ledger checks the event's status (confirmed/failed) and, if that row is
// gone too, the UNIQUE (source_event_id, event_type) on balance_events
// refuses the second entry (tested).
//
// Thread-safe; run it from one place at a time or from many (SKIP LOCKED).
#ifndef IDEMLEDGER_OPS_CLEANUP_HPP
#define IDEMLEDGER_OPS_CLEANUP_HPP

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/progress.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

// The shortest TTL cleanup accepts. Records younger than this are what makes a
// redelivery within the hour cheap to answer; removing them earlier would
// still apply nothing twice (the guards below hold) but would send every
// late duplicate down the slower path.
inline constexpr absl::Duration kMinIdempotencyTtl = absl::Hours(1);

struct CleanupOptions {
  Schema schema = kDefaultSchema;
  absl::Duration ttl = absl::Hours(24 * 30);
  std::int64_t batch_size = 1000;
  absl::Duration pause = absl::Milliseconds(50);  // between batches
  std::int64_t max_batches = 0;                   // 0 = until nothing is left
  // After each batch: records deleted of those expired at the start (counted
  // only when a callback is given: one scan of the table).
  ProgressFn progress;
};

struct CleanupReport {
  std::int64_t deleted = 0;
  std::int64_t batches = 0;
  std::int64_t partitions_dropped = 0;  // whole months (partitioning.hpp)
};

// cleanup_idempotency_records()
//
// kInvalidArgument for a ttl under kMinIdempotencyTtl or a batch_size < 1.
[[nodiscard]] absl::StatusOr<CleanupReport> cleanup_idempotency_records(
    Connection& conn, const CleanupOptions& options);

}  // namespace idemledger

#endif  // IDEMLEDGER_OPS_CLEANUP_HPP
