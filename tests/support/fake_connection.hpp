// A Connection with scripted answers, for tests of database-facing logic
// that needs no database: the relay's decisions, the dispatcher's, typed
// reads of what a server answers. Every call is recorded. BEGIN, COMMIT,
// ROLLBACK and the settings the library makes around a statement
// (SELECT pg_catalog.set_config(...)) answer an empty result by themselves.
//
//   FakeConnection conn;
//   conn.on("claim_events", FakeConnection::rows({{"evt_1", "7", "5", "deposit", "0", {}, "10"}}));
//   conn.on("retry_event", FakeConnection::rows({{"retry_scheduled"}}));
//   ... code under test ...
//   EXPECT_THAT(conn.statements(), ElementsAre(HasSubstr("claim_events"), ...));
#ifndef IDEMLEDGER_TESTS_SUPPORT_FAKE_CONNECTION_HPP
#define IDEMLEDGER_TESTS_SUPPORT_FAKE_CONNECTION_HPP

#include <optional>
#include <string>
#include <vector>

#include "idemledger/core/connection.hpp"

namespace idemledger::testing {

class FakeConnection : public Connection {
 public:
  using Rows = std::vector<std::vector<std::optional<std::string>>>;

  // A result of these rows (text values; nullopt is NULL).
  static Result rows(Rows rows, std::int64_t affected_rows = 0);

  // Answers every statement containing `sql_fragment` with `answer`, until a
  // later rule for the same fragment replaces it. Rules are tried newest first.
  FakeConnection& on(std::string sql_fragment, absl::StatusOr<Result> answer);

  struct Call {
    std::string sql;
    std::vector<std::optional<std::string>> params;
  };
  [[nodiscard]] const std::vector<Call>& calls() const { return calls_; }
  [[nodiscard]] std::vector<std::string> statements() const;
  // The parameters of the last call whose SQL contains `sql_fragment`.
  [[nodiscard]] std::vector<std::optional<std::string>> params_of(
      std::string_view sql_fragment) const;

  using Connection::execute;
  absl::StatusOr<Result> execute(std::string_view sql, std::span<const Param> params) override;
  [[nodiscard]] bool in_transaction() const override { return in_transaction_; }

 private:
  struct Rule {
    std::string fragment;
    absl::StatusOr<Result> answer;
  };
  std::vector<Rule> rules_;
  std::vector<Call> calls_;
  bool in_transaction_ = false;
};

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_SUPPORT_FAKE_CONNECTION_HPP
