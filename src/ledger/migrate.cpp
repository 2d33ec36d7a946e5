#include "idemledger/ledger/migrate.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "idemledger/core/connection.hpp"
#include "idemledger/core/event_status.hpp"
#include "idemledger/core/params.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/hold.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"
#include "src/ledger/internal/ddl_lock.hpp"

namespace idemledger {
namespace {

// Each migration is its own file and is never edited once released; a change
// to a function is a new migration that replaces it. migration_catalog()
// checksums each, and a test pins those checksums.
struct Migration {
  int version;
  std::string_view name;
  std::vector<std::string_view> statements;
};

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> all = {
      {1,
       "ledger",
       {
#include "src/ledger/migrations/0001_ledger.inc"
       }},
      {2,
       "dispatch",
       {
#include "src/ledger/migrations/0002_dispatch.inc"
       }},
      {3,
       "operations",
       {
#include "src/ledger/migrations/0003_operations.inc"
       }},
      {4,
       "replay_and_metrics",
       {
#include "src/ledger/migrations/0004_replay_and_metrics.inc"
       }},
      {5,
       "partitioning",
       {
#include "src/ledger/migrations/0005_partitioning.inc"
       }},
      {6,
       "circuit_breaker",
       {
#include "src/ledger/migrations/0006_circuit_breaker.inc"
       }},
      {7,
       "finality",
       {
#include "src/ledger/migrations/0007_finality.inc"
       }},
      {8,
       "relay",
       {
#include "src/ledger/migrations/0008_relay.inc"
       }},
      {9,
       "dead_letter_append",
       {
#include "src/ledger/migrations/0009_dead_letter_append.inc"
       }},
      {10,
       "assets_and_postings",
       {
#include "src/ledger/migrations/0010_assets_and_postings.inc"
       }},
      {11,
       "domain_rules",
       {
#include "src/ledger/migrations/0011_domain_rules.inc"
       }},
      {12,
       "hold_replay_race",
       {
#include "src/ledger/migrations/0012_hold_replay_race.inc"
       }},
      {13,
       "one_statement_credit",
       {
#include "src/ledger/migrations/0013_one_statement_credit.inc"
       }},
      {14,
       "batch_apply",
       {
#include "src/ledger/migrations/0014_batch_apply.inc"
       }},
      {15,
       "record_batch",
       {
#include "src/ledger/migrations/0015_record_batch.inc"
       }},
      {16,
       "one_notify_per_batch",
       {
#include "src/ledger/migrations/0016_one_notify_per_batch.inc"
       }},
      {17,
       "batch_hold_steps",
       {
#include "src/ledger/migrations/0017_batch_hold_steps.inc"
       }},
      {18,
       "user_keys_off_hot_path",
       {
#include "src/ledger/migrations/0018_user_keys_off_hot_path.inc"
       }},
      {19,
       "sweeper_lock_order",
       {
#include "src/ledger/migrations/0019_sweeper_lock_order.inc"
       }},
      {20,
       "set_based_queue",
       {
#include "src/ledger/migrations/0020_set_based_queue.inc"
       }},
      {21,
       "set_based_record",
       {
#include "src/ledger/migrations/0021_set_based_record.inc"
       }},
      {22,
       "pinned_search_path",
       {
#include "src/ledger/migrations/0022_pinned_search_path.inc"
       }},
      {23,
       "partitioned_system_legs",
       {
#include "src/ledger/migrations/0023_partitioned_system_legs.inc"
       }},
  };
  return all;
}

std::string checksum(const Migration& m) { return idempotency_key(m.statements); }

absl::Status check(const absl::StatusOr<Result>& r, std::string_view what) {
  if (r.ok()) return absl::OkStatus();
  return absl::Status(r.status().code(),
                      fmt::format("migrate: {}: {}", what, r.status().message()));
}

// Keeps a database copy of a state machine equal to the library's table, on
// every run: `edges` as (from, to, operator_only) texts into `table`.
struct Edges {
  ArrayText from, to, operator_only;
  template <typename S>
  void add(S f, S t, bool by_operator) {
    from.add(to_string(f));
    to.add(to_string(t));
    operator_only.add(by_operator);
  }
};

absl::Status copy_edges(Connection& conn, const Schema& schema, std::string_view table,
                        std::string_view columns, Edges edges, bool with_operator_flag) {
  if (absl::Status s =
          check(conn.execute(schema.qualify(fmt::format("DELETE FROM {{schema}}.{}", table))),
                fmt::format("clear {}", table));
      !s.ok()) {
    return s;
  }
  const std::string sql = schema.qualify(
      fmt::format("INSERT INTO {{schema}}.{} ({}) SELECT * FROM unnest($1::text[], $2::text[]{})",
                  table, columns, with_operator_flag ? ", $3::boolean[]" : ""));
  absl::StatusOr<Result> r =
      with_operator_flag
          ? conn.execute(sql, Params(std::move(edges.from).finish(), std::move(edges.to).finish(),
                                     std::move(edges.operator_only).finish()))
          : conn.execute(sql, Params(std::move(edges.from).finish(), std::move(edges.to).finish()));
  return check(r, fmt::format("fill {}", table));
}

// The event FSM (kValidTransitions, plus kOperatorTransitions marked
// operator_only) and, from version 10, the hold FSM (kHoldTransitions).
absl::Status sync_transitions(Connection& conn, const Schema& schema, int version) {
  Edges events;
  for (const auto& [f, t] : kValidTransitions) events.add(f, t, false);
  for (const auto& [f, t] : kOperatorTransitions) events.add(f, t, true);
  if (absl::Status s = copy_edges(conn, schema, "event_transitions",
                                  "from_status, to_status, operator_only", std::move(events), true);
      !s.ok()) {
    return s;
  }
  if (version < 10) return absl::OkStatus();
  Edges holds;
  for (const auto& [f, t] : kHoldTransitions) holds.add(f, t, false);
  return copy_edges(conn, schema, "hold_transitions", "from_state, to_state", std::move(holds),
                    false);
}

// Refuses a database whose recorded text of a version is not this library's;
// fills in checksums of versions applied before they were recorded.
absl::Status verify_checksums(Connection& conn, const Schema& schema, int current) {
  absl::StatusOr<Result> recorded = conn.execute(
      schema.qualify("SELECT version, checksum FROM {schema}.schema_migrations ORDER BY version"));
  if (absl::Status s = check(recorded, "read checksums"); !s.ok()) return s;
  for (std::size_t i = 0; i < recorded->rows.size(); ++i) {
    const Row row = recorded->row(i);
    absl::StatusOr<int> version = row.get<int>(0);
    absl::StatusOr<std::optional<std::string>> sum = row.get_optional<std::string>(1);
    if (!version.ok()) return version.status();
    if (!sum.ok()) return sum.status();
    if (*version < 1 || *version > current || *version > latest_schema_version()) continue;
    const std::string expected = checksum(migrations()[static_cast<std::size_t>(*version - 1)]);
    if (!*sum) {
      if (absl::Status s = check(conn.execute(schema.qualify("UPDATE {schema}.schema_migrations "
                                                             "SET checksum = $2 WHERE version = "
                                                             "$1::int"),
                                              Params(*version, expected)),
                                 "record checksum");
          !s.ok()) {
        return s;
      }
    } else if (**sum != expected) {
      return absl::FailedPreconditionError(fmt::format(
          "migrate: schema {} recorded migration {} with checksum {}, but this library's "
          "migration {} has checksum {}: the database was migrated by another text under the "
          "same number; refusing to build on it",
          schema.name(), *version, **sum, *version, expected));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int latest_schema_version() { return migrations().back().version; }

std::vector<MigrationInfo> migration_catalog() {
  std::vector<MigrationInfo> out;
  out.reserve(migrations().size());
  for (const Migration& m : migrations()) {
    out.push_back({.version = m.version, .name = m.name, .checksum = checksum(m)});
  }
  return out;
}

absl::StatusOr<int> current_schema_version(Connection& conn, const Schema& schema) {
  absl::StatusOr<Result> exists =
      internal::execute_pinned(conn, "SELECT to_regclass($1) IS NOT NULL",
                               Params(fmt::format("{}.schema_migrations", schema.name())));
  if (!exists.ok()) return exists.status();
  absl::StatusOr<bool> found = read_single<bool>(*exists, "to_regclass");
  if (!found.ok()) return found.status();
  if (!*found) return 0;
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn, schema.qualify("SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations"));
  if (!r.ok()) return r.status();
  return read_single<int>(*r, "schema version");
}

absl::Status migrate(Connection& conn, const Schema& schema) {
  return migrate(conn, MigrateOptions{.schema = schema});
}

absl::Status migrate(Connection& conn, const MigrateOptions& options) {
  const Schema& schema = options.schema;
  absl::StatusOr<AssetCode> default_asset = AssetCode::create(options.default_asset);
  if (!default_asset.ok()) return default_asset.status();
  if (options.default_asset_decimals < 0 || options.default_asset_decimals > Amount::kScale) {
    return absl::InvalidArgumentError(fmt::format(
        "migrate: default_asset_decimals must be 0..18, got {}", options.default_asset_decimals));
  }
  const int target = options.target_version > 0 ? options.target_version : latest_schema_version();
  if (target > latest_schema_version()) {
    return absl::InvalidArgumentError(fmt::format("migrate: no version {}", target));
  }
  // Its search_path is pinned (kBoundedTransaction), so every built-in the
  // DDL names (a default's now(), a cast) binds pg_catalog's, whatever the
  // caller's search_path holds (see migration 22).
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedTransaction);
  if (!tx.ok()) return tx.status();
  // Transaction-scoped, so nothing leaks into the session: what migration 10
  // reads when it creates the default asset.
  if (absl::Status s =
          check(conn.execute("SELECT pg_catalog.set_config('idemledger.default_asset', $1, true), "
                             "pg_catalog.set_config('idemledger.default_asset_decimals', $2, "
                             "true)",
                             Params(default_asset->code(), options.default_asset_decimals)),
                "settings");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = internal::lock_schema_ddl(conn, schema); !s.ok()) {
    return absl::Status(s.code(), fmt::format("migrate: advisory lock: {}", s.message()));
  }
  for (std::string_view ddl :
       {std::string_view("CREATE SCHEMA IF NOT EXISTS {schema}"),
        std::string_view(
            "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"),
        std::string_view(
            "ALTER TABLE {schema}.schema_migrations ADD COLUMN IF NOT EXISTS checksum text")}) {
    if (absl::Status s = check(conn.execute(schema.qualify(ddl)), "bootstrap"); !s.ok()) return s;
  }
  absl::StatusOr<int> current = current_schema_version(conn, schema);
  if (!current.ok()) return current.status();
  if (*current > latest_schema_version()) {
    return absl::FailedPreconditionError(
        fmt::format("migrate: schema {} is at version {}, newer than this library's {}",
                    schema.name(), *current, latest_schema_version()));
  }
  if (absl::Status s = verify_checksums(conn, schema, *current); !s.ok()) return s;
  for (const Migration& m : migrations()) {
    if (m.version <= *current || m.version > target) continue;
    for (std::string_view statement : m.statements) {
      if (absl::Status s =
              check(conn.execute(schema.qualify(statement)), fmt::format("version {}", m.version));
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = check(conn.execute(schema.qualify("INSERT INTO {schema}.schema_migrations "
                                                           "(version, checksum) VALUES ($1, $2)"),
                                            Params(m.version, checksum(m))),
                               "record version");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = sync_transitions(conn, schema, std::max(*current, target)); !s.ok()) {
    return s;
  }
  return tx->commit();
}

}  // namespace idemledger
