// The dispatcher's decisions, without a database: what a claim's rows become,
// and which server-side function records each kind of failure (a
// FakeConnection scripts the answers and records every statement).
#include "idemledger/queue/dispatcher.hpp"

#include "gmock/gmock.h"
#include "tests/support/fake_connection.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

class FixedOracle : public FinalityOracle {
 public:
  absl::StatusOr<bool> answer = true;
  int asked = 0;
  absl::StatusOr<bool> is_finalized(std::string_view) override {
    ++asked;
    return answer;
  }
};

class DispatcherDecisions : public ::testing::Test {
 protected:
  // The ledger's transaction-scoped timeouts go out with every apply.
  DispatcherDecisions() { conn_.on("set_config", FakeConnection::rows({{"2000ms", "5000ms"}})); }
  ClaimedEvent claimed(EventType type = EventType::kDeposit, int retries = 0) {
    return {
        .event = {.event_id = "evt_1", .type = type, .user_id = 7, .amount = *Amount::parse("5")},
        .retry_count = retries,
        .trace_id = "trace-1",
        .claimed_at = absl::Now()};
  }
  FakeConnection conn_;
  Ledger ledger_{{.alerts = &quiet_}};
  struct Quiet : AlertSink {
    void alert(const Alert&) override {}
  } quiet_;
};

// A worker lingers only after a claim that was short but not empty: a full
// claim means more is waiting, an empty one waits for a notification instead.
TEST_F(DispatcherDecisions, AWorkerLingersOnlyAfterAShortClaim) {
  const Dispatcher lingering(ledger_, {.batch_size = 32, .claim_linger = absl::Milliseconds(10)});
  EXPECT_EQ(lingering.linger_after(0), absl::ZeroDuration());
  EXPECT_EQ(lingering.linger_after(1), absl::Milliseconds(10));
  EXPECT_EQ(lingering.linger_after(31), absl::Milliseconds(10));
  EXPECT_EQ(lingering.linger_after(32), absl::ZeroDuration());
  EXPECT_EQ(lingering.linger_after(33), absl::ZeroDuration());
  // The library's default claims again at once, and a negative linger is none.
  EXPECT_EQ(Dispatcher(ledger_, {}).linger_after(1), absl::ZeroDuration());
  EXPECT_EQ(Dispatcher(ledger_, {.claim_linger = -absl::Seconds(1)}).linger_after(1),
            absl::ZeroDuration());
}

TEST_F(DispatcherDecisions, AClaimsRowsBecomeTypedEvents) {
  conn_.on("claim_events", FakeConnection::rows({{"evt_1",
                                                  "7",
                                                  "5.250000000000000000",
                                                  "withdrawal",
                                                  "2",
                                                  {},
                                                  "1500",
                                                  "USDC",
                                                  {},
                                                  {},
                                                  {}},
                                                 {"evt_2",
                                                  "7",
                                                  {},
                                                  "withdrawal_requested",
                                                  "0",
                                                  "t",
                                                  "10",
                                                  "ETH",
                                                  "0.01",
                                                  "w_9",
                                                  "60000"}}));
  const Dispatcher d(ledger_, {});
  absl::StatusOr<std::vector<ClaimedEvent>> c = d.claim(conn_);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].event.type, EventType::kWithdrawal);
  EXPECT_EQ((*c)[0].event.asset->code(), "USDC");
  EXPECT_TRUE((*c)[0].has_amount);
  EXPECT_FALSE((*c)[0].fee.has_value());
  EXPECT_FALSE((*c)[0].expires_in.has_value());
  EXPECT_EQ((*c)[0].event.user_id, 7);
  EXPECT_EQ((*c)[0].event.amount.to_string(), "5.25");
  EXPECT_EQ((*c)[0].retry_count, 2);
  EXPECT_EQ((*c)[0].trace_id, "");
  EXPECT_EQ((*c)[0].age_at_claim, absl::Microseconds(1500));
  const ClaimedEvent& hold = (*c)[1];
  EXPECT_EQ(hold.event.type, EventType::kWithdrawalRequested);
  EXPECT_FALSE(hold.has_amount);
  EXPECT_EQ(hold.fee->to_string(), "0.01");
  EXPECT_EQ(hold.hold_id, "w_9");
  EXPECT_EQ(hold.expires_in, absl::Seconds(60));
}

TEST_F(DispatcherDecisions, AClaimWithAMalformedAssetIsAnErrorNeverADefault) {
  conn_.on(
      "claim_events",
      FakeConnection::rows({{"evt_1", "7", "5", "deposit", "0", {}, "1", "usdc!", {}, {}, {}}}));
  const Dispatcher d(ledger_, {});
  const absl::StatusOr<std::vector<ClaimedEvent>> c = d.claim(conn_);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("claimed event evt_1"));
}

