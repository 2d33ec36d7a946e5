// idemledger/ops/partitioning.hpp — optional monthly partitions for the ledger's
// three ever-growing tables, with the exactly-once guarantee intact.
//
//   idemledger::migrate(conn, "idemledger");
//   idemledger::enable_monthly_partitioning(conn, {.schema = "idemledger"});   // once
//   idemledger::ensure_monthly_partitions(conn, {.schema = "idemledger"});     // daily
//
// balance_events (the user legs), system_entries (the system legs) and
// processed_events become RANGE-partitioned, one partition per UTC month:
// the legs by created_at, the idempotency records by their `month`.
// PostgreSQL cannot keep a unique index across partitions, so:
// - the ledger's UNIQUE (source_event_id, event_type) moves to
//   balance_event_keys, an unpartitioned two-column table that a BEFORE INSERT
//   trigger fills in the same statement as the ledger row; a second entry is
//   refused exactly as before (SQLSTATE IL004: nothing applied, alert).
//   system_entries has no key of its own: its rows are written only beside
//   a user leg that passed that guard.
// - an idempotency key is unique within its month. A replay landing in a
//   later month is the "record cleaned up" case the ledger already answers
//   without touching a balance: the event's status, then balance_event_keys.
// Old idempotency months are dropped whole by cleanup_idempotency_records()
// (never one holding a `pending` record); ledger months, user and system
// legs alike, are kept. Do not detach one to archive it: its keys would stay
// (nothing in it could be applied again), but reconciliation sums every leg
// of an account, so each account the month touched would read as out of
// balance, and the system accounts' totals would move. Archiving needs a
// balance carried forward per account, which the schema does not have yet.
//
// A schema converted before migration 23 has its system legs unpartitioned:
// enable_monthly_partitioning() run once more converts them alone (the same
// locks, the same window), and check_health() warns until then
// (partitioning_incomplete).
//
// There is no default partition: a row for a month nobody created fails
// loudly. ensure_monthly_partitions() keeps months_ahead months ready and
// check_health() reports a missing next month.
//
// Functions are thread-safe in the sense of the database: conversions and
// migrations of one schema serialise on an advisory lock.
#ifndef IDEMLEDGER_OPS_PARTITIONING_HPP
#define IDEMLEDGER_OPS_PARTITIONING_HPP

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

struct PartitioningOptions {
  Schema schema = kDefaultSchema;
  int months_ahead = 3;  // besides the current month
};

// enable_monthly_partitioning()
//
// Converts the three tables in one transaction (creating a partition for
// every month that has rows, copying them, dropping the old tables). It holds
// ACCESS EXCLUSIVE locks on all three while it copies: run it at setup or in
// a maintenance window. Returns the partitions created; 0 if already done.
// REQUIRES: migrate() ran for the schema.
[[nodiscard]] absl::StatusOr<int> enable_monthly_partitioning(Connection& conn,
                                                              const PartitioningOptions& options);

// ensure_monthly_partitions()
//
// Creates the current month and the next months_ahead, where missing.
// Returns how many it created; 0 on an unpartitioned schema.
[[nodiscard]] absl::StatusOr<int> ensure_monthly_partitions(Connection& conn,
                                                            const PartitioningOptions& options);

// is_partitioned()
[[nodiscard]] absl::StatusOr<bool> is_partitioned(Connection& conn, const Schema& schema);

}  // namespace idemledger

#endif  // IDEMLEDGER_OPS_PARTITIONING_HPP
