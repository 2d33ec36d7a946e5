// The delivery relay against a real PostgreSQL and an in-process downstream:
// each row delivered once and marked only after the 2xx, the dead-letter
// envelope and its rules, the shared marker (pause, one probe, drain first),
// every policy result, quarantine, refusals, and run()'s concurrency bound and
// shutdown. The multi-process outage over HTTP is in relay_http_test.cpp.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "idemledger/core/status.hpp"
#include "idemledger/pg/pool.hpp"
#include "idemledger/relay/relay.hpp"
#include "tests/support/prometheus_text.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

// The downstream API in-process: answers as told, remembers every call.
class FakeDownstream {
 public:
  absl::Status operator()(const RelayMessage& m) {
    const int now = ++concurrent_;
    int seen = max_concurrent_.load();
    while (now > seen && !max_concurrent_.compare_exchange_weak(seen, now)) {
    }
    if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
    absl::Status answer;
    {
      std::lock_guard lock(mu_);
      answer = answer_;
      ++calls_[m.outbox_id];
      if (answer.ok()) ++delivered_[m.outbox_id];
    }
    --concurrent_;
    return answer;
  }
  void answer(absl::Status s) {
    std::lock_guard lock(mu_);
    answer_ = std::move(s);
  }
  int calls(std::int64_t id) {
    std::lock_guard lock(mu_);
    return calls_[id];
  }
  int total_calls() {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [id, c] : calls_) n += c;
    return n;
  }
  std::map<std::int64_t, int> delivered() {
    std::lock_guard lock(mu_);
    return delivered_;
  }
  absl::Duration delay_;
  std::atomic<int> max_concurrent_{0};

 private:
  std::atomic<int> concurrent_{0};
  std::mutex mu_;
  absl::Status answer_;
  std::map<std::int64_t, int> calls_;
  std::map<std::int64_t, int> delivered_;
};

class RelayTest : public LedgerTest {
 protected:
  // Fast timings: two calls per delivery, the marker set by one dead letter
  // and living 300 ms, a dead letter due again at once.
  RelayOptions relay_options(absl::flat_hash_map<std::string, RelayPolicy> policies = {}) {
    if (policies.empty()) policies.emplace("credited", RelayPolicy::retries(3));
    return {.schema = schema_,
            .transport = [this](const RelayMessage& m) { return downstream_(m); },
            .policies = std::move(policies),
            .retry = {.max_attempts = 2,
                      .base_delay = absl::Milliseconds(1),
                      .max_delay = absl::Milliseconds(2)},
            .dlq_backoff = absl::ZeroDuration(),
            .marker_ttl = absl::Milliseconds(300),
            .failure_threshold = 1,
            .poll_interval = absl::Milliseconds(20)};
  }
  std::int64_t add_message(std::string_view topic, std::string_view payload) {
    return std::stoll(scalar(fmt::format(
        "INSERT INTO {{schema}}.outbox (topic, payload) VALUES ('{}', '{}') RETURNING id", topic,
        payload)));
  }
  std::int64_t add_credit(int n) {
    return add_message("credited", fmt::format(R"({{"event_id": "e{}", "amount": "1"}})", n));
  }
  // Claims and delivers every outbox row / due dead letter once.
  std::vector<RelayDisposition> deliver_all(Relay& relay, bool dead_letters = false) {
    absl::StatusOr<std::vector<RelayMessage>> claimed =
        dead_letters ? relay.claim_dead_letters(*conn_, 100) : relay.claim_outbox(*conn_, 100);
    EXPECT_TRUE(claimed.ok()) << claimed.status();
    std::vector<RelayDisposition> out;
    for (const RelayMessage& m : claimed.value_or(std::vector<RelayMessage>{})) {
      absl::StatusOr<Relay::Delivery> o = relay.deliver(*conn_, m);
      EXPECT_TRUE(o.ok()) << o.status();
      if (o.ok()) out.push_back(o->disposition);
    }
    return out;
  }
  std::string letter(std::int64_t outbox_id, std::string_view column) {
    return scalar(fmt::format("SELECT {} FROM {{schema}}.relay_dead_letters WHERE outbox_id = {}",
                              column, outbox_id));
  }
  std::unique_ptr<Relay> make(RelayOptions options) {
    absl::StatusOr<std::unique_ptr<Relay>> relay = Relay::create(std::move(options));
    EXPECT_TRUE(relay.ok()) << relay.status();
    return relay.ok() ? *std::move(relay) : nullptr;
  }
  Relay::Decision decide(Relay& relay) {
    absl::StatusOr<Relay::Decision> d = relay.decide(*conn_);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.value_or(Relay::Decision{});
  }

