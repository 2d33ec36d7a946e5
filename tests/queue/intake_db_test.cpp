// Intake on a real server: record as pending, duplicates, conflicts, unknown
// addresses, and the whole path intake -> dispatcher -> ledger.
#include <atomic>
#include <thread>

#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/intake.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class Intake : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    open_account(1, "0");
    open_account(2, "0");
    exec(
        "INSERT INTO {schema}.deposit_addresses (address, user_id) VALUES ('0xaaa', 1), ('0xbbb', "
        "2)");
  }
  absl::StatusOr<RecordResult> record(std::string_view body, std::string_view trace = "trace-1") {
    absl::StatusOr<WebhookEvent> e = parse_webhook(body);
    if (!e.ok()) return e.status();
    return record_webhook_event(*conn_, schema_, *e, trace, body);
  }
};

TEST_F(Intake, RecordsPendingThenAbsorbsDuplicates) {
  const std::string body =
      R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xbbb"})";
  EXPECT_EQ(*record(body), RecordResult::kAccepted);
  EXPECT_EQ(*record(body), RecordResult::kDuplicate);
  // The same event with an equal amount spelled differently is still a duplicate.
  EXPECT_EQ(
      *record(R"({"event_id":"e1","event_type":"deposit","amount":"5.000","to_address":"0xbbb"})"),
      RecordResult::kDuplicate);
  EXPECT_EQ(
      scalar("SELECT status || ' ' || user_id || ' ' || trace_id FROM {schema}.payment_events"),
      "pending 2 trace-1");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 1);
  EXPECT_EQ(balance(2), "0") << "intake never applies";
}

TEST_F(Intake, ConflictingContentIsRefused) {
  ASSERT_EQ(
      *record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xaaa"})"),
      RecordResult::kAccepted);
  for (const char* changed :
       {R"({"event_id":"e1","event_type":"deposit","amount":"6","to_address":"0xaaa"})",
        R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xbbb"})",
        R"({"event_id":"e1","event_type":"airdrop","amount":"5","to_address":"0xaaa"})"}) {
    absl::StatusOr<RecordResult> r = record(changed);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << changed;
  }
  EXPECT_EQ(scalar("SELECT amount::text || ' ' || user_id FROM {schema}.payment_events"),
            "5.000000000000000000 1");
}

TEST_F(Intake, UnknownAddressIsKeptForReviewAndCreditsNobody) {
  const std::string body =
      R"({"event_id":"e9","event_type":"deposit","amount":"5","to_address":"0xnobody"})";
  EXPECT_EQ(*record(body), RecordResult::kUnmatchedAddress);
  EXPECT_EQ(*record(body), RecordResult::kUnmatchedAddress);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0);
  EXPECT_EQ(scalar("SELECT to_address || ' ' || (payload = $$" + body +
                   "$$) FROM {schema}.unmatched_deposits"),
            "0xnobody true");
}

TEST_F(Intake, KnownIdSentToAnUnknownAddressIsAConflict) {
  ASSERT_EQ(
      *record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xaaa"})"),
      RecordResult::kAccepted);
  EXPECT_EQ(
      record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xnobody"})")
          .status()
          .code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.unmatched_deposits"), 0);
}

TEST_F(Intake, PayloadUserIdNeverDecidesWhoIsCredited) {
  ASSERT_EQ(
      *record(
          R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xaaa","user_id":2})"),
      RecordResult::kAccepted);
  EXPECT_EQ(scalar("SELECT user_id FROM {schema}.payment_events"), "1");
}

TEST_F(Intake, WithdrawalForAnUnknownUserIsNotFound) {
  EXPECT_EQ(record(R"({"event_id":"w1","event_type":"withdrawal","amount":"5","user_id":99})")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0);
}

TEST_F(Intake, AcceptedEventWakesAListeningWorker) {
  IDEMLEDGER_NEEDS_OWN_SESSION("LISTEN");
  Dispatcher d(*ledger_, {.schema = schema_, .alerts = &alerts_});
  std::unique_ptr<pg::Connection> worker = connect();
  ASSERT_TRUE(d.listen(*worker).ok());
  EXPECT_FALSE(*d.wait_for_work(*worker, absl::Milliseconds(50))) << "nothing yet";
  std::thread intake([&] {
    absl::SleepFor(absl::Milliseconds(100));
    std::unique_ptr<pg::Connection> c = connect();
    const std::string body =
        R"({"event_id":"n1","event_type":"deposit","amount":"1","to_address":"0xaaa"})";
    EXPECT_EQ(*record_webhook_event(*c, schema_, *parse_webhook(body), "", body),
              RecordResult::kAccepted);
  });
  const absl::Time start = absl::Now();
  EXPECT_TRUE(*d.wait_for_work(*worker, absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "woken by NOTIFY, not by the timeout";
  intake.join();
  EXPECT_EQ(*d.run_once(*worker), 1);
  EXPECT_EQ(balance(1), "1");
}

// 8 threads deliver 60 distinct events 5 times each, concurrently; workers
// then apply them: 60 rows, each applied once.
TEST_F(Intake, ConcurrentRedeliveriesThenWorkersApplyEachOnce) {
  constexpr int kEvents = 60, kCopies = 5, kThreads = 8;
  std::atomic<int> accepted{0}, duplicates{0}, errors{0};
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::unique_ptr<pg::Connection> c = connect();
      for (int i; (i = next++) < kEvents * kCopies;) {
        const int id = i % kEvents;
        const std::string body = R"({"event_id":"c)" + std::to_string(id) +
                                 R"(","event_type":"deposit","amount":"1.5","to_address":")" +
                                 (id % 2 ? "0xaaa" : "0xbbb") + R"("})";
        absl::StatusOr<RecordResult> r =
            record_webhook_event(*c, schema_, *parse_webhook(body), "", body);
        if (!r.ok()) {
          ++errors;
        } else if (*r == RecordResult::kAccepted) {
          ++accepted;
        } else {
          ++duplicates;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(accepted.load(), kEvents);
  EXPECT_EQ(duplicates.load(), kEvents * (kCopies - 1));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'pending'"),
            kEvents);

  Dispatcher d(*ledger_, {.schema = schema_, .batch_size = 25, .alerts = &alerts_});
  while (*d.run_once(*conn_) > 0) {
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"),
            kEvents);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), kEvents);
  EXPECT_EQ(balance(1), "45");
  EXPECT_EQ(balance(2), "45");
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
