// Faults the ledger must answer correctly: a commit whose acknowledgement is
// lost, lock contention, timeouts, a session killed by the server.
#include <thread>
#include <variant>

#include "gmock/gmock.h"
#include "idemledger/core/retry.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

// Commits for real, then reports the connection lost, as if the server's
// answer to the commit never arrived: once, for the first batch
// (execute_atomically, how the ledger applies) or the first single statement
// (execute, how open_account writes).
class LosesFirstCommitAck final : public ForwardingConnection {
 public:
  enum class Lose { kBatch, kStatement };
  LosesFirstCommitAck(Connection& real, Lose which) : ForwardingConnection(real), which_(which) {}
  using ForwardingConnection::execute;
  absl::StatusOr<Result> execute(std::string_view sql, std::span<const Param> params) override {
    return lose_if(Lose::kStatement, real_.execute(sql, params));
  }
  absl::StatusOr<Result> execute_atomically(std::span<const Statement> statements) override {
    return lose_if(Lose::kBatch, real_.execute_atomically(statements));
  }

 private:
  absl::StatusOr<Result> lose_if(Lose kind, absl::StatusOr<Result> r) {
    if (kind != which_ || lost_ || !r.ok()) return r;
    lost_ = true;
    absl::Status s = absl::UnavailableError("commit in doubt: connection lost");
    mark_commit_in_doubt(s);
    return s;
  }
  const Lose which_;
  bool lost_ = false;
};

using Fault = LedgerTest;

TEST_F(Fault, InDoubtCommit_RetryAnswersAlreadyAppliedAndCreditsOnce) {
  open_account(1, "0");
  LosesFirstCommitAck flaky(*conn_, LosesFirstCommitAck::Lose::kBatch);
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "25");
  std::vector<absl::Status> attempts;
  absl::StatusOr<Outcome> r = with_retries(RetryPolicy{}, [&] {
    absl::StatusOr<Outcome> attempt = ledger_->process_deposit(flaky, e);
    attempts.push_back(attempt.status());
    return attempt;
  });
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_TRUE(commit_in_doubt(attempts[0]));
  EXPECT_TRUE(is_retryable(attempts[0]));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Outcome::kAlreadyApplied) << "the first commit landed; the retry must say so";
  EXPECT_EQ(balance(1), "25");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events"), "confirmed");
}

// The same lost answer on a statement that is not keyed: running it again
// would do it twice, so with_retries() hands the in-doubt status back instead.
TEST_F(Fault, InDoubtCommit_OfAnUnkeyedCallIsAnsweredNotRetried) {
  exec("CREATE TABLE {schema}.tally (n int)");
  LosesFirstCommitAck flaky(*conn_, LosesFirstCommitAck::Lose::kStatement);
  int attempts = 0;
  const absl::Status s = with_retries(RetryPolicy{}, [&] {
    ++attempts;
    return flaky.execute(schema_.qualify("INSERT INTO {schema}.tally VALUES (1)")).status();
  });
  EXPECT_EQ(attempts, 1) << "running it again would insert a second row";
  EXPECT_TRUE(commit_in_doubt(s)) << s;
  EXPECT_FALSE(is_retryable(s));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.tally"), 1)
      << "the first try did land: the caller must look, as here";
}

// Opening an account is keyed by its content, so a lost answer is retried and
// the retry answers OK for the account the first try opened.
TEST_F(Fault, InDoubtCommit_OfOpenAccountIsRetriedAndAnswersOk) {
  LosesFirstCommitAck flaky(*conn_, LosesFirstCommitAck::Lose::kStatement);
  int attempts = 0;
  const absl::Status s = with_retries(RetryPolicy{}, [&] {
    ++attempts;
    return ledger_->open_account(flaky, 7, *Amount::parse("10"));
  });
  EXPECT_EQ(attempts, 2);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(balance(7), "10");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.accounts WHERE user_id = 7"), 1);
}

TEST_F(Fault, LockedUser_WithdrawalAnswersRetryableImmediately) {
  open_account(1, "100");
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR UPDATE");

  const absl::Time start = absl::Now();
  absl::StatusOr<Outcome> r =
      ledger_->process_withdrawal(*conn_, event("w_1", EventType::kWithdrawal, 1, "10"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "NOWAIT must not wait for lock_timeout";
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(sqlstate(r.status()), "55P03");
  EXPECT_TRUE(is_retryable(r.status()));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0) << "rolled back whole";

  ASSERT_TRUE(holder->execute("ROLLBACK").ok());
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, event("w_1", EventType::kWithdrawal, 1, "10")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "90");
}