  FakeDownstream downstream_;
};

using D = RelayDisposition;

TEST_F(RelayTest, LedgerWritesOneNotificationPerEventAndTheRelayDeliversItOnce) {
  ledger_ = std::make_unique<Ledger>(options({.write_notifications = true}));
  open_account(1, "0");
  const PaymentEvent deposit = event("dep-1", EventType::kDeposit, 1, "5");
  ASSERT_TRUE(ledger_->process_deposit(*conn_, deposit).ok());
  ASSERT_TRUE(ledger_->process_deposit(*conn_, deposit).ok()) << "a replay";
  ASSERT_EQ(count("SELECT count(*) FROM {schema}.outbox"), 1) << "the replay wrote none";

  const std::unique_ptr<Relay> relay_owner = make(relay_options());

  Relay& relay = *relay_owner;
  EXPECT_EQ(decide(relay).mode, RelayMode::kNormal);
  EXPECT_EQ(deliver_all(relay), std::vector<D>{D::kDelivered});
  const std::int64_t id = std::stoll(scalar("SELECT id FROM {schema}.outbox"));
  EXPECT_EQ(downstream_.calls(id), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NOT NULL"), 1);
  EXPECT_TRUE(deliver_all(relay).empty()) << "published rows are never claimed again";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.relay_dead_letters"), 0);
}

TEST_F(RelayTest, ClaimedRowsAreExclusiveUntilTheLeaseEnds) {
  add_credit(1);
  add_credit(2);
  const std::unique_ptr<Relay> a_owner = make(relay_options());
  Relay& a = *a_owner;
  RelayOptions other = relay_options();
  other.owner = "replica-b";
  const std::unique_ptr<Relay> b_owner = make(other);
  Relay& b = *b_owner;
  ASSERT_EQ(a.claim_outbox(*conn_, 1)->size(), 1u);
  absl::StatusOr<std::vector<RelayMessage>> rest = b.claim_outbox(*conn_, 10);
  ASSERT_EQ(rest->size(), 1u) << "b gets only what a did not claim";
  ASSERT_TRUE(b.release(*conn_, *rest).ok());
  EXPECT_EQ(a.claim_outbox(*conn_, 10)->size(), 1u) << "released rows are claimable at once";
}

// A replica paused past its lease (a frozen VM, SIGSTOP, swap) between its
// claim and its call: meanwhile the row's lease ran out and another replica
// claimed and delivered it. Thawed, the first sends nothing: the downstream
// is called once, and the first's delivery answers that its claim is gone.
// Each time it looks, from the outbox and from the DLQ.
TEST_F(RelayTest, AReplicaPausedPastItsLeaseSendsNothing) {
  for (const bool from_dead_letters : {false, true}) {
    SCOPED_TRACE(from_dead_letters ? "a dead letter" : "an outbox row");
    const std::int64_t id = add_credit(from_dead_letters ? 2 : 1);
    RelayOptions a_options = relay_options();
    a_options.owner = "replica-a";
    a_options.lease = absl::Milliseconds(300);
    RelayOptions b_options = relay_options();
    b_options.owner = "replica-b";
    const std::unique_ptr<Relay> a = make(a_options);
    const std::unique_ptr<Relay> b = make(b_options);
    if (from_dead_letters) {
      downstream_.answer(absl::UnavailableError("503"));
      ASSERT_EQ(deliver_all(*b), std::vector<D>{D::kDeadLettered});
      downstream_.answer(absl::OkStatus());
    }
    const int calls_before = downstream_.total_calls();
    absl::StatusOr<std::vector<RelayMessage>> paused =
        from_dead_letters ? a->claim_dead_letters(*conn_, 1) : a->claim_outbox(*conn_, 1);
    ASSERT_TRUE(paused.ok() && paused->size() == 1u);
    // The server's lease end, in Unix microseconds (one machine, one clock).
    const long long server_until = std::stoll(scalar(fmt::format(
        "SELECT (extract(epoch FROM claimed_until) * 1000000)::bigint FROM {{schema}}.{} "
        "WHERE {} = {}",
        from_dead_letters ? "relay_dead_letters" : "outbox", from_dead_letters ? "outbox_id" : "id",
        id)));
    EXPECT_LE(absl::ToUnixMicros(paused->front().claimed_until), server_until)
        << "the claim's end by this process's clock is never past the server's";
    absl::SleepFor(absl::Milliseconds(400));  // the pause
    EXPECT_EQ(deliver_all(*b, from_dead_letters), std::vector<D>{D::kDelivered});
    absl::StatusOr<Relay::Delivery> late = a->deliver(*conn_, paused->front());
    ASSERT_TRUE(late.ok()) << late.status();
    EXPECT_EQ(late->disposition, D::kNotClaimed);
    EXPECT_FALSE(late->called_downstream);
    // And had the wall clock stepped back an hour during the pause (NTP, an
    // operator), the monotonic clock still says the claim is over.
    RelayMessage stepped = paused->front();
    stepped.claimed_until += absl::Hours(1);
    late = a->deliver(*conn_, stepped);
    ASSERT_TRUE(late.ok()) << late.status();
    EXPECT_EQ(late->disposition, D::kNotClaimed);
    EXPECT_FALSE(late->called_downstream);
    EXPECT_EQ(downstream_.total_calls(), calls_before + 1) << "delivered once, by b";
    EXPECT_EQ(downstream_.calls(id), from_dead_letters ? 3 : 1);
    EXPECT_EQ(count(from_dead_letters
                        ? fmt::format("SELECT count(*) FROM {{schema}}.relay_dead_letters WHERE "
                                      "outbox_id = {} AND resolution = 'delivered'",
                                      id)
                        : fmt::format("SELECT count(*) FROM {{schema}}.outbox WHERE id = {} AND "
                                      "published_at IS NOT NULL",
                                      id)),
              1);
  }
}

// Paused past its lease between two tries of a failing call (the first one
// outlasted the lease): the row is not this replica's any more, but the
// downstream did fail, and the marker is set as after any failed delivery.
TEST_F(RelayTest, ACallThatFailedBeforeTheClaimEndedStillPausesAll) {
  add_credit(1);
  RelayOptions options = relay_options();
  options.lease = absl::Milliseconds(300);
  const std::unique_ptr<Relay> relay = make(options);
  ASSERT_EQ(decide(*relay).mode, RelayMode::kNormal);
  downstream_.answer(absl::UnavailableError("503 Service Unavailable"));
  downstream_.delay_ = absl::Milliseconds(400);
  absl::StatusOr<std::vector<RelayMessage>> claimed = relay->claim_outbox(*conn_, 1);
  ASSERT_TRUE(claimed.ok() && claimed->size() == 1u);
  absl::StatusOr<Relay::Delivery> late = relay->deliver(*conn_, claimed->front());
  downstream_.delay_ = absl::ZeroDuration();
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->disposition, D::kNotClaimed);
  EXPECT_TRUE(late->called_downstream);
  EXPECT_EQ(downstream_.total_calls(), 1) << "no try after the claim ended";
  EXPECT_EQ(decide(*relay).mode, RelayMode::kPaused) << "the failed call set the marker";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.relay_dead_letters"), 0);
}

