#include "gmock/gmock.h"
#include "idemledger/ops/cleanup.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;

class Cleanup : public LedgerTest {
 protected:
  CleanupOptions cleanup_options(std::int64_t batch = 1000) {
    return {.schema = schema_,
            .ttl = absl::Hours(24),
            .batch_size = batch,
            .pause = absl::ZeroDuration()};
  }
  void age_records() {
    exec("UPDATE {schema}.processed_events SET created_at = now() - interval '2 days'");
  }
};

TEST_F(Cleanup, DeletesOldTerminalRecordsInBatchesNeverPending) {
  open_account(1, "0");
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(
        ledger_
            ->process_deposit(*conn_, event("d" + std::to_string(i), EventType::kDeposit, 1, "1"))
            .ok());
  }
  ASSERT_EQ(*ledger_->process_withdrawal(*conn_, event("w", EventType::kWithdrawal, 1, "1000")),
            Outcome::kInsufficientFunds);
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset) "
      "VALUES ('inflight', 'f', 'pending', 'DEFAULT')");
  age_records();
  ASSERT_TRUE(ledger_->process_deposit(*conn_, event("recent", EventType::kDeposit, 1, "1")).ok());

  absl::StatusOr<CleanupReport> r = cleanup_idempotency_records(*conn_, cleanup_options(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->deleted, 26);
  EXPECT_EQ(r->batches, 3);
  EXPECT_EQ(
      scalar("SELECT string_agg(outcome, ',' ORDER BY outcome) FROM {schema}.processed_events"),
      "pending,success")
      << "the pending record and the recent one stay";
}

TEST_F(Cleanup, SkipsRowsAnotherTransactionHolds) {
  open_account(1, "0");
  ASSERT_TRUE(ledger_->process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "1")).ok());
  ASSERT_TRUE(ledger_->process_deposit(*conn_, event("d2", EventType::kDeposit, 1, "1")).ok());
  age_records();
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.processed_events ORDER BY created_at LIMIT 1 FOR UPDATE");
  const absl::Time start = absl::Now();
  absl::StatusOr<CleanupReport> r = cleanup_idempotency_records(*conn_, cleanup_options());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(r->deleted, 1);
}

TEST_F(Cleanup, ReplayAfterCleanupStillAppliesOnce) {
  open_account(1, "0");
  const PaymentEvent d = event("d1", EventType::kDeposit, 1, "7");
  const PaymentEvent w = event("w1", EventType::kWithdrawal, 1, "100");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, d), Outcome::kApplied);
  ASSERT_EQ(*ledger_->process_withdrawal(*conn_, w), Outcome::kInsufficientFunds);
  age_records();
  ASSERT_EQ(cleanup_idempotency_records(*conn_, cleanup_options())->deleted, 2);

  EXPECT_EQ(*ledger_->process_deposit(*conn_, d), Outcome::kAlreadyApplied)
      << "the event row says confirmed";
  EXPECT_EQ(ledger_->process_withdrawal(*conn_, w).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "a failed event stays failed; it never debits";
  // Even with the event row gone as well, balance_events' unique constraint refuses it.
  age_records();
  ASSERT_EQ(cleanup_idempotency_records(*conn_, cleanup_options())->deleted, 1);
  exec("DELETE FROM {schema}.payment_events");
  EXPECT_EQ(*ledger_->process_deposit(*conn_, d), Outcome::kAlreadyApplied);
  EXPECT_THAT(alerts_.keys(), Contains("guard_without_record:d1"));
  EXPECT_EQ(balance(1), "7");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
