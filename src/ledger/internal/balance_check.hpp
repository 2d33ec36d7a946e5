// The one reconciliation check of accounts, used by
// Ledger::find_balance_mismatches() and by ops' Reconciler: for every account
// of the users selected, balance == initial_balance + SUM(its entries) and
// held == SUM(its open holds).
#ifndef IDEMLEDGER_SRC_LEDGER_INTERNAL_BALANCE_CHECK_HPP
#define IDEMLEDGER_SRC_LEDGER_INTERNAL_BALANCE_CHECK_HPP

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/ledger.hpp"

namespace idemledger::internal {

struct BalanceCheck {
  std::int64_t users_checked = 0;
  std::int64_t accounts_checked = 0;
  std::int64_t last_user_id = 0;  // the highest id checked
  std::vector<BalanceMismatch> mismatches;
};

// Checks the accounts of the users `users_sql` selects (a query returning a
// column `id`; $1.. bound to `params`), adding to `into`. REQUIRES: the
// caller holds the snapshot (REPEATABLE READ) the check must see.
absl::Status check_user_balances(Connection& conn, const Schema& schema, std::string_view users_sql,
                                 std::span<const Param> params, BalanceCheck& into);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_LEDGER_INTERNAL_BALANCE_CHECK_HPP
