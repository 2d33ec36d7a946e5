// The lock every schema change takes: migrations and partitioning conversions
// of one schema run one at a time, across processes.
#ifndef IDEMLEDGER_SRC_LEDGER_INTERNAL_DDL_LOCK_HPP
#define IDEMLEDGER_SRC_LEDGER_INTERNAL_DDL_LOCK_HPP

#include "absl/status/status.h"
#include "idemledger/core/schema.hpp"

namespace idemledger {
class Connection;
}

namespace idemledger::internal {

// Takes the transaction-scoped advisory lock of `schema` (released at commit
// or rollback). REQUIRES: inside a transaction on `conn`.
absl::Status lock_schema_ddl(Connection& conn, const Schema& schema);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_LEDGER_INTERNAL_DDL_LOCK_HPP
