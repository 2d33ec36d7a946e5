// idemledger/migrate.hpp — versioned schema migrations.
//
//   absl::Status s = idemledger::migrate(conn, "idemledger");
//
// Creates (or upgrades) the ledger's tables, indexes and server-side functions
// in `schema`. Idempotent; safe to run from many processes at once (each run
// holds a transaction-scoped advisory lock, and each version is applied in the
// same transaction that records it in schema_migrations).
// REQUIRES: `schema` matches [a-z_][a-z0-9_]{0,62}.
#ifndef IDEMLEDGER_MIGRATE_HPP
#define IDEMLEDGER_MIGRATE_HPP

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace idemledger {

class Connection;

inline constexpr std::string_view kDefaultSchema = "idemledger";

[[nodiscard]] absl::Status migrate(Connection& conn, std::string_view schema = kDefaultSchema);

// The highest migration version this library knows.
[[nodiscard]] int latest_schema_version();

// The version recorded in `schema` (0 if never migrated).
[[nodiscard]] absl::StatusOr<int> current_schema_version(Connection& conn,
                                                         std::string_view schema = kDefaultSchema);

}  // namespace idemledger

#endif  // IDEMLEDGER_MIGRATE_HPP