TEST_F(RelayTest, AFailedDeliveryBecomesAnEnvelopeAroundTheUnchangedMessageAndPausesAll) {
  const std::int64_t id = add_credit(1);
  const std::string payload = scalar("SELECT payload::text FROM {schema}.outbox");
  downstream_.answer(absl::UnavailableError("503 Service Unavailable"));
  const std::unique_ptr<Relay> relay_owner = make(relay_options());
  Relay& relay = *relay_owner;
  RelayOptions other = relay_options();
  other.owner = "replica-b";
  const std::unique_ptr<Relay> replica_owner = make(other);
  Relay& replica = *replica_owner;

  EXPECT_EQ(deliver_all(relay), std::vector<D>{D::kDeadLettered});
  EXPECT_EQ(downstream_.calls(id), 2) << "retried in-process first";
  EXPECT_EQ(letter(id, "message::text"), payload);
  EXPECT_EQ(letter(id, "dlq_retries"), "1");
  EXPECT_THAT(letter(id, "reason"), ::testing::HasSubstr("503"));
  EXPECT_EQ(letter(id, "resolution"), "NULL");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE diverted_at IS NOT NULL "
                  "AND published_at IS NULL"),
            1)
      << "off the outbox, not marked delivered";

  // The marker lives: every replica pauses.
  add_credit(2);
  EXPECT_EQ(decide(relay).mode, RelayMode::kPaused);
  EXPECT_EQ(decide(replica).mode, RelayMode::kPaused);

  // It expires: exactly one replica probes; the other stays paused.
  absl::SleepFor(absl::Milliseconds(350));
  downstream_.answer(absl::OkStatus());
  const Relay::Decision first = decide(replica);
  EXPECT_TRUE(first.probe);
  EXPECT_EQ(first.mode, RelayMode::kDraining) << "the DLQ comes first";
  EXPECT_EQ(decide(relay).mode, RelayMode::kPaused) << "one probe across replicas";
  absl::StatusOr<std::vector<RelayMessage>> probe = replica.claim_dead_letters(*conn_, 1);
  ASSERT_EQ(probe->size(), 1u);
  EXPECT_EQ(replica.deliver(*conn_, probe->front(), /*probe=*/true)->disposition, D::kDelivered);

  EXPECT_EQ(decide(relay).mode, RelayMode::kNormal) << "marker gone, DLQ empty";
  EXPECT_EQ(letter(id, "resolution"), "delivered");
  EXPECT_EQ(deliver_all(relay), std::vector<D>{D::kDelivered});
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NOT NULL"), 2);
}

