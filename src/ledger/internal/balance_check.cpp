#include "src/ledger/internal/balance_check.hpp"

#include <algorithm>
#include <string>

namespace idemledger::internal {

absl::Status check_user_balances(Connection& conn, const Schema& schema, std::string_view users_sql,
                                 std::span<const Param> params, BalanceCheck& into) {
  std::string sql = schema.qualify(
      "WITH checked AS ({users}) "
      "SELECT u.id, u.balance, u.initial_balance + coalesce(s.total, 0) "
      "FROM {schema}.users u JOIN checked c ON c.id = u.id "
      "LEFT JOIN LATERAL (SELECT sum(b.amount) AS total FROM {schema}.balance_events b "
      "                   WHERE b.user_id = u.id) s ON true "
      "ORDER BY u.id");
  sql.replace(sql.find("{users}"), 7, users_sql);
  absl::StatusOr<Result> r = conn.execute(sql, params);
  if (!r.ok()) return r.status();
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    const Row row = r->row(i);
    auto read = row.read<std::int64_t, Amount, Amount>();
    if (!read.ok()) return read.status();
    auto& [user, balance, expected] = *read;
    ++into.users_checked;
    into.last_user_id = std::max(into.last_user_id, user);
    if (balance != expected) {
      into.mismatches.push_back(
          {.user_id = user, .balance = balance.to_string(), .expected = expected.to_string()});
    }
  }
  return absl::OkStatus();
}

}  // namespace idemledger::internal
