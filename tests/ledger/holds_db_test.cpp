// Holds: every transition of a two-phase withdrawal, and what each step
// answers when it is delivered again.
#include <thread>

#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

class Holds : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    ledger_ = std::make_unique<Ledger>(options({.write_notifications = true}));
    open_account(1, "100");
  }
  static HoldRequest request(std::string id, std::string_view amount, std::string_view fee = "0",
                             absl::Duration expires_in = absl::Hours(1)) {
    return {.event_id = std::move(id),
            .user_id = 1,
            .amount = *Amount::parse(amount),
            .fee = *Amount::parse_balance(fee),
            .expires_in = expires_in};
  }
  HoldResult hold(const HoldRequest& r) {
    absl::StatusOr<HoldResult> h = ledger_->hold(*conn_, r);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.value_or(HoldResult{.outcome = HoldOutcome::kRefused});
  }
  absl::StatusOr<HoldResult> post(std::string id, std::optional<std::string_view> amount = {},
                                  std::optional<std::string_view> fee = {}) {
    PostRequest r{.hold_id = std::move(id)};
    if (amount) r.amount = *Amount::parse(*amount);
    if (fee) r.fee = *Amount::parse_balance(*fee);
    return ledger_->post(*conn_, r);
  }
  absl::StatusOr<HoldResult> void_hold(std::string id) {
    return ledger_->void_hold(*conn_, {.hold_id = std::move(id)});
  }
  Account account() {
    absl::StatusOr<Account> a = ledger_->account(*conn_, 1);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.value_or(Account{});
  }
  std::string state(std::string_view id) {
    return scalar("SELECT state FROM {schema}.holds WHERE event_id = '" + std::string(id) + "'");
  }
  long topics(std::string_view topic) {
    return count("SELECT count(*) FROM {schema}.outbox WHERE topic = '" + std::string(topic) + "'");
  }
};

MATCHER_P2(Is, outcome, state, "") {
  return arg.ok() && arg->outcome == outcome && arg->state == state;
}

TEST_F(Holds, AHoldReservesAmountPlusFee_OnlyTheRestIsAvailable) {
  const HoldResult h = hold(request("w_1", "30", "1"));
  EXPECT_EQ(h.outcome, HoldOutcome::kApplied);
  EXPECT_EQ(h.state, HoldState::kHeld);
  const Account a = account();
  EXPECT_EQ(a.balance.to_string(), "100") << "nothing leaves before the post";
  EXPECT_EQ(a.held.to_string(), "31");
  EXPECT_EQ(a.available().to_string(), "69");
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, event("w_x", EventType::kWithdrawal, 1, "70")),
            Outcome::kInsufficientFunds)
      << "held funds cannot be spent twice";
  EXPECT_EQ(hold(request("w_2", "69", "1")).state, HoldState::kRejected);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0) << "a hold is no entry";
  EXPECT_EQ(topics("held"), 1);
  absl::StatusOr<Hold> found = ledger_->find_hold(*conn_, "w_1");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->state, HoldState::kHeld);
  EXPECT_EQ(found->fee.to_string(), "1");
  EXPECT_GT(found->expires_at, absl::Now() + absl::Minutes(59));
  EXPECT_EQ(ledger_->find_hold(*conn_, "w_9").status().code(), absl::StatusCode::kNotFound);
  expect_reconciled();
}

TEST_F(Holds, ARepeatedHoldAnswersTheFirst_OtherContentIsAConflict) {
  ASSERT_EQ(hold(request("w_1", "30", "1")).outcome, HoldOutcome::kApplied);
  const HoldResult again = hold(request("w_1", "30", "1"));
  EXPECT_EQ(again.outcome, HoldOutcome::kAlreadyApplied);
  EXPECT_EQ(again.state, HoldState::kHeld);
  EXPECT_EQ(account().held.to_string(), "31") << "held once";

  for (HoldRequest other : {request("w_1", "30", "2"), request("w_1", "31", "1")}) {
    absl::StatusOr<HoldResult> r = ledger_->hold(*conn_, other);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("conflicting replay: hold w_1"));
  }
  HoldRequest other_user = request("w_1", "30", "1");
  other_user.user_id = 2;
  EXPECT_EQ(ledger_->hold(*conn_, other_user).status().code(), absl::StatusCode::kAlreadyExists);

  // A refused hold is recorded like an insufficient-funds withdrawal, and answered so again.
  EXPECT_EQ(hold(request("w_2", "500")).outcome, HoldOutcome::kInsufficientFunds);
  EXPECT_EQ(hold(request("w_2", "500")).outcome, HoldOutcome::kInsufficientFunds);
  EXPECT_EQ(state("w_2"), "rejected");
  EXPECT_EQ(topics("insufficient_funds"), 1);
  expect_reconciled();
}