TEST_F(RelayTest, AFailedProbeSetsTheMarkerAgain) {
  add_credit(1);
  downstream_.answer(absl::UnavailableError("503"));
  const std::unique_ptr<Relay> relay_owner = make(relay_options());
  Relay& relay = *relay_owner;
  deliver_all(relay);
  absl::SleepFor(absl::Milliseconds(350));
  ASSERT_TRUE(decide(relay).probe);
  absl::StatusOr<std::vector<RelayMessage>> probe = relay.claim_dead_letters(*conn_, 1);
  ASSERT_EQ(probe->size(), 1u);
  EXPECT_EQ(relay.deliver(*conn_, probe->front(), true)->disposition, D::kDeadLettered);
  EXPECT_EQ(scalar("SELECT state FROM {schema}.circuit_breakers"), "open");
  EXPECT_EQ(decide(relay).mode, RelayMode::kPaused);
}

TEST_F(RelayTest, TheRetryCounterOnlyGrowsAcrossRestartsAndTheBudgetEndsIt) {
  const std::int64_t id = add_credit(1);
  downstream_.answer(absl::UnavailableError("503"));
  {
    const std::unique_ptr<Relay> first_process_owner =
        make(relay_options({{"credited", RelayPolicy::retries(3)}}));
    Relay& first_process = *first_process_owner;
    EXPECT_EQ(deliver_all(first_process), std::vector<D>{D::kDeadLettered});
  }
  const std::string first_dlq_at = letter(id, "first_dlq_at");
  for (int retries = 2; retries <= 3; ++retries) {
    const std::unique_ptr<Relay> restarted_owner =
        make(relay_options({{"credited", RelayPolicy::retries(3)}}));  // a new process
    Relay& restarted = *restarted_owner;
    EXPECT_EQ(deliver_all(restarted, /*dead_letters=*/true), std::vector<D>{D::kDeadLettered});
    EXPECT_EQ(letter(id, "dlq_retries"), std::to_string(retries));
    EXPECT_EQ(letter(id, "first_dlq_at"), first_dlq_at) << "never moves";
  }
  const std::unique_ptr<Relay> last_owner =
      make(relay_options({{"credited", RelayPolicy::retries(3)}}));
  Relay& last = *last_owner;
  EXPECT_EQ(deliver_all(last, true), std::vector<D>{D::kDropped});
  EXPECT_EQ(letter(id, "dlq_retries"), "4");
  EXPECT_EQ(letter(id, "resolution"), "dropped");
  EXPECT_EQ(letter(id, "drop_reason"), "max_retries_exceeded");
  EXPECT_TRUE(deliver_all(last, true).empty()) << "a dropped letter is kept, never retried";

  // Whoever writes, the envelope's rules hold.
  for (const char* tamper :
       {"UPDATE {schema}.relay_dead_letters SET dlq_retries = 1",
        "UPDATE {schema}.relay_dead_letters SET first_dlq_at = now()",
        "UPDATE {schema}.relay_dead_letters SET message = '{{}}'",
        "UPDATE {schema}.relay_dead_letters SET resolution = NULL, drop_reason = NULL"}) {
    absl::StatusOr<Result> r =
        conn_->execute(fmt::format(fmt::runtime(tamper), fmt::arg("schema", schema_name_)));
    EXPECT_EQ(sqlstate(r.status()), "IL017") << tamper;
  }
}

TEST_F(RelayTest, ABudgetOfZeroDropsTheFirstFailureButKeepsIt) {
  const std::int64_t id = add_credit(1);
  downstream_.answer(absl::UnavailableError("503"));
  const std::unique_ptr<Relay> relay_owner =
      make(relay_options({{"credited", RelayPolicy::retries(0)}}));
  Relay& relay = *relay_owner;
  EXPECT_EQ(deliver_all(relay), std::vector<D>{D::kDropped});
  EXPECT_EQ(letter(id, "drop_reason"), "max_retries_exceeded");
}

