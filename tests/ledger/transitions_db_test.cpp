#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/transitions.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using S = EventStatus;

class Transition : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    open_account(1, "0");
    record_event(event("e1", EventType::kDeposit, 1, "1"), "pending", 2);
  }
  std::string status() {
    return scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'e1'");
  }
};

TEST_F(Transition, ValidEdgeMovesTheEvent) {
  ASSERT_TRUE(transition_event_status(*conn_, schema_, "e1", S::kPending, S::kEnqueued).ok());
  EXPECT_EQ(status(), "enqueued");
  ASSERT_TRUE(transition_event_status(*conn_, schema_, "e1", S::kEnqueued, S::kConfirmed).ok());
  EXPECT_EQ(status(), "confirmed");
  EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events"), "0")
      << "success resets retries";
}

TEST_F(Transition, AlreadyAtTargetIsOk) {
  ASSERT_TRUE(transition_event_status(*conn_, schema_, "e1", S::kPending, S::kEnqueued).ok());
  EXPECT_TRUE(transition_event_status(*conn_, schema_, "e1", S::kPending, S::kEnqueued).ok());
}

TEST_F(Transition, TerminalEventIsAlreadyProcessed) {
  ASSERT_TRUE(transition_event_status(*conn_, schema_, "e1", S::kPending, S::kFailed).ok());
  absl::Status s = transition_event_status(*conn_, schema_, "e1", S::kEnqueued, S::kProcessing);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE(is_retryable(s));
  EXPECT_EQ(status(), "failed");
}

TEST_F(Transition, ConcurrentChangeIsRetryable) {
  ASSERT_TRUE(transition_event_status(*conn_, schema_, "e1", S::kPending, S::kEnqueued).ok());
  absl::Status s = transition_event_status(*conn_, schema_, "e1", S::kProcessing, S::kConfirmed);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_TRUE(is_retryable(s));
  EXPECT_EQ(status(), "enqueued");
}

TEST_F(Transition, UnknownEventIsNotFound) {
  EXPECT_EQ(transition_event_status(*conn_, schema_, "nope", S::kPending, S::kEnqueued).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(Transition, InvalidEdgeRefusedByLibraryAndByDatabase) {
  EXPECT_EQ(transition_event_status(*conn_, schema_, "e1", S::kPending, S::kConfirmed).code(),
            absl::StatusCode::kFailedPrecondition);
  // The server-side function refuses it too, for any caller.
  absl::StatusOr<Result> r =
      conn_->execute("SELECT " + schema_name_ + ".transition_event('e1', 'pending', 'confirmed')");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(sqlstate(r.status()), "IL010");
  EXPECT_EQ(status(), "pending");
}

// The writer's set form (claims and batches move many events at once) moves
// all of them or none: an id it cannot move raises as the one-event form
// would, naming that id, and nothing moved before it stays moved.
TEST_F(Transition, ManyMoveTogetherOrNotAtAll) {
  record_event(event("e2", EventType::kDeposit, 1, "1"), "pending", 1);
  record_event(event("e3", EventType::kDeposit, 1, "1"), "confirmed");
  const std::string many = "SELECT " + schema_name_ + ".transition_events(";
  absl::StatusOr<Result> r =
      conn_->execute(many + "ARRAY['e1', 'e2', 'e3'], 'pending', 'enqueued', false, 30000)");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(sqlstate(r.status()), "IL012");
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("e3 is already confirmed"));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'pending' AND "
                  "lease_until IS NULL"),
            2);

  // A lease, when given, is written by the same update; an id already at
  // its target is fine; success resets the retry count.
  ASSERT_TRUE(
      conn_->execute(many + "ARRAY['e1', 'e2'], 'pending', 'enqueued', false, 30000)").ok());
  ASSERT_TRUE(conn_->execute(many + "ARRAY['e2', 'e1', 'e2'], 'pending', 'enqueued')").ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'enqueued' AND "
                  "lease_until > now() + interval '29 seconds'"),
            2);
  ASSERT_TRUE(conn_->execute(many + "ARRAY['e1', 'e2'], 'enqueued', 'confirmed')").ok());
  EXPECT_EQ(status(), "confirmed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed' AND "
                  "retry_count = 0"),
            3);
  r = conn_->execute(many + "ARRAY['e1'], 'pending', 'confirmed')");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(sqlstate(r.status()), "IL010");
}

}  // namespace
}  // namespace idemledger::testing
