#include <string>

#include "idemledger/core/params.hpp"
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

// The set-based writer moves every listed event that is in `from`, says how
// many, refuses an edge the table lacks, and takes an operator edge only
// when asked as the operator.
TEST_F(Transition, ManyAtOnceMovesThoseInFromAndCountsThem) {
  record_event(event("e2", EventType::kDeposit, 1, "1"), "pending");
  record_event(event("e3", EventType::kDeposit, 1, "1"), "failed");
  const auto move = [&](const std::string& ids, const std::string& from, const std::string& to,
                        const std::string& operator_flag = "false") {
    return conn_->execute(schema_.qualify("SELECT {schema}.transition_events($1::text[], $2, $3, "
                                          "$4::boolean)"),
                          Params(ids, from, to, operator_flag));
  };
  absl::StatusOr<Result> r = move("{e1,e2,e3,nope}", "pending", "enqueued");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->at(0, 0).value_or(""), "2");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'enqueued'"), 2);
  r = move("{e1,e2}", "pending", "confirmed");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(sqlstate(r.status()), "IL010");
  r = move("{e3}", "failed", "pending");
  ASSERT_FALSE(r.ok()) << "failed -> pending is the operator's";
  EXPECT_EQ(sqlstate(r.status()), "IL010");
  r = move("{e3}", "failed", "pending", "true");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->at(0, 0).value_or(""), "1");
  r = move("{}", "enqueued", "confirmed");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->at(0, 0).value_or(""), "0");
}

}  // namespace
}  // namespace idemledger::testing
