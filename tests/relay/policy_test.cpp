// The relay's decisions, without a database: each policy's verdict, what
// decodes, and what decide()/deliver() do with the answers the server gives
// (a FakeConnection scripts them).
#include "idemledger/relay/policy.hpp"

#include "gmock/gmock.h"
#include "idemledger/relay/relay.hpp"
#include "tests/support/fake_connection.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

RelayMessage letter(absl::Duration since_first, std::string topic = "credited") {
  return {.outbox_id = 1,
          .topic = std::move(topic),
          .payload = R"({"event_id":"e1"})",
          .dead_letter_id = 9,
          .dlq_retries = 2,
          .since_first_dlq = since_first};
}

TEST(Judge, EachRelevanceAnswerAndTheDeadline) {
  FakeConnection conn;
  Relevance answer = Relevance::kMatch;
  int asked = 0;
  const RelayPolicy policy =
      RelayPolicy::deadline(absl::Hours(1), [&](Connection&, const RelayMessage&) {
        ++asked;
        return answer;
      });
  EXPECT_TRUE(judge(conn, letter(absl::Minutes(5)), policy).send());
  answer = Relevance::kMismatch;
  EXPECT_EQ(judge(conn, letter(absl::Minutes(5)), policy).drop_reason, kDropObsolete);
  answer = Relevance::kExpired;
  EXPECT_EQ(judge(conn, letter(absl::Minutes(5)), policy).drop_reason, kDropExpired);
  answer = Relevance::kQueryFailed;
  const Verdict requeue = judge(conn, letter(absl::Minutes(5)), policy);
  EXPECT_TRUE(requeue.requeue);
  EXPECT_FALSE(requeue.drop_reason);
  const int before = asked;
  EXPECT_EQ(judge(conn, letter(absl::Hours(2)), policy).drop_reason, kDropDeadlineExceeded);
  EXPECT_EQ(asked, before) << "past the deadline the source of truth is not asked";
  EXPECT_TRUE(judge(conn, letter(absl::Hours(99)), RelayPolicy::retries(3)).send())
      << "a budget was applied when the letter was written";
  EXPECT_TRUE(conn.calls().empty());
}

TEST(Decode, NeedsAPolicyAJsonObjectAndTheValidatorsYes) {
  const RelayPolicy plain = RelayPolicy::retries(1);
  const RelayPolicy strict = RelayPolicy::retries(1, [](const RelayMessage& m) {
    return m.payload.find("event_id") == std::string::npos ? absl::InvalidArgumentError("no id")
                                                           : absl::OkStatus();
  });
  EXPECT_TRUE(decode({.topic = "t", .payload = R"({"event_id":"e"})"}, &strict).ok());
  EXPECT_THAT(std::string(decode({.topic = "t", .payload = "{}"}, nullptr).message()),
              HasSubstr("no relay policy for topic \"t\""));
  EXPECT_FALSE(decode({.payload = "[1]"}, &plain).ok());
  EXPECT_FALSE(decode({.payload = "{not json"}, &plain).ok());
  EXPECT_THAT(std::string(decode({.payload = "{}"}, &strict).message()), HasSubstr("no id"));
}

TEST(RelayPolicy, ExactlyOneKindWithSaneValues) {
  EXPECT_TRUE(RelayPolicy::retries(0).check("t").ok());
  EXPECT_FALSE(RelayPolicy::retries(-1).check("t").ok());
  EXPECT_FALSE(RelayPolicy{}.check("t").ok()) << "neither";
  RelayPolicy both = RelayPolicy::retries(1);
  both.relevance = [](Connection&, const RelayMessage&) { return Relevance::kMatch; };
  EXPECT_FALSE(both.check("t").ok());
  EXPECT_FALSE(
      RelayPolicy::deadline(absl::ZeroDuration(),
                            [](Connection&, const RelayMessage&) { return Relevance::kMatch; })
          .check("t")
          .ok());
}

class RelayDecisions : public ::testing::Test {
 protected:
  std::unique_ptr<Relay> relay(DeliveryTransport transport) {
    return *Relay::create({.transport = std::move(transport),
                           .policies = {{"credited", RelayPolicy::retries(3)}},
                           .retry = {.max_attempts = 2,
                                     .base_delay = absl::Microseconds(1),
                                     .max_delay = absl::Microseconds(2)},
                           .failure_threshold = 5,
                           .owner = "me"});
  }
  FakeConnection conn_;
};

