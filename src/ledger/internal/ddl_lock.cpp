#include "src/ledger/internal/ddl_lock.hpp"

#include "idemledger/core/connection.hpp"

namespace idemledger::internal {

absl::Status lock_schema_ddl(Connection& conn, const Schema& schema) {
  // Lock key (class, object): the class spells "idml"; the object is the
  // schema's hash, so changes to different schemas do not serialise.
  return conn
      .execute("SELECT pg_advisory_xact_lock(1768189292, hashtext($1))", Params(schema.name()))
      .status();
}

}  // namespace idemledger::internal
