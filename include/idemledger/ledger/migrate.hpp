// idemledger/ledger/migrate.hpp — versioned schema migrations.
//
//   absl::Status s = idemledger::migrate(conn, "idemledger");
//
// Creates (or upgrades) the library's tables, indexes and server-side
// functions in `schema`. Idempotent; safe to run from many processes at once
// (each run holds a transaction-scoped advisory lock, and all versions are
// applied in the transaction that records them in schema_migrations).
//
// Released migrations are immutable: each version's text is fixed, its
// checksum is recorded beside it, and migrate() refuses a database whose
// recorded checksum for a version differs from this library's
// (kFailedPrecondition naming the version): that database was migrated by a
// different text under the same number, and nothing later can be trusted to
// fit it.
//
// A Ledger of this library expects its schema at this library's latest
// version: run migrate() before the first call (a deploy step). A call whose
// SQL is newer than the schema fails, naming the missing function.
#ifndef IDEMLEDGER_LEDGER_MIGRATE_HPP
#define IDEMLEDGER_LEDGER_MIGRATE_HPP

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

struct MigrateOptions {
  Schema schema = kDefaultSchema;
  // The default asset the single-balance API uses — and, on an upgrade from
  // the one-balance model, the asset every existing balance and event is in.
  // Read only when that asset is created (the first migrate() that reaches
  // migration 10); later runs leave the registered default as it is.
  std::string default_asset = "DEFAULT";
  int default_asset_decimals = 18;
  // Stop after this version (0: the latest). For testing upgrades only.
  int target_version = 0;
};

[[nodiscard]] absl::Status migrate(Connection& conn, const MigrateOptions& options);
[[nodiscard]] absl::Status migrate(Connection& conn, const Schema& schema = kDefaultSchema);

// The highest migration version this library knows.
[[nodiscard]] int latest_schema_version();

// The version recorded in `schema` (0 if never migrated).
[[nodiscard]] absl::StatusOr<int> current_schema_version(Connection& conn,
                                                         const Schema& schema = kDefaultSchema);

// One migration as this library ships it.
struct MigrationInfo {
  int version;
  std::string_view name;
  // SHA-256 (hex) over the migration's statements, length-prefixed.
  std::string checksum;
};
[[nodiscard]] std::vector<MigrationInfo> migration_catalog();

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_MIGRATE_HPP