TEST_F(RelayTest, EachRelevanceResultAndTheDeadline) {
  // Payload "want" says what the source of truth answers for it.
  std::atomic<int> asked{0};
  const RelevanceCheck scripted = [&](Connection&, const RelayMessage& m) {
    ++asked;
    if (m.payload.find("\"mismatch\"") != std::string::npos) return Relevance::kMismatch;
    if (m.payload.find("\"match\"") != std::string::npos) return Relevance::kMatch;
    if (m.payload.find("expired") != std::string::npos) return Relevance::kExpired;
    return Relevance::kQueryFailed;
  };
  const auto policies = [&](absl::Duration deadline) {
    return absl::flat_hash_map<std::string, RelayPolicy>{
        {"status", RelayPolicy::deadline(deadline, scripted)}};
  };
  std::map<std::string, std::int64_t> ids;
  for (const char* want : {"match", "mismatch", "expired", "query_failed"}) {
    ids[want] = add_message("status", fmt::format(R"({{"want": "{}"}})", want));
  }
  downstream_.answer(absl::UnavailableError("503"));
  const std::unique_ptr<Relay> down_owner = make(relay_options(policies(absl::Hours(1))));
  Relay& down = *down_owner;
  ASSERT_EQ(deliver_all(down).size(), 4u);
  EXPECT_EQ(asked, 0) << "first deliveries are not relevance-checked";

  downstream_.answer(absl::OkStatus());
  const int calls_before = downstream_.total_calls();
  const std::unique_ptr<Relay> up_owner = make(relay_options(policies(absl::Hours(1))));
  Relay& up = *up_owner;
  deliver_all(up, /*dead_letters=*/true);
  EXPECT_EQ(asked, 4);
  EXPECT_EQ(letter(ids["match"], "resolution"), "delivered");
  EXPECT_EQ(letter(ids["mismatch"], "drop_reason"), "event_obsolete");
  EXPECT_EQ(letter(ids["expired"], "drop_reason"), "expired");
  EXPECT_EQ(letter(ids["query_failed"], "resolution"), "NULL");
  EXPECT_EQ(letter(ids["query_failed"], "dlq_retries"), "2") << "back to the DLQ";
  EXPECT_EQ(letter(ids["query_failed"], "reason"), "relevance_query_failed");
  EXPECT_EQ(downstream_.total_calls(), calls_before + 1) << "only MATCH is sent";

  // The checker keeps failing; the deadline still ends it, without asking.
  absl::SleepFor(absl::Milliseconds(250));
  const std::unique_ptr<Relay> late_owner = make(relay_options(policies(absl::Milliseconds(200))));
  Relay& late = *late_owner;
  EXPECT_EQ(deliver_all(late, true), std::vector<D>{D::kDropped});
  EXPECT_EQ(letter(ids["query_failed"], "drop_reason"), "deadline_exceeded");
  EXPECT_EQ(asked, 4);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.relay_dead_letters"), 4) << "all kept";
}