TEST_F(RelayDecisions, DecideReadsTheMarkerAndTheDlqWithoutLockingWhenClosed) {
  const std::unique_ptr<Relay> r = relay([](const RelayMessage&) { return absl::OkStatus(); });
  conn_.on("EXISTS", FakeConnection::rows({{"f", "t", {}}}));
  EXPECT_EQ(r->decide(conn_)->mode, RelayMode::kNormal);
  conn_.on("EXISTS", FakeConnection::rows({{"t", "t", "closed"}}));
  EXPECT_EQ(r->decide(conn_)->mode, RelayMode::kDraining);
  EXPECT_THAT(conn_.statements(), ::testing::Each(::testing::Not(HasSubstr("breaker_acquire"))))
      << "a closed marker costs no write";
  conn_.on("EXISTS", FakeConnection::rows({{"f", "t", "open"}}));
  conn_.on("breaker_acquire", FakeConnection::rows({{"reject"}}));
  EXPECT_EQ(r->decide(conn_)->mode, RelayMode::kPaused);
  conn_.on("breaker_acquire", FakeConnection::rows({{"probe"}}));
  const Relay::Decision probe = *r->decide(conn_);
  EXPECT_TRUE(probe.probe);
  EXPECT_EQ(probe.mode, RelayMode::kNormal);
}

TEST_F(RelayDecisions, DecideRefusesAnAnswerItCannotRead) {
  const std::unique_ptr<Relay> r = relay([](const RelayMessage&) { return absl::OkStatus(); });
  conn_.on("EXISTS", FakeConnection::rows({{"t", "perhaps", "closed"}}));
  const absl::StatusOr<Relay::Decision> d = r->decide(conn_);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInternal) << "never a silent false";
}

TEST_F(RelayDecisions, DeliverRecordsWhatTheDownstreamAnswered) {
  absl::Status downstream = absl::OkStatus();
  int calls = 0;
  const std::unique_ptr<Relay> r = relay([&](const RelayMessage&) {
    ++calls;
    return downstream;
  });
  const RelayMessage fresh{.outbox_id = 5, .topic = "credited", .payload = "{}"};
  conn_.on("published_at = pg_catalog.now()", FakeConnection::rows({}, 1));
  EXPECT_EQ(r->deliver(conn_, fresh)->disposition, RelayDisposition::kDelivered);
  EXPECT_THAT(conn_.params_of("published_at = pg_catalog.now()"),
              ::testing::ElementsAre("5", "me"));

  downstream = absl::UnavailableError("HTTP 503");
  conn_.on("breaker_record", FakeConnection::rows({{"closed"}}));
  conn_.on("INSERT INTO idemledger.relay_dead_letters", FakeConnection::rows({}, 1));
  calls = 0;
  const absl::StatusOr<Relay::Delivery> failed = r->deliver(conn_, fresh);
  EXPECT_EQ(failed->disposition, RelayDisposition::kDeadLettered);
  EXPECT_EQ(calls, 2) << "retry.max_attempts calls, then the envelope";

  downstream = absl::InvalidArgumentError("HTTP 400");
  conn_.on("INSERT INTO idemledger.relay_dead_letters", FakeConnection::rows({}, 1));
  calls = 0;
  EXPECT_EQ(r->deliver(conn_, fresh)->disposition, RelayDisposition::kDropped);
  EXPECT_EQ(calls, 1) << "a refusal is not retried";
  EXPECT_THAT(conn_.params_of("relay_dead_letters").back(), ::testing::Optional(HasSubstr("400")));

  conn_.on("published_at = pg_catalog.now()", FakeConnection::rows({}, 0));
  downstream = absl::OkStatus();
  EXPECT_EQ(r->deliver(conn_, fresh)->disposition, RelayDisposition::kNotClaimed)
      << "a lease lost meanwhile is reported, not overwritten";
}

TEST_F(RelayDecisions, AnUndecodableMessageIsQuarantinedWithoutACall) {
  int calls = 0;
  const std::unique_ptr<Relay> r = relay([&](const RelayMessage&) {
    ++calls;
    return absl::OkStatus();
  });
  conn_.on("relay_quarantine", FakeConnection::rows({}, 1));
  const absl::StatusOr<Relay::Delivery> d =
      r->deliver(conn_, {.outbox_id = 6, .topic = "unknown_topic", .payload = "{}"});
  EXPECT_EQ(d->disposition, RelayDisposition::kQuarantined);
  EXPECT_FALSE(d->called_downstream);
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace idemledger::testing
