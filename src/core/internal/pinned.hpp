// Statements the library runs on a caller's session, parsed under a
// search_path of the library's own.
//
// PostgreSQL resolves every unqualified function, operator and type name of
// a statement under the session's search_path when it parses it. A schema on
// that path another role can create objects in (public, on a database
// created before PostgreSQL 15) wins any overload whose argument types it
// matches more exactly than pg_catalog does, and, listed before pg_catalog,
// every name at all (now(), =, text): its code would run inside the
// library's statement with the caller's rights. So a statement of the
// library that names a built-in runs after search_path = pg_catalog,
// pg_temp, set transaction-scoped (a pooled or PgBouncer-shared session keeps
// its own), in the same round trip with the libpq adapter:
//
//   - outside a transaction: the setting and the statement as one
//     transaction of their own (execute_atomically); all or nothing, as the
//     statement alone was. A connection lost before the outcome is known
//     yields commit_in_doubt(), as it did for the statement alone.
//   - inside the caller's transaction: the caller's own value is kept aside
//     before and put back after, so its later statements mean what they did.
//
// It costs one more statement in the round trip (~5-15 us at one client).
// Statements inside a transaction the library opened with
// TransactionOptions::pin_search_path need none of this; nor do those that
// only call one of the schema's functions (each pins its own, migration 22)
// with arguments uncast or of keyword types (bigint, int, numeric) or
// qualified ones (pg_catalog.text), nor those on a per-message path written
// with pg_catalog's names qualified (the relay's delivery mark). The
// ledger's calls set their timeouts the same way (execute_with_settings).
//
// Thread-compatible, as Connection is.
#ifndef IDEMLEDGER_SRC_CORE_INTERNAL_PINNED_HPP
#define IDEMLEDGER_SRC_CORE_INTERNAL_PINNED_HPP

#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "idemledger/core/connection.hpp"

namespace idemledger::internal {

// The setting itself. Parsed under the caller's search_path like every
// statement, so it names its function qualified.
inline constexpr std::string_view kPinSearchPathSql =
    "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)";

// Settings a statement runs under, transaction-scoped: `set` (with
// `params`) before it; inside a caller's transaction, `keep` before `set`
// and `restore` after the statement, which put the caller's values back.
struct StatementSettings {
  std::string_view set;
  std::span<const Param> params;
  std::string_view keep;
  std::string_view restore;
};

// Runs `sql` with `params` under `settings`, in one round trip with the
// libpq adapter; answers the statement's result.
[[nodiscard]] absl::StatusOr<Result> execute_with_settings(Connection& conn,
                                                           const StatementSettings& settings,
                                                           std::string_view sql,
                                                           std::span<const Param> params);

// Runs `sql` with `params` under search_path = pg_catalog, pg_temp.
[[nodiscard]] absl::StatusOr<Result> execute_pinned(Connection& conn, std::string_view sql,
                                                    std::span<const Param> params = {});

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_CORE_INTERNAL_PINNED_HPP
