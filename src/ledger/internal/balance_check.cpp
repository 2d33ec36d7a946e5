#include "src/ledger/internal/balance_check.hpp"

#include <algorithm>
#include <string>

namespace idemledger::internal {

absl::Status check_user_balances(Connection& conn, const Schema& schema, std::string_view users_sql,
                                 std::span<const Param> params, BalanceCheck& into) {
  std::string sql = schema.qualify(
      "WITH checked AS ({users}) "
      "SELECT c.id, a.asset, a.balance, a.initial_balance + coalesce(e.total, 0), a.held, "
      "       coalesce(h.total, 0) "
      "FROM checked c LEFT JOIN {schema}.accounts a ON a.user_id = c.id "
      "LEFT JOIN LATERAL (SELECT sum(b.amount) AS total FROM {schema}.balance_events b "
      "                   WHERE b.user_id = a.user_id AND b.asset = a.asset) e ON true "
      "LEFT JOIN LATERAL (SELECT sum(o.amount + o.fee) AS total FROM {schema}.holds o "
      "                   WHERE o.user_id = a.user_id AND o.asset = a.asset "
      "                     AND o.state = 'held') h ON true "
      "ORDER BY c.id, a.asset");
  sql.replace(sql.find("{users}"), 7, users_sql);
  absl::StatusOr<Result> r = conn.execute(sql, params);
  if (!r.ok()) return r.status();
  std::int64_t previous_user = -1;
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    auto read = r->row(i)
                    .read<std::int64_t, std::optional<std::string>, std::optional<Amount>,
                          std::optional<Amount>, std::optional<Amount>, Amount>();
    if (!read.ok()) return read.status();
    const auto& [user, asset, balance, expected, held, expected_held] = *read;
    if (user != previous_user) ++into.users_checked;
    previous_user = user;
    into.last_user_id = std::max(into.last_user_id, user);
    if (!asset) continue;  // a user without accounts
    ++into.accounts_checked;
    if (balance != expected || held != expected_held) {
      into.mismatches.push_back({.user_id = user,
                                 .balance = balance ? balance->to_string() : "",
                                 .expected = expected ? expected->to_string() : "",
                                 .asset = *asset,
                                 .held = held ? held->to_string() : "",
                                 .expected_held = expected_held.to_string()});
    }
  }
  return absl::OkStatus();
}

}  // namespace idemledger::internal
