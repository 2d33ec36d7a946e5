// Replaying and discarding dead letters: audited operator actions that put an
// event back on the normal exactly-once path, never around it.
#include <set>

#include "gmock/gmock.h"
#include "idemledger/ledger/transitions.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/dlq.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

class DlqReplay : public LedgerTest {
 protected:
  DeadLetterQueue queue() { return DeadLetterQueue({.schema = schema_, .alerts = &alerts_}); }
  Dispatcher dispatcher() {
    return Dispatcher(*ledger_, {.schema = schema_, .max_retries = 5, .alerts = &alerts_});
  }
  // A withdrawal that exhausted its retries behind a held row lock: failed,
  // one dead letter, nothing debited.
  std::int64_t dead_lettered_withdrawal(const std::string& id) {
    record_event(event(id, EventType::kWithdrawal, 1, "10"), "pending", /*retry_count=*/5);
    std::unique_ptr<pg::Connection> holder =
        hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
    const Dispatcher d = dispatcher();
    absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
    EXPECT_EQ(batch->size(), 1u);
    EXPECT_EQ(*d.process(*conn_, (*batch)[0]), Disposition::kFailed);
    return std::stoll(
        scalar("SELECT max(id) FROM {schema}.dead_letter_queue WHERE event_id = '" + id + "'"));
  }
  void drain() {
    const Dispatcher d = dispatcher();
    while (*d.run_once(*conn_) > 0) {
    }
  }
};

TEST_F(DlqReplay, ReplayedEventIsAppliedOnceThroughTheQueue) {
  open_account(1, "100");
  const std::int64_t letter = dead_lettered_withdrawal("w1");
  // A second dead letter of the same event (an earlier attempt) closes too.
  exec(
      "INSERT INTO {schema}.dead_letter_queue (event_id, event_type, user_id, amount, error, "
      "asset) "
      "VALUES ('w1', 'withdrawal', 1, 10, 'earlier attempt', 'DEFAULT')");

  absl::StatusOr<DeadLetterQueue::ReplayResult> r =
      queue().replay(*conn_, *ledger_, letter, "lock holder was a stuck batch job", "alice");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->event_id, "w1");
  EXPECT_FALSE(r->applied_now) << "queued events go back to the workers";
  EXPECT_EQ(scalar("SELECT status || ' ' || retry_count || ' ' || recovery_count "
                   "FROM {schema}.payment_events WHERE event_id = 'w1'"),
            "pending 0 0")
      << "fresh retry budgets";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE resolved_at IS NULL"), 0);
  EXPECT_EQ(scalar("SELECT action || '|' || target || '|' || reason || '|' || actor || '|' || id "
                   "FROM {schema}.operator_actions"),
            "dlq_replay|" + std::to_string(letter) + "|lock holder was a stuck batch job|alice|" +
                std::to_string(r->audit_id));

  drain();
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'w1'"),
            "confirmed");
  EXPECT_EQ(balance(1), "90");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id = 'w1'"), 1);

  // Replaying again is refused: the letter is resolved; nothing moves.
  r = queue().replay(*conn_, *ledger_, letter, "again", "alice");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("already resolved"));
  drain();
  EXPECT_EQ(balance(1), "90");
  expect_reconciled();
}

TEST_F(DlqReplay, RefusesWithoutReasonUnknownIdsAndTheEdgeOutsideReplay) {
  open_account(1, "100");
  const std::int64_t letter = dead_lettered_withdrawal("w1");
  EXPECT_EQ(queue().replay(*conn_, *ledger_, letter, "", "alice").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(queue().replay(*conn_, *ledger_, 999'999, "why", "alice").status().code(),
            absl::StatusCode::kNotFound);
  // The operator edge is not an FSM edge: neither the C++ function nor the
  // SQL one without the operator flag takes it.
  EXPECT_EQ(
      transition_event_status(*conn_, schema_, "w1", EventStatus::kFailed, EventStatus::kPending)
          .code(),
      absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Result> direct =
      conn_->execute("SELECT " + schema_name_ + ".transition_event('w1', 'failed', 'pending')");
  EXPECT_THAT(direct.status().ToString(), HasSubstr("invalid event status transition"));
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'w1'"), "failed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.operator_actions"), 0);
}

TEST_F(DlqReplay, ConcurrentReplaysOfOneLetterRequeueItOnce) {
  open_account(1, "100");
  const std::int64_t letter = dead_lettered_withdrawal("w1");
  const std::vector<int> codes = run_forked(6, [&](int i) {
    std::unique_ptr<pg::Connection> c = connect();
    absl::StatusOr<DeadLetterQueue::ReplayResult> r =
        queue().replay(*c, *ledger_, letter, "retry " + std::to_string(i), "op");
    return r.ok() ? 0 : (r.status().code() == absl::StatusCode::kFailedPrecondition ? 1 : 2);
  });
  EXPECT_EQ(std::count(codes.begin(), codes.end(), 0), 1);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), 1), 5);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.operator_actions"), 1);
  drain();
  EXPECT_EQ(balance(1), "90");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
}

TEST_F(DlqReplay, CompensationWithoutQueuedEventIsAppliedNowOrStaysOpen) {
  open_account(1, "0");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "5")),
            Outcome::kApplied);
  ASSERT_TRUE(
      ledger_->process_withdrawal(*conn_, event("w1", EventType::kWithdrawal, 1, "5")).ok());
  // The deposit's chain tx was reorganised away after the funds left.
  ASSERT_EQ(ledger_->process_compensation(*conn_, "0xd1", 1, *Amount::parse("5")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const std::int64_t letter =
      std::stoll(scalar("SELECT id FROM {schema}.dead_letter_queue WHERE event_id = 'reorg:0xd1'"));

  // Still no funds: the replay changes nothing, the letter stays open, no audit row.
  absl::StatusOr<DeadLetterQueue::ReplayResult> r =
      queue().replay(*conn_, *ledger_, letter, "try again", "bob");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("stays open"));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE resolved_at IS NULL"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.operator_actions"), 0);

  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d2", EventType::kDeposit, 1, "7")),
            Outcome::kApplied);
  r = queue().replay(*conn_, *ledger_, letter, "funds arrived", "bob");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied_now, Outcome::kApplied);
  EXPECT_EQ(balance(1), "2");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id = "
                  "'reorg:0xd1'"),
            1);
  EXPECT_EQ(queue().replay(*conn_, *ledger_, letter, "again", "bob").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(balance(1), "2");
  expect_reconciled();
}

TEST_F(DlqReplay, DiscardClosesWithAuditOnce) {
  open_account(1, "100");
  const std::int64_t letter = dead_lettered_withdrawal("w1");
  absl::StatusOr<std::int64_t> audit = queue().discard(*conn_, letter, "customer cancelled", "eve");
  ASSERT_TRUE(audit.ok()) << audit.status();
  EXPECT_EQ(
      scalar("SELECT action FROM {schema}.operator_actions WHERE id = " + std::to_string(*audit)),
      "dlq_discard");
  EXPECT_EQ(queue().discard(*conn_, letter, "again", "eve").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(queue().replay(*conn_, *ledger_, letter, "changed my mind", "eve").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'w1'"), "failed");
  EXPECT_EQ(balance(1), "100");
}

}  // namespace
}  // namespace idemledger::testing