TEST_F(Fault, LockedUser_DepositWaitsAtMostLockTimeout) {
  ledger_ = std::make_unique<Ledger>(options({.lock_timeout = absl::Milliseconds(200)}));
  open_account(1, "0");
  std::unique_ptr<pg::Connection> holder =
      hold_locks("UPDATE {schema}.accounts SET balance = balance WHERE user_id = 1");
  const absl::Time start = absl::Now();
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "1"));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(150));
  EXPECT_LT(waited, absl::Seconds(2));
  EXPECT_EQ(sqlstate(r.status()), "55P03");
  EXPECT_TRUE(is_retryable(r.status()));
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0);
}

TEST_F(Fault, StatementTimeoutInTheBatchIsEnforced) {
  // Lock wait longer than the statement timeout: the statement timeout fires,
  // proving the setting sent in the same pipeline applies to the apply.
  ledger_ = std::make_unique<Ledger>(
      options({.lock_timeout = absl::Seconds(30), .statement_timeout = absl::Milliseconds(300)}));
  open_account(1, "0");
  std::unique_ptr<pg::Connection> holder =
      hold_locks("UPDATE {schema}.accounts SET balance = balance WHERE user_id = 1");
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "1"));
  EXPECT_EQ(sqlstate(r.status()), "57014");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());
}

TEST_F(Fault, TimeoutsAreTransactionScoped) {
  open_account(1, "0");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "1")),
            Outcome::kApplied);
  // A PgBouncer-shared session must not keep our settings after the transaction.
  EXPECT_EQ(scalar("SHOW lock_timeout"), "0");
  EXPECT_EQ(scalar("SHOW statement_timeout"), "0");
}

TEST_F(Fault, SessionKilledByServer_IsRetryableAndMarkedBroken) {
  IDEMLEDGER_NEEDS_OWN_SESSION("pg_terminate_backend of its own backend");
  open_account(1, "0");
  std::unique_ptr<pg::Connection> victim = connect();
  const std::string pid = std::to_string(victim->backend_pid());
  ASSERT_EQ(scalar("SELECT pg_terminate_backend(" + pid + ")"), "t");
  absl::SleepFor(absl::Milliseconds(100));
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*victim, event("d_1", EventType::kDeposit, 1, "1"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(is_retryable(r.status())) << r.status();
  EXPECT_TRUE(connection_broken(r.status())) << r.status();
  EXPECT_TRUE(victim->is_broken());
  // A new session applies it exactly once.
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "1")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "1");
}

// The real libpq path: the server kills the session while the pipelined batch
// runs. The client cannot know whether the commit happened, so it must say
// "in doubt" (and here it did not happen).
TEST_F(Fault, SessionKilledMidPipeline_ReportsCommitInDoubt) {
  IDEMLEDGER_NEEDS_OWN_SESSION("pg_terminate_backend mid-pipeline");
  exec("CREATE TABLE {schema}.t (x int)");
  for (const bool host_transaction : {false, true}) {
    std::unique_ptr<pg::Connection> victim = connect();
    if (host_transaction) {
      ASSERT_TRUE(victim->execute("BEGIN").ok());
    }
    const std::string pid = std::to_string(victim->backend_pid());
    std::thread killer([&] {
      absl::SleepFor(absl::Milliseconds(300));
      std::unique_ptr<pg::Connection> admin = connect();
      (void)admin->execute("SELECT pg_terminate_backend(" + pid + ")");
    });
    const std::string insert = "INSERT INTO " + schema_name_ + ".t VALUES (1)";
    const Statement batch[] = {{insert, {}}, {"SELECT pg_sleep(5)", {}}};
    absl::StatusOr<Result> r = victim->execute_atomically(batch);
    killer.join();
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(connection_broken(r.status())) << r.status();
    EXPECT_EQ(commit_in_doubt(r.status()), !host_transaction)
        << "only a batch that would have committed at its Sync is in doubt: " << r.status();
    // An unkeyed batch in doubt must not simply run again (it may have
    // landed); one that died inside the host's transaction surely did not.
    EXPECT_EQ(is_retryable(r.status()), host_transaction) << r.status();
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.t"), 0);
  }
}