TEST_F(RelayTest, UndecodableMessagesGoToQuarantineAtOnce) {
  const MessageValidator needs_event_id = [](const RelayMessage& m) {
    return m.payload.find("\"event_id\"") != std::string::npos
               ? absl::OkStatus()
               : absl::InvalidArgumentError("event_id is required");
  };
  const std::int64_t unknown_topic = add_message("mystery", R"({"event_id": "x"})");
  const std::int64_t not_object = add_message("credited", "[1, 2]");
  const std::int64_t invalid = add_message("credited", R"({"amount": "1"})");
  const std::int64_t fine = add_credit(1);
  const std::unique_ptr<Relay> relay_owner =
      make(relay_options({{"credited", RelayPolicy::retries(3, needs_event_id)}}));
  Relay& relay = *relay_owner;
  EXPECT_EQ(deliver_all(relay),
            (std::vector<D>{D::kQuarantined, D::kQuarantined, D::kQuarantined, D::kDelivered}));
  for (const std::int64_t id : {unknown_topic, not_object, invalid}) {
    EXPECT_EQ(downstream_.calls(id), 0) << "no call, no retry spent";
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.relay_dead_letters"), 0) << "never the DLQ";
  EXPECT_THAT(scalar(fmt::format(
                  "SELECT reason FROM {{schema}}.relay_quarantine WHERE outbox_id = {}", invalid)),
              ::testing::HasSubstr("event_id is required"));
  EXPECT_THAT(
      scalar(fmt::format("SELECT reason FROM {{schema}}.relay_quarantine WHERE outbox_id = {}",
                         unknown_topic)),
      ::testing::HasSubstr("no relay policy for topic \"mystery\""));
  EXPECT_EQ(downstream_.calls(fine), 1);
}

TEST_F(RelayTest, ARefusalIsDroppedWithItsReasonAndDoesNotPause) {
  const std::int64_t id = add_credit(1);
  downstream_.answer(absl::InvalidArgumentError("400 unknown user"));
  const std::unique_ptr<Relay> relay_owner = make(relay_options());
  Relay& relay = *relay_owner;
  EXPECT_EQ(deliver_all(relay), std::vector<D>{D::kDropped});
  EXPECT_EQ(downstream_.calls(id), 1) << "retrying a refusal cannot help";
  EXPECT_EQ(letter(id, "drop_reason"), "rejected: 400 unknown user");
  add_credit(2);
  EXPECT_EQ(decide(relay).mode, RelayMode::kNormal);
}

TEST_F(RelayTest, LedgerRelevanceAsksTheLedger) {
  open_account(1, "0");
  ASSERT_TRUE(ledger_->process_deposit(*conn_, event("dep-1", EventType::kDeposit, 1, "5")).ok());
  ASSERT_TRUE(
      ledger_->process_withdrawal(*conn_, event("wd-1", EventType::kWithdrawal, 1, "50")).ok());
  exec("UPDATE {schema}.payment_events SET tx_hash = '0xabc' WHERE event_id = 'dep-1'");
  const RelevanceCheck check = ledger_relevance(schema_);
  const auto ask = [&](std::string topic, std::string event_id) {
    return check(*conn_, {.topic = std::move(topic),
                          .payload = fmt::format(R"({{"event_id": "{}"}})", event_id)});
  };
  EXPECT_EQ(ask("credited", "dep-1"), Relevance::kMatch);
  EXPECT_EQ(ask("insufficient_funds", "wd-1"), Relevance::kMatch);
  EXPECT_EQ(ask("credited", "nobody"), Relevance::kMismatch);
  EXPECT_EQ(ask("something_else", "dep-1"), Relevance::kExpired);
  ASSERT_TRUE(ledger_->process_compensation(*conn_, "0xabc", 1, *Amount::parse("5")).ok());
  EXPECT_EQ(ask("credited", "dep-1"), Relevance::kMismatch) << "a reorg reversed it";
  EXPECT_EQ(ledger_relevance("never_migrated")(*conn_, {.topic = "credited", .payload = "{}"}),
            Relevance::kQueryFailed);
}

TEST_F(RelayTest, LedgerRelevanceFollowsAHoldToItsFinalState) {
  open_account(1, "100");
  const RelevanceCheck check = ledger_relevance(schema_);
  const auto ask = [&](std::string topic) {
    return check(*conn_, {.topic = std::move(topic), .payload = R"({"event_id": "h1"})"});
  };
  ASSERT_EQ(ledger_->hold(*conn_, {.event_id = "h1", .user_id = 1, .amount = *Amount::parse("5")})
                ->outcome,
            HoldOutcome::kApplied);
  EXPECT_EQ(ask("held"), Relevance::kMatch);
  EXPECT_EQ(ask("posted"), Relevance::kMismatch);
  ASSERT_EQ(ledger_->void_hold(*conn_, {.hold_id = "h1"})->outcome, HoldOutcome::kApplied);
  EXPECT_EQ(ask("held"), Relevance::kMismatch) << "a 'held' letter after the void is obsolete";
  EXPECT_EQ(ask("voided"), Relevance::kMatch);
  EXPECT_EQ(ask("expired"), Relevance::kMismatch);
  ASSERT_EQ(ledger_->hold(*conn_, {.event_id = "h2", .user_id = 1, .amount = *Amount::parse("500")})
                ->outcome,
            HoldOutcome::kInsufficientFunds);
  EXPECT_EQ(check(*conn_, {.topic = "insufficient_funds", .payload = R"({"event_id": "h2"})"}),
            Relevance::kMatch);
}

TEST_F(RelayTest, RefusesAConfigurationItCannotRun) {
  RelayOptions no_transport = relay_options();
  no_transport.transport = nullptr;
  EXPECT_EQ(Relay::create(no_transport).status().code(), absl::StatusCode::kInvalidArgument);
  RelayPolicy both = RelayPolicy::retries(3);
  both.relevance = [](Connection&, const RelayMessage&) { return Relevance::kMatch; };
  EXPECT_EQ(Relay::create(relay_options({{"credited", both}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  RelayOptions drain_too_wide = relay_options();
  drain_too_wide.drain_concurrency = drain_too_wide.max_in_flight + 1;
  EXPECT_EQ(Relay::create(drain_too_wide).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Relay::create(relay_options({{"credited", RelayPolicy::retries(-1)}})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// run(): pooled sessions, the bound on concurrent calls, and a stop that
// finishes what it holds.
class RelayRun : public RelayTest {
 protected:
  pg::Pool pool_{{.dsn = test_dsn(), .max_size = 8, .connection = test_connection_options()}};
  SessionLender sessions() { return pool_.lender(); }
};

// A relay pointed at a schema nobody migrated cannot do anything; it must
// say so on every cycle (a log line and a counted error per failed step)
// instead of polling forever in silence.
TEST_F(RelayRun, EveryErrorTheLoopMeetsIsLoggedAndCounted) {
  struct Lines : LogSink {
    void log(const LogRecord& r) override {
      MutexLock lock(&mu);
      messages.emplace_back(r.message);
    }
    Mutex mu;
    std::vector<std::string> messages ABSL_GUARDED_BY(mu);
  } logs;
  prometheus::Registry registry;
  RelayOptions o = relay_options();
  o.schema = *Schema::create(schema_name_ + "_never_migrated");
  o.metrics = &registry;
  o.log = &logs;
  const std::unique_ptr<Relay> relay = make(o);
  std::atomic<bool> stop{false};
  std::thread runner([&] { relay->run(sessions(), [&] { return stop.load(); }); });
  absl::SleepFor(absl::Milliseconds(300));
  stop = true;
  runner.join();
  const auto metrics = parse_prometheus_text(render(registry));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GE(std::stoi(metrics->at("idemledger_relay_errors_total{step=\"decide\"}")), 2)
      << "each cycle's failure is counted";
  MutexLock lock(&logs.mu);
  EXPECT_GE(std::count(logs.messages.begin(), logs.messages.end(), "relay step failed; retrying"),
            2);
}

TEST_F(RelayRun, DeliversEverythingWithinTheConcurrencyBound) {
  for (int i = 0; i < 60; ++i) add_credit(i);
  downstream_.delay_ = absl::Milliseconds(5);
  prometheus::Registry registry;
  RelayOptions o = relay_options();
  o.max_in_flight = 4;
  o.metrics = &registry;
  const std::unique_ptr<Relay> relay_owner = make(o);
  Relay& relay = *relay_owner;
  std::atomic<bool> stop{false};
  std::thread runner([&] { relay.run(sessions(), [&] { return stop.load(); }); });
  for (int i = 0; i < 500 && downstream_.delivered().size() < 60; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  stop = true;
  runner.join();
  const std::map<std::int64_t, int> delivered = downstream_.delivered();
  ASSERT_EQ(delivered.size(), 60u);
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "outbox " << id;
  EXPECT_LE(downstream_.max_concurrent_.load(), 4);
  EXPECT_GE(downstream_.max_concurrent_.load(), 2) << "it does deliver concurrently";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NULL"), 0);
  const auto metrics = parse_prometheus_text(render(registry));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->at("idemledger_relay_messages_total{result=\"delivered\"}"), "60");
  EXPECT_EQ(metrics->at("idemledger_relay_in_flight"), "0");
}

TEST_F(RelayRun, StopFinishesEveryDeliveryInFlightAndClaimsNothingNew) {
  for (int i = 0; i < 40; ++i) add_credit(i);
  downstream_.delay_ = absl::Milliseconds(100);
  RelayOptions o = relay_options();
  o.max_in_flight = 4;
  const std::unique_ptr<Relay> relay_owner = make(o);
  Relay& relay = *relay_owner;
  std::atomic<bool> stop{false};
  std::thread runner([&] { relay.run(sessions(), [&] { return stop.load(); }); });
  while (downstream_.max_concurrent_.load() < 4) absl::SleepFor(absl::Milliseconds(5));
  stop = true;
  runner.join();
  const std::size_t delivered = downstream_.delivered().size();
  EXPECT_GE(delivered, 4u) << "those in flight at the stop finished";
  EXPECT_LT(delivered, 40u) << "nothing new after the stop";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NOT NULL"),
            static_cast<long>(delivered))
      << "every 2xx recorded";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NULL "
                  "AND claimed_until > now()"),
            0)
      << "nothing left claimed: another replica can take the rest at once";
}

// A session that dies on the statement marking a delivery published, once.
class DiesOnTheMark : public ForwardingConnection {
 public:
  DiesOnTheMark(Connection& real, std::atomic<bool>& armed)
      : ForwardingConnection(real), armed_(armed) {}
  using Connection::execute;
  absl::StatusOr<Result> execute(std::string_view sql, std::span<const Param> params) override {
    if (sql.find("SET published_at = pg_catalog.now()") != std::string_view::npos &&
        armed_.exchange(false)) {
      absl::Status died = absl::UnavailableError("server closed the connection unexpectedly");
      mark_connection_broken(died);
      return died;
    }
    return ForwardingConnection::execute(sql, params);
  }

 private:
  std::atomic<bool>& armed_;
};

TEST_F(RelayRun, AMarkLostWithItsSessionIsWrittenAgainNotSentAgain) {
  const std::int64_t id = add_credit(1);
  std::atomic<bool> armed{true};
  const SessionLender dying_once = [&](const std::function<void(Connection&)>& work) {
    return sessions()([&](Connection& conn) {
      DiesOnTheMark flaky(conn, armed);
      work(flaky);
    });
  };
  const std::unique_ptr<Relay> relay_owner = make(relay_options());
  Relay& relay = *relay_owner;
  std::atomic<bool> stop{false};
  std::thread runner([&] { relay.run(dying_once, [&] { return stop.load(); }); });
  for (int i = 0; i < 250 && count("SELECT count(*) FROM {schema}.outbox WHERE published_at "
                                   "IS NOT NULL") == 0;
       ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop = true;
  runner.join();
  EXPECT_FALSE(armed.load()) << "the mark's session did die";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NOT NULL"), 1)
      << "written on a fresh session, not left to the 60 s lease";
  EXPECT_EQ(downstream_.calls(id), 1) << "and not sent again";
}

// The modes a relay went through, in order, from its "relay mode changed" lines.
struct ModeLog : LogSink {
  void log(const LogRecord& r) override {
    if (r.message != "relay mode changed") return;
    for (const LogField& f : r.fields) {
      if (f.key == "to") {
        MutexLock lock(&mu);
        modes.emplace_back(std::get<std::string_view>(f.value));
      }
    }
  }
  std::vector<std::string> seen() {
    MutexLock lock(&mu);
    return modes;
  }
  Mutex mu;
  std::vector<std::string> modes ABSL_GUARDED_BY(mu);
};

TEST_F(RelayRun, AnOutageDeadLettersPausesThenDrainsTheDlqBeforeNewWork) {
  for (int i = 0; i < 10; ++i) add_credit(i);
  downstream_.answer(absl::UnavailableError("503"));
  ModeLog modes;
  RelayOptions o = relay_options();
  o.max_in_flight = 2;
  o.drain_concurrency = 1;
  o.marker_ttl = absl::Seconds(1);
  o.log = &modes;
  const std::unique_ptr<Relay> relay_owner = make(o);
  Relay& relay = *relay_owner;
  std::atomic<bool> stop{false};
  std::thread runner([&] { relay.run(sessions(), [&] { return stop.load(); }); });
  while (count("SELECT count(*) FROM {schema}.relay_dead_letters") == 0) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const int calls_when_marked = downstream_.total_calls();
  absl::SleepFor(absl::Milliseconds(150));
  // Each second the marker lapses, one probe may call (and fail) too.
  EXPECT_LE(downstream_.total_calls(), calls_when_marked + 2 * 2)
      << "paused: only what was already in flight finished";
  const long dead = count("SELECT count(*) FROM {schema}.relay_dead_letters");
  downstream_.answer(absl::OkStatus());
  for (int i = 0; i < 500 && downstream_.delivered().size() < 10; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  stop = true;
  runner.join();
  ASSERT_EQ(downstream_.delivered().size(), 10u);
  // The order, not the moment: a loaded machine may stall the test past the
  // marker's second, but not reorder what the relay did.
  const std::vector<std::string> seen = modes.seen();
  const auto paused = std::find(seen.begin(), seen.end(), "paused");
  ASSERT_NE(paused, seen.end()) << "the outage paused the relay";
  EXPECT_NE(std::find(paused, seen.end(), "draining"), seen.end())
      << "then it drained the dead letters";
  EXPECT_EQ(
      count("SELECT count(*) FROM {schema}.relay_dead_letters WHERE resolution = 'delivered'"),
      dead);
  // Every dead letter was delivered before any row still on the outbox.
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox o, {schema}.relay_dead_letters d "
                  "WHERE o.diverted_at IS NULL AND o.published_at < d.resolved_at"),
            0);
}

}  // namespace
}  // namespace idemledger::testing
