#include "idemledger/migrate.hpp"

#include <fmt/format.h>

#include <array>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "idemledger/event_status.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/ddl_lock.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {
namespace {

struct Migration {
  int version;
  std::vector<std::string_view> statements;
};

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> all = {
      {1,
       {
#include "src/migrations/0001_ledger.inc"
       }},
      {2,
       {
#include "src/migrations/0002_dispatch.inc"
       }},
      {3,
       {
#include "src/migrations/0003_operations.inc"
       }},
      {4,
       {
#include "src/migrations/0004_replay_and_metrics.inc"
       }},
      {5,
       {
#include "src/migrations/0005_partitioning.inc"
       }},
      {6,
       {
#include "src/migrations/0006_circuit_breaker.inc"
       }},
      {7,
       {
#include "src/migrations/0007_finality.inc"
       }},
      {8,
       {
#include "src/migrations/0008_relay.inc"
       }},
  };
  return all;
}

absl::Status check(const absl::StatusOr<Result>& r, std::string_view what) {
  if (r.ok()) return absl::OkStatus();
  return absl::Status(r.status().code(),
                      fmt::format("migrate: {}: {}", what, r.status().message()));
}

// Keeps the database's copy of the FSM equal to kValidTransitions plus
// kOperatorTransitions (marked operator_only), on every run.
absl::Status sync_transitions(Connection& conn, std::string_view schema) {
  std::string from = "{", to = "{", operator_only = "{";
  const auto add = [&](EventStatus f, EventStatus t, bool by_operator) {
    const char* sep = from.size() > 1 ? "," : "";
    fmt::format_to(std::back_inserter(from), "{}{}", sep, to_string(f));
    fmt::format_to(std::back_inserter(to), "{}{}", sep, to_string(t));
    fmt::format_to(std::back_inserter(operator_only), "{}{}", sep, by_operator);
  };
  for (const auto& [f, t] : kValidTransitions) add(f, t, false);
  for (const auto& [f, t] : kOperatorTransitions) add(f, t, true);
  from += "}";
  to += "}";
  operator_only += "}";
  if (absl::Status s = check(
          conn.execute(internal::with_schema("DELETE FROM {schema}.event_transitions", schema)),
          "clear event_transitions");
      !s.ok()) {
    return s;
  }
  return check(conn.execute(internal::with_schema(
                                "INSERT INTO {schema}.event_transitions "
                                "(from_status, to_status, operator_only) "
                                "SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[])",
                                schema),
                            {Param(from), Param(to), Param(operator_only)}),
               "fill event_transitions");
}

}  // namespace

int latest_schema_version() { return migrations().back().version; }

absl::StatusOr<int> current_schema_version(Connection& conn, std::string_view schema) {
  if (absl::Status s = internal::validate_identifier("schema", schema); !s.ok()) return s;
  absl::StatusOr<Result> exists = conn.execute(
      "SELECT to_regclass($1) IS NOT NULL", {Param(fmt::format("{}.schema_migrations", schema))});
  if (!exists.ok()) return exists.status();
  if (exists->at(0, 0) != "t") return 0;
  absl::StatusOr<Result> r = conn.execute(internal::with_schema(
      "SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations", schema));
  if (!r.ok()) return r.status();
  int version = 0;
  if (!absl::SimpleAtoi(*r->at(0, 0), &version)) return absl::InternalError("bad schema version");
  return version;
}

absl::Status migrate(Connection& conn, std::string_view schema) {
  if (absl::Status s = internal::validate_identifier("schema", schema); !s.ok()) return s;
  absl::StatusOr<Transaction> tx = Transaction::begin(conn);
  if (!tx.ok()) return tx.status();
  if (absl::Status s = internal::lock_schema_ddl(conn, schema); !s.ok()) {
    return absl::Status(s.code(), fmt::format("migrate: advisory lock: {}", s.message()));
  }
  for (std::string_view ddl :
       {std::string_view("CREATE SCHEMA IF NOT EXISTS {schema}"),
        std::string_view(
            "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")}) {
    if (absl::Status s = check(conn.execute(internal::with_schema(ddl, schema)), "bootstrap");
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<int> current = current_schema_version(conn, schema);
  if (!current.ok()) return current.status();
  if (*current > latest_schema_version()) {
    return absl::FailedPreconditionError(
        fmt::format("migrate: schema {} is at version {}, newer than this library's {}", schema,
                    *current, latest_schema_version()));
  }
  for (const Migration& m : migrations()) {
    if (m.version <= *current) continue;
    for (std::string_view statement : m.statements) {
      if (absl::Status s = check(conn.execute(internal::with_schema(statement, schema)),
                                 fmt::format("version {}", m.version));
          !s.ok()) {
        return s;
      }
    }
    const std::string version = fmt::format("{}", m.version);
    if (absl::Status s =
            check(conn.execute(
                      internal::with_schema(
                          "INSERT INTO {schema}.schema_migrations (version) VALUES ($1)", schema),
                      {Param(version)}),
                  "record version");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = sync_transitions(conn, schema); !s.ok()) return s;
  return tx->commit();
}

}  // namespace idemledger