TEST_F(Fault, HostTransaction_DepositJoinsItAndRollsBackWithIt) {
  open_account(1, "0");
  ASSERT_TRUE(conn_->execute("BEGIN").ok());
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "3")),
            Outcome::kApplied);
  ASSERT_TRUE(conn_->execute("ROLLBACK").ok());
  EXPECT_EQ(balance(1), "0");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0);
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "3")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "3");
}

// Inside a host's transaction a call bounds its own statement with the
// ledger's timeouts and names built-ins under its own search_path, and the
// host's own values are back when it returns, for every kind of call: over
// the libpq adapter (the epilogue pipelined) and over a host's driver (the
// interface's default). tests/ledger/search_path_db_test.cpp shows what the
// search_path keeps out.
TEST_F(Fault, HostTransaction_KeepsTheCallersTimeoutsAndSearchPath) {
  open_account(1, "100");
  int round = 0;
  over_adapter_and_host_driver([&](Connection& c) {
    const std::string n = std::to_string(++round);
    ASSERT_TRUE(c.execute("BEGIN").ok());
    ASSERT_TRUE(c.execute("SET LOCAL lock_timeout = '1234ms'").ok());
    ASSERT_TRUE(c.execute("SET LOCAL statement_timeout = '56789ms'").ok());
    ASSERT_TRUE(c.execute("SET LOCAL search_path = public, pg_temp").ok());
    const auto expect_the_callers = [&](std::string_view after) {
      EXPECT_EQ(scalar("SHOW lock_timeout"), "1234ms") << "after " << after;
      EXPECT_EQ(scalar("SHOW statement_timeout"), "56789ms") << "after " << after;
      EXPECT_EQ(scalar("SHOW search_path"), "public, pg_temp") << "after " << after;
    };
    EXPECT_EQ(*ledger_->process_deposit(c, event("d_" + n, EventType::kDeposit, 1, "5")),
              Outcome::kApplied);
    expect_the_callers("a deposit");
    EXPECT_EQ(*ledger_->process_withdrawal(c, event("w_" + n, EventType::kWithdrawal, 1, "3")),
              Outcome::kApplied);
    expect_the_callers("a withdrawal");
    absl::StatusOr<HoldResult> held = ledger_->hold(
        c, {.event_id = "h_" + n, .user_id = 1, .amount = *Amount::parse("2"), .fee = Amount()});
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ(held->outcome, HoldOutcome::kApplied);
    expect_the_callers("a hold");
    const std::vector<LedgerStep> steps = {event("b_" + n, EventType::kDeposit, 1, "1"),
                                           PostRequest{.hold_id = "h_" + n}};
    absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> batch =
        ledger_->process_steps(c, steps);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), 2u);
    ASSERT_TRUE((*batch)[0].ok() && (*batch)[1].ok());
    EXPECT_EQ(std::get<Outcome>(*(*batch)[0]), Outcome::kApplied);
    EXPECT_EQ(std::get<HoldResult>(*(*batch)[1]).state, HoldState::kPosted);
    expect_the_callers("a batch");
    ASSERT_TRUE(c.execute("COMMIT").ok());
  });
  EXPECT_EQ(balance(1), "102");  // 100 + 2 x (5 - 3 + 1 - 2)
  EXPECT_EQ(scalar("SHOW lock_timeout"), "0");
  EXPECT_EQ(scalar("SHOW statement_timeout"), "0");
  EXPECT_EQ(scalar("SHOW search_path"), "\"$user\", public");
  expect_reconciled();
}

// The caller's own values are kept aside, not used for the call: a host that
// waits for locks without bound still gets the ledger's bound inside the call.
TEST_F(Fault, HostTransaction_TheCallIsBoundedByTheLedgersTimeouts) {
  ledger_ = std::make_unique<Ledger>(options({.lock_timeout = absl::Milliseconds(200)}));
  open_account(1, "0");
  std::unique_ptr<pg::Connection> holder =
      hold_locks("UPDATE {schema}.accounts SET balance = balance WHERE user_id = 1");
  ASSERT_TRUE(conn_->execute("BEGIN").ok());
  ASSERT_TRUE(conn_->execute("SET LOCAL lock_timeout = 0").ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(sqlstate(r.status()), "55P03") << r.status();
  EXPECT_TRUE(is_retryable(r.status()));
  ASSERT_TRUE(conn_->execute("ROLLBACK").ok());
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0);
}

}  // namespace
}  // namespace idemledger::testing