TEST_F(Holds, APostCapturesAmountAndFeeAsOnePosting) {
  ASSERT_EQ(hold(request("w_1", "30", "1")).outcome, HoldOutcome::kApplied);
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kApplied, HoldState::kPosted));
  const Account a = account();
  EXPECT_EQ(a.balance.to_string(), "69");
  EXPECT_EQ(a.held.to_string(), "0");
  EXPECT_EQ(scalar("SELECT string_agg(event_type || ' ' || trim_scale(amount)::text, ', ' ORDER BY "
                   "event_type) FROM {schema}.balance_events"),
            "withdrawal -30, withdrawal_fee -1");
  EXPECT_EQ(scalar("SELECT string_agg(account || ' ' || trim_scale(amount)::text, ', ' ORDER BY "
                   "account) FROM {schema}.system_entries WHERE source_event_id = 'w_1'"),
            "external 30, fees 1");
  EXPECT_EQ(topics("posted"), 1);

  // Delivered again: the same answer, nothing written. Different amounts: a conflict.
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kAlreadyApplied, HoldState::kPosted));
  EXPECT_THAT(post("w_1", "30", "1"), Is(HoldOutcome::kAlreadyApplied, HoldState::kPosted));
  EXPECT_EQ(post("w_1", "29").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(void_hold("w_1"), Is(HoldOutcome::kRefused, HoldState::kPosted))
      << "a void after the post is told the hold is posted";
  EXPECT_EQ(account().balance.to_string(), "69");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 2);
  EXPECT_EQ(topics("posted"), 1);
  expect_reconciled();
}

TEST_F(Holds, PostingLessReleasesTheRest_PostingMoreIsRefused) {
  ASSERT_EQ(hold(request("w_1", "30", "2")).outcome, HoldOutcome::kApplied);
  absl::StatusOr<HoldResult> over = post("w_1", "30.5");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("exceeds what it holds"));
  EXPECT_EQ(post("w_1", "30", "3").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state("w_1"), "held") << "a refused capture changes nothing";

  EXPECT_THAT(post("w_1", "25", "1"), Is(HoldOutcome::kApplied, HoldState::kPosted));
  const Account a = account();
  EXPECT_EQ(a.balance.to_string(), "74");
  EXPECT_EQ(a.held.to_string(), "0") << "the 6 not captured is released";
  absl::StatusOr<Hold> h = ledger_->find_hold(*conn_, "w_1");
  EXPECT_EQ(h->posted_amount->to_string(), "25");
  EXPECT_EQ(h->posted_fee->to_string(), "1");
  expect_reconciled();
}

TEST_F(Holds, AVoidReleasesEverything_AndAVoidedHoldIsNeverPosted) {
  ASSERT_EQ(hold(request("w_1", "30", "1")).outcome, HoldOutcome::kApplied);
  EXPECT_THAT(void_hold("w_1"), Is(HoldOutcome::kApplied, HoldState::kVoided));
  EXPECT_THAT(void_hold("w_1"), Is(HoldOutcome::kAlreadyApplied, HoldState::kVoided));
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kRefused, HoldState::kVoided));
  const Account a = account();
  EXPECT_EQ(a.balance.to_string(), "100");
  EXPECT_EQ(a.held.to_string(), "0");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0);
  EXPECT_EQ(topics("voided"), 1);
  // A refused hold neither.
  ASSERT_EQ(hold(request("w_2", "101")).state, HoldState::kRejected);
  EXPECT_THAT(post("w_2"), Is(HoldOutcome::kRefused, HoldState::kRejected));
  EXPECT_THAT(void_hold("w_2"), Is(HoldOutcome::kRefused, HoldState::kRejected));
  expect_reconciled();
}

TEST_F(Holds, TheSweeperExpiresEachHoldOnce_AndAnExpiredHoldIsNeverPosted) {
  ASSERT_EQ(hold(request("w_1", "30", "1", absl::Milliseconds(1))).outcome, HoldOutcome::kApplied);
  ASSERT_EQ(hold(request("w_2", "10", "0", absl::Hours(1))).outcome, HoldOutcome::kApplied);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(*ledger_->expire_holds(*conn_), 1);
  EXPECT_EQ(*ledger_->expire_holds(*conn_), 0) << "once";
  EXPECT_EQ(state("w_1"), "expired");
  EXPECT_EQ(state("w_2"), "held");
  EXPECT_EQ(account().held.to_string(), "10");
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kRefused, HoldState::kExpired));
  EXPECT_THAT(void_hold("w_1"), Is(HoldOutcome::kRefused, HoldState::kExpired));
  EXPECT_EQ(account().balance.to_string(), "100");
  EXPECT_EQ(topics("expired"), 1);
  expect_reconciled();
}