TEST_F(DispatcherDecisions, AnUnreadableClaimIsAnErrorNeverAZeroUser) {
  conn_.on("claim_events",
           FakeConnection::rows({{"evt_1", "", "5", "deposit", "0", {}, "1", "ETH", {}, {}, {}}}));
  const Dispatcher d(ledger_, {});
  const absl::StatusOr<std::vector<ClaimedEvent>> c = d.claim(conn_);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("expected an integer"));
}

TEST_F(DispatcherDecisions, ATransientFailureIsADurableRetry) {
  conn_.on("apply_event", absl::UnavailableError("lock not available [SQLSTATE 55P03]"));
  conn_.on("retry_event", FakeConnection::rows({{"retry_scheduled"}}));
  const Dispatcher d(ledger_, {.max_retries = 5, .retry_base = absl::Seconds(1)});
  EXPECT_EQ(*d.process(conn_, claimed(EventType::kDeposit, 3)), Disposition::kRetryScheduled);
  const auto params = conn_.params_of("retry_event");
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0], "evt_1");
  EXPECT_THAT(*params[1], HasSubstr("55P03"));
  EXPECT_LE(std::stol(*params[2]), 8000) << "full jitter under base * 2^retries";
  EXPECT_EQ(params[3], "5");
}

TEST_F(DispatcherDecisions, APermanentFailureFailsAtOnceWithTheCodesName) {
  conn_.on("apply_event", absl::NotFoundError("user 7 not found"));
  conn_.on("fail_event", FakeConnection::rows({{"failed"}}));
  const Dispatcher d(ledger_, {});
  EXPECT_EQ(*d.process(conn_, claimed()), Disposition::kFailed);
  EXPECT_EQ(conn_.params_of("fail_event")[1], "not_found");
  EXPECT_THAT(conn_.statements(), ::testing::Each(::testing::Not(HasSubstr("retry_event"))));
}

TEST_F(DispatcherDecisions, ALostClaimIsReportedNotForced) {
  conn_.on("apply_event", absl::AbortedError("deadlock"));
  conn_.on("retry_event", FakeConnection::rows({{"not_claimed"}}));
  const Dispatcher d(ledger_, {});
  EXPECT_EQ(*d.process(conn_, claimed()), Disposition::kNotClaimed);
}

TEST_F(DispatcherDecisions, AnAnswerNobodyKnowsIsAnErrorNotADisposition) {
  conn_.on("apply_event", absl::AbortedError("deadlock"));
  conn_.on("retry_event", FakeConnection::rows({{"retried_maybe"}}));
  const Dispatcher d(ledger_, {});
  EXPECT_EQ(d.process(conn_, claimed()).status().code(), absl::StatusCode::kInternal);
}

TEST_F(DispatcherDecisions, ACreditWaitsForFinalityWithoutSpendingARetry) {
  FixedOracle oracle;
  const Dispatcher d(ledger_, {.finality = &oracle, .finality_recheck = absl::Seconds(15)});
  conn_.on("SELECT tx_hash", FakeConnection::rows({{"0xabc"}}));
  conn_.on("defer_event", FakeConnection::rows({{"deferred"}}));
  conn_.on("apply_event", FakeConnection::rows({{"applied"}}));

  oracle.answer = false;
  EXPECT_EQ(*d.process(conn_, claimed()), Disposition::kDeferred);
  EXPECT_EQ(conn_.params_of("defer_event")[1], "15000");
  oracle.answer = absl::UnavailableError("node down");
  EXPECT_EQ(*d.process(conn_, claimed()), Disposition::kDeferred) << "cannot say: wait, no retry";
  EXPECT_THAT(conn_.statements(), ::testing::Each(::testing::Not(HasSubstr("retry_event"))));

  oracle.answer = absl::FailedPreconditionError("reverted");
  conn_.on("fail_event", FakeConnection::rows({{"failed"}}));
  EXPECT_EQ(*d.process(conn_, claimed()), Disposition::kFailed);
  EXPECT_EQ(conn_.params_of("fail_event")[1], "reverted");

  oracle.answer = true;
  EXPECT_EQ(*d.process(conn_, claimed()), Disposition::kApplied);
  const int asked = oracle.asked;
  EXPECT_EQ(*d.process(conn_, claimed(EventType::kWithdrawal)), Disposition::kApplied);
  EXPECT_EQ(oracle.asked, asked) << "debits never wait for a chain";
}

TEST_F(DispatcherDecisions, NotFinalPastTheDeadlineFailsForAnOperator) {
  FixedOracle oracle;
  oracle.answer = false;
  const Dispatcher d(ledger_, {.finality = &oracle, .finality_deadline = absl::Hours(24)});
  conn_.on("SELECT tx_hash", FakeConnection::rows({{"0xabc"}}));
  conn_.on("fail_event", FakeConnection::rows({{"failed"}}));
  ClaimedEvent old = claimed();
  old.age_at_claim = absl::Hours(25);
  EXPECT_EQ(*d.process(conn_, old), Disposition::kFailed);
  EXPECT_EQ(conn_.params_of("fail_event")[1], "not_final_in_time");
}

}  // namespace
}  // namespace idemledger::testing
