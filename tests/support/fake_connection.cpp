#include "tests/support/fake_connection.hpp"

#include <fmt/format.h>

namespace idemledger::testing {

Result FakeConnection::rows(Rows rows, std::int64_t affected_rows) {
  Result r;
  r.rows = std::move(rows);
  r.affected_rows = affected_rows;
  return r;
}

FakeConnection& FakeConnection::on(std::string sql_fragment, absl::StatusOr<Result> answer) {
  rules_.push_back({std::move(sql_fragment), std::move(answer)});
  return *this;
}

std::vector<std::string> FakeConnection::statements() const {
  std::vector<std::string> out;
  for (const Call& c : calls_) out.push_back(c.sql);
  return out;
}

std::vector<std::optional<std::string>> FakeConnection::params_of(
    std::string_view sql_fragment) const {
  for (auto it = calls_.rbegin(); it != calls_.rend(); ++it) {
    if (it->sql.find(sql_fragment) != std::string::npos) return it->params;
  }
  return {};
}

absl::StatusOr<Result> FakeConnection::execute(std::string_view sql,
                                               std::span<const Param> params) {
  Call call{.sql = std::string(sql)};
  for (const Param& p : params) {
    call.params.push_back(p ? std::optional<std::string>(std::string(*p)) : std::nullopt);
  }
  calls_.push_back(std::move(call));
  if (sql == "BEGIN" || sql.starts_with("BEGIN ")) {
    in_transaction_ = true;
    return Result{};
  }
  if (sql == "COMMIT" || sql == "ROLLBACK") {
    in_transaction_ = false;
    return Result{};
  }
  // A transaction-scoped setting the library makes around its statements
  // (its search_path, its timeouts), whose answer nobody reads.
  if (sql.starts_with("SELECT pg_catalog.set_config(")) return Result{};
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (sql.find(it->fragment) != std::string_view::npos) return it->answer;
  }
  return absl::InternalError(fmt::format("FakeConnection: no answer scripted for: {}", sql));
}

}  // namespace idemledger::testing