// A batch locks its accounts in (user, asset) order; the sweeper once
// released holds in expiry order, holding the account of an earlier-expiring
// hold while it waited for a later one's: a deadlock (migration 19).
TEST_F(Holds, TheSweeperLocksAccountsInTheOrderBatchesDo_NoDeadlock) {
  open_account(2, "100");
  HoldRequest second = request("w_2", "10", "0", absl::Milliseconds(1));
  second.user_id = 2;
  ASSERT_EQ(hold(second).outcome, HoldOutcome::kApplied);  // expires first
  absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(hold(request("w_1", "30", "1", absl::Milliseconds(1))).outcome, HoldOutcome::kApplied);
  absl::SleepFor(absl::Milliseconds(20));

  // A batch that has locked its first account (user 1) and goes on to user 2.
  std::unique_ptr<pg::Connection> batch =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
  absl::StatusOr<int> expired = absl::UnknownError("the sweeper did not run");
  std::thread sweeper([&] {
    std::unique_ptr<pg::Connection> c = connect();
    expired = ledger_->expire_holds(*c);
  });
  EXPECT_EQ(lock_waiters("expire_holds", absl::Seconds(5)), 1)
      << "the sweeper waits for user 1's account";
  // With the old order the sweeper held user 2's account: a cycle, and one
  // of the two aborted after deadlock_timeout.
  EXPECT_TRUE(batch->execute("SET LOCAL lock_timeout = '5s'").ok());
  absl::StatusOr<Result> next = batch->execute(
      schema_.qualify("SELECT 1 FROM {schema}.accounts WHERE user_id = 2 FOR NO KEY UPDATE"));
  EXPECT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(batch->execute("COMMIT").ok());
  sweeper.join();
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, 2);
  EXPECT_EQ(state("w_1"), "expired");
  EXPECT_EQ(state("w_2"), "expired");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.accounts WHERE held <> 0"), 0);
  EXPECT_EQ(account().balance.to_string(), "100");
  EXPECT_EQ(topics("expired"), 2);
  expect_reconciled();
}

TEST_F(Holds, APostPastExpiryBeforeTheSweeperCameIsRefusedAndExpiresIt) {
  ASSERT_EQ(hold(request("w_1", "30", "1", absl::Milliseconds(1))).outcome, HoldOutcome::kApplied);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kRefused, HoldState::kExpired));
  EXPECT_EQ(state("w_1"), "expired");
  EXPECT_EQ(account().held.to_string(), "0");
  EXPECT_EQ(*ledger_->expire_holds(*conn_), 0) << "nothing left for the sweeper";
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kRefused, HoldState::kExpired));
  expect_reconciled();
}

TEST_F(Holds, StepsNameTheHoldTheyActOn) {
  EXPECT_EQ(post("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(void_hold("nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(hold(request("w_1", "30")).outcome, HoldOutcome::kApplied);
  absl::StatusOr<HoldResult> r = ledger_->post(*conn_, {.hold_id = "w_1", .user_id = 2});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("belongs to user 1, not 2"));
  EXPECT_EQ(state("w_1"), "held");

  // Its withdrawal still waits in the queue: not yet, retry (never "no such hold").
  record_event({.event_id = "w_2",
                .type = EventType::kWithdrawalRequested,
                .user_id = 1,
                .amount = *Amount::parse("5")},
               "pending");
  r = post("w_2");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(is_retryable(r.status()));
  EXPECT_EQ(ledger_->hold(*conn_, {.event_id = "", .user_id = 1, .amount = *Amount::parse("1")})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ledger_->hold(*conn_, {.event_id = "w_3", .user_id = 1, .amount = Amount()}).status().code(),
      absl::StatusCode::kInvalidArgument)
      << "a hold of nothing";
  // libpq would cut "w_1\0x" to "w_1" and act on that hold.
  const std::string cut = std::string("w_1") + '\0' + "x";
  EXPECT_EQ(ledger_->void_hold(*conn_, {.hold_id = cut}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger_->post(*conn_, {.hold_id = cut}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state("w_1"), "held");
}

TEST_F(Holds, AHoldsIdIsTakenForEveryOtherKindOfEvent) {
  ASSERT_EQ(hold(request("w_1", "30")).outcome, HoldOutcome::kApplied);
  EXPECT_EQ(scalar("SELECT event_type || ' ' || status FROM {schema}.payment_events WHERE "
                   "event_id = 'w_1'"),
            "withdrawal_requested confirmed")
      << "a direct call is recorded like a queued one";
  absl::StatusOr<Outcome> r =
      ledger_->process_withdrawal(*conn_, event("w_1", EventType::kWithdrawal, 1, "30"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(post("w_1"), Is(HoldOutcome::kApplied, HoldState::kPosted));
  EXPECT_EQ(account().balance.to_string(), "70") << "debited once, by the post";
  expect_reconciled();
}

TEST_F(Holds, AQueuedWithdrawalStepEndsConfirmedOrFailedWithItsHold) {
  record_event({.event_id = "w_1",
                .type = EventType::kWithdrawalRequested,
                .user_id = 1,
                .amount = *Amount::parse("30")},
               "enqueued");
  ASSERT_EQ(hold(request("w_1", "30")).outcome, HoldOutcome::kApplied);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'w_1'"),
            "confirmed");
  record_event({.event_id = "w_2",
                .type = EventType::kWithdrawalRequested,
                .user_id = 1,
                .amount = *Amount::parse("300")},
               "enqueued");
  ASSERT_EQ(hold(request("w_2", "300")).outcome, HoldOutcome::kInsufficientFunds);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'w_2'"), "failed");
  absl::StatusOr<HoldResult> posted =
      ledger_->post(*conn_, {.hold_id = "w_1", .event_id = "c_1"});  // not queued: fine
  EXPECT_THAT(posted, Is(HoldOutcome::kApplied, HoldState::kPosted));
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
