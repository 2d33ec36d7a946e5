#include "gmock/gmock.h"
#include "idemledger/ops/monitor.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::UnorderedElementsAre;

using Monitor = LedgerTest;

TEST_F(Monitor, HealthyQueueRaisesNothing) {
  open_account(1, "0");
  record_event(event("fresh", EventType::kDeposit, 1, "1"), "pending");
  absl::StatusOr<HealthReport> h = check_health(*conn_, {.schema = schema_, .alerts = &alerts_});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->healthy());
  EXPECT_TRUE(alerts_.keys().empty());
}

TEST_F(Monitor, FindsZombiesFloodsAndStuckRecords) {
  open_account(1, "0");
  record_event(event("p", EventType::kDeposit, 1, "1"), "processing");
  record_event(event("q1", EventType::kDeposit, 1, "1"), "pending");
  record_event(event("q2", EventType::kDeposit, 1, "1"), "enqueued");
  record_event(event("ok", EventType::kDeposit, 1, "1"), "pending");
  exec(
      "UPDATE {schema}.payment_events SET updated_at = now() - interval '20 minutes' WHERE "
      "event_id <> 'ok'");
  for (int i = 0; i < 4; ++i) {
    exec(
        "INSERT INTO {schema}.dead_letter_queue (event_id, event_type, user_id, amount, error, "
        "asset) VALUES ('x', 'deposit', 1, 1, 'e', 'DEFAULT')");
  }
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, created_at, "
      "asset) VALUES ('k', 'f', 'pending', now() - interval '10 minutes', 'DEFAULT')");
  absl::StatusOr<HealthReport> h =
      check_health(*conn_, {.schema = schema_, .dlq_flood_per_hour = 3, .alerts = &alerts_});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->zombie_processing, 1);
  EXPECT_EQ(h->zombie_queued, 2);
  EXPECT_EQ(h->dead_letters_last_hour, 4);
  EXPECT_TRUE(h->dlq_flood);
  EXPECT_EQ(h->stuck_idempotency_records, 1);
  EXPECT_FALSE(h->healthy());
  EXPECT_THAT(alerts_.keys(),
              UnorderedElementsAre("zombie_events", "dlq_flood", "stuck_idempotency_records"));
}

TEST_F(Monitor, AHoldPastItsExpiryThatNobodySweptIsAFinding) {
  open_account(1, "100");
  for (const char* id : {"late", "recent", "settled"}) {
    ASSERT_EQ(ledger_
                  ->hold(*conn_, {.event_id = id,
                                  .user_id = 1,
                                  .amount = *Amount::parse("1"),
                                  .expires_in = absl::Milliseconds(1)})
                  ->outcome,
              HoldOutcome::kApplied);
  }
  ASSERT_EQ(ledger_->void_hold(*conn_, {.hold_id = "settled"})->outcome, HoldOutcome::kApplied);
  exec(
      "UPDATE {schema}.holds SET expires_at = now() - interval '10 minutes' WHERE event_id IN "
      "('late', 'settled')");
  absl::StatusOr<HealthReport> h = check_health(*conn_, {.schema = schema_, .alerts = &alerts_});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->overdue_holds, 1) << "'recent' is within the grace; 'settled' is not held";
  EXPECT_FALSE(h->healthy());
  EXPECT_THAT(alerts_.keys(), UnorderedElementsAre("overdue_holds"));
  ASSERT_EQ(*ledger_->expire_holds(*conn_), 2);
  h = check_health(*conn_, {.schema = schema_, .alerts = &alerts_});
  EXPECT_EQ(h->overdue_holds, 0);
  EXPECT_TRUE(h->healthy());
}

}  // namespace
}  // namespace idemledger::testing
