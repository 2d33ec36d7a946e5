// Intake on a real server: record as pending, duplicates, conflicts, unknown
// addresses, and the whole path intake -> dispatcher -> ledger.
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/intake.hpp"
#include "libpq-fe.h"
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

// Group commit: 8 threads deliver 60 events 5 times each, plus deliveries
// the database refuses, through one RecordBatcher. Every delivery gets the
// answer it gets alone; the transactions are fewer than the events (now() is
// a transaction's start, so created_at tells them apart).
TEST_F(Intake, GroupCommit_DeliveriesShareTransactionsAndEachGetsItsOwnAnswer) {
  ASSERT_EQ(
      *record(R"({"event_id":"pre","event_type":"deposit","amount":"1","to_address":"0xaaa"})"),
      RecordResult::kAccepted);
  constexpr int kEvents = 60, kCopies = 5, kThreads = 8, kRefusedEach = 10;
  RecordBatcher batcher({.schema = schema_, .max_wait = absl::Milliseconds(5), .max_batch = 16});
  std::atomic<int> accepted{0}, duplicates{0}, conflicts{0}, not_found{0}, invalid{0}, other{0};
  std::atomic<int> next{0};
  const int total = kEvents * kCopies + 3 * kRefusedEach;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::unique_ptr<pg::Connection> c = connect();
      for (int i; (i = next++) < total;) {
        std::string body;
        if (i < kEvents * kCopies) {
          const int id = i % kEvents;
          body = R"({"event_id":"g)" + std::to_string(id) +
                 R"(","event_type":"deposit","amount":"1.5","to_address":")" +
                 (id % 2 ? "0xaaa" : "0xbbb") + R"("})";
        } else if (const int k = i - kEvents * kCopies; k < kRefusedEach) {
          body = R"({"event_id":"pre","event_type":"deposit","amount":"2","to_address":"0xaaa"})";
        } else if (k < 2 * kRefusedEach) {
          body = R"({"event_id":"w)" + std::to_string(k) +
                 R"(","event_type":"withdrawal","amount":"1","user_id":999})";
        } else {
          body = R"({"event_id":"x)" + std::to_string(k) +
                 R"(","event_type":"deposit","amount":"1","asset":"NOPE","to_address":"0xaaa"})";
        }
        absl::StatusOr<RecordResult> r = batcher.record(*c, *parse_webhook(body), "", body);
        if (r.ok()) {
          (*r == RecordResult::kAccepted ? accepted : duplicates)++;
        } else if (r.status().code() == absl::StatusCode::kAlreadyExists) {
          ++conflicts;
        } else if (r.status().code() == absl::StatusCode::kNotFound) {
          ++not_found;
        } else if (r.status().code() == absl::StatusCode::kInvalidArgument) {
          ++invalid;
        } else {
          std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
          ++other;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(accepted.load(), kEvents);
  EXPECT_EQ(duplicates.load(), kEvents * (kCopies - 1));
  EXPECT_EQ(conflicts.load(), kRefusedEach);
  EXPECT_EQ(not_found.load(), kRefusedEach);
  EXPECT_EQ(invalid.load(), kRefusedEach);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE event_id LIKE 'g%'"),
            kEvents);
  const long transactions = count(
      "SELECT count(DISTINCT created_at) FROM {schema}.payment_events WHERE event_id LIKE 'g%'");
  EXPECT_LT(transactions, kEvents) << "deliveries shared transactions";
  EXPECT_GE(transactions, kEvents / 16);

  Dispatcher d(*ledger_, {.schema = schema_, .batch_size = 25, .alerts = &alerts_});
  while (*d.run_once(*conn_) > 0) {
  }
  EXPECT_EQ(balance(1), "46");  // 30 x 1.5 + pre
  EXPECT_EQ(balance(2), "45");
  expect_reconciled();
}

// With nothing being recorded a delivery goes at once, however long
// max_wait is; while a batch is being recorded the next one gathers and
// goes as soon as it commits — well before max_wait.
TEST_F(Intake, GroupCommit_AnIdleIntakeDoesNotWaitAndABusyOneGathers) {
  RecordBatcher batcher({.schema = schema_, .max_wait = absl::Seconds(20), .max_batch = 64});
  const std::string lone =
      R"({"event_id":"lone","event_type":"deposit","amount":"1","to_address":"0xaaa"})";
  const absl::Time start = absl::Now();
  ASSERT_EQ(*batcher.record(*conn_, *parse_webhook(lone), "", lone), RecordResult::kAccepted);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "idle: no gathering";

  constexpr int kThreads = 8, kEach = 25;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::atomic<int> accepted{0};
  const absl::Time busy = absl::Now();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<pg::Connection> c = connect();
      for (int i = 0; i < kEach; ++i) {
        const std::string body = R"({"event_id":"b)" + std::to_string(t) + "_" + std::to_string(i) +
                                 R"(","event_type":"deposit","amount":"1","to_address":"0xbbb"})";
        absl::StatusOr<RecordResult> r = batcher.record(*c, *parse_webhook(body), "", body);
        if (r.ok() && *r == RecordResult::kAccepted) ++accepted;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(accepted.load(), kThreads * kEach);
  EXPECT_LT(absl::Now() - busy, absl::Seconds(15)) << "no batch waited out max_wait";
  const long transactions = count(
      "SELECT count(DISTINCT created_at) FROM {schema}.payment_events WHERE event_id LIKE 'b%'");
  EXPECT_LT(transactions, kThreads * kEach) << "deliveries shared transactions";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE event_id LIKE 'b%' AND "
                  "status = 'pending'"),
            kThreads * kEach);
}

// How many notifications a raw LISTEN session receives on the schema's
// channel until `quiet` passes with none (libpq directly: the library's
// wait_for_notification() drains them all as one wake-up, by design).
int notifications_until_quiet(PGconn* listener, absl::Duration quiet) {
  int n = 0;
  for (absl::Time until = absl::Now() + quiet; absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(10));
    if (PQconsumeInput(listener) != 1) return -1;
    while (PGnotify* note = PQnotifies(listener)) {
      PQfreemem(note);
      ++n;
      until = absl::Now() + quiet;
    }
  }
  return n;
}

// A group commit of many accepted deliveries wakes the workers once.
TEST_F(Intake, GroupCommit_OneBatchIsOneNotification) {
  IDEMLEDGER_NEEDS_OWN_SESSION("LISTEN");
  std::unique_ptr<PGconn, decltype(&PQfinish)> listener(PQconnectdb(test_dsn().c_str()), &PQfinish);
  ASSERT_EQ(PQstatus(listener.get()), CONNECTION_OK) << PQerrorMessage(listener.get());
  const std::string listen = "LISTEN " + schema_name_ + "_events";
  PQclear(PQexec(listener.get(), listen.c_str()));
  ASSERT_EQ(notifications_until_quiet(listener.get(), absl::Milliseconds(100)), 0);

  constexpr int kDeliveries = 6;
  // Gathering for max_wait (max_in_flight 0), so the six share one batch.
  RecordBatcher batcher({.schema = schema_,
                         .max_wait = absl::Seconds(5),
                         .max_batch = kDeliveries,
                         .max_in_flight = 0});
  std::vector<std::thread> threads;
  std::atomic<int> accepted{0};
  for (int i = 0; i < kDeliveries; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<pg::Connection> c = connect();
      const std::string body = R"({"event_id":"one)" + std::to_string(i) +
                               R"(","event_type":"deposit","amount":"1","to_address":"0xaaa"})";
      absl::StatusOr<RecordResult> r = batcher.record(*c, *parse_webhook(body), "", body);
      if (r.ok() && *r == RecordResult::kAccepted) ++accepted;
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(accepted.load(), kDeliveries);
  ASSERT_EQ(count("SELECT count(DISTINCT created_at) FROM {schema}.payment_events"), 1)
      << "the leader waits for all of them: one transaction";
  EXPECT_EQ(notifications_until_quiet(listener.get(), absl::Milliseconds(300)), 1);

  // A single delivery still wakes them, once.
  ASSERT_EQ(
      *record(R"({"event_id":"solo","event_type":"deposit","amount":"1","to_address":"0xbbb"})"),
      RecordResult::kAccepted);
  EXPECT_EQ(notifications_until_quiet(listener.get(), absl::Milliseconds(300)), 1);
}

// A connection whose every statement fails as a lost session would.
class LostConnection : public ForwardingConnection {
 public:
  using Connection::execute;
  using ForwardingConnection::ForwardingConnection;
  absl::StatusOr<Result> execute(std::string_view, std::span<const Param>) override {
    return absl::UnavailableError("connection lost (test)");
  }
};

// The batch's transaction fails: every delivery in it, the followers' too,
// gets the retryable error — nobody may answer 200 — and nothing is recorded.
TEST_F(Intake, GroupCommit_AFailedBatchFailsEveryDeliveryInIt) {
  RecordBatcher batcher(
      {.schema = schema_, .max_wait = absl::Milliseconds(500), .max_batch = 2, .max_in_flight = 0});
  LostConnection lost(*conn_);
  const std::string first =
      R"({"event_id":"f1","event_type":"deposit","amount":"1","to_address":"0xaaa"})";
  const std::string second =
      R"({"event_id":"f2","event_type":"deposit","amount":"1","to_address":"0xbbb"})";
  absl::StatusOr<RecordResult> led, followed;
  std::thread leader([&] { led = batcher.record(lost, *parse_webhook(first), "", first); });
  absl::SleepFor(absl::Milliseconds(100));  // the leader is gathering
  std::unique_ptr<pg::Connection> fine = connect();
  followed = batcher.record(*fine, *parse_webhook(second), "", second);
  leader.join();
  EXPECT_EQ(led.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(followed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(is_retryable(followed.status()));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0);
  // Sent again, each is recorded.
  EXPECT_EQ(*batcher.record(*fine, *parse_webhook(second), "", second), RecordResult::kAccepted);
}

// The group commit's database side, for a host that gathers deliveries
// itself: one transaction, and each delivery answered in order as if alone.
TEST_F(Intake, RecordWebhookEvents_AnswersEachDeliveryInOrderInOneTransaction) {
  ASSERT_EQ(
      *record(R"({"event_id":"pre","event_type":"deposit","amount":"1","to_address":"0xaaa"})"),
      RecordResult::kAccepted);
  const std::vector<std::string> bodies = {
      R"({"event_id":"b1","event_type":"deposit","amount":"2","to_address":"0xaaa"})",
      R"({"event_id":"b1","event_type":"deposit","amount":"2","to_address":"0xaaa"})",
      R"({"event_id":"pre","event_type":"deposit","amount":"9","to_address":"0xaaa"})",
      R"({"event_id":"b2","event_type":"withdrawal","amount":"1","user_id":999})",
      R"({"event_id":"b3","event_type":"deposit","amount":"1","asset":"NOPE","to_address":"0xaaa"})",
      R"({"event_id":"b4","event_type":"deposit","amount":"3","to_address":"0xnobody"})",
      R"({"event_id":"b5","event_type":"deposit","amount":"4","to_address":"0xbbb"})",
      R"({"event_id":"pre","event_type":"deposit","amount":"1","to_address":"0xaaa"})",
  };
  std::vector<WebhookEvent> events;
  for (const std::string& b : bodies) events.push_back(*parse_webhook(b));
  std::vector<WebhookDelivery> batch;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    batch.push_back({.event = &events[i], .trace_id = "t", .raw_body = bodies[i]});
  }
  const std::vector<absl::StatusOr<RecordResult>> answers =
      record_webhook_events(*conn_, schema_, batch);
  ASSERT_EQ(answers.size(), bodies.size());
  EXPECT_EQ(*answers[0], RecordResult::kAccepted);
  EXPECT_EQ(*answers[1], RecordResult::kDuplicate);
  EXPECT_EQ(answers[2].status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(answers[3].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(answers[4].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*answers[5], RecordResult::kUnmatchedAddress);
  EXPECT_EQ(*answers[6], RecordResult::kAccepted);
  EXPECT_EQ(*answers[7], RecordResult::kDuplicate);
  EXPECT_EQ(
      scalar("SELECT string_agg(event_id || ' ' || status || ' ' || trim_scale(amount)::text, "
             "', ' ORDER BY event_id) FROM {schema}.payment_events WHERE event_id <> 'pre'"),
      "b1 pending 2, b5 pending 4");
  EXPECT_EQ(count("SELECT count(DISTINCT created_at) FROM {schema}.payment_events "
                  "WHERE event_id IN ('b1', 'b5')"),
            1)
      << "one transaction";
  EXPECT_EQ(balance(1), "0") << "recorded, not applied";

  // Out of bounds: refused, each, and nothing sent.
  EXPECT_THAT(record_webhook_events(*conn_, schema_, {}), ::testing::IsEmpty());
  const std::vector<WebhookDelivery> too_many(kMaxRecordBatch + 1, batch[6]);
  for (const absl::StatusOr<RecordResult>& a : record_webhook_events(*conn_, schema_, too_many)) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(), ::testing::HasSubstr("1..64"));
  }

  // A batch that fails as a whole: every answer retryable, nothing written.
  LostConnection lost(*conn_);
  const WebhookEvent fresh = *parse_webhook(
      R"({"event_id":"b6","event_type":"deposit","amount":"1","to_address":"0xaaa"})");
  const std::vector<WebhookDelivery> doomed = {{.event = &fresh}, {.event = &fresh}};
  for (const absl::StatusOr<RecordResult>& a : record_webhook_events(lost, schema_, doomed)) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(is_retryable(a.status()));
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE event_id = 'b6'"), 0);
}

class IntakeAssets : public Intake {
 protected:
  void SetUp() override {
    Intake::SetUp();
    ASSERT_TRUE(
        add_asset(*conn_, schema_, {.code = "ETH", .decimals = 18, .chain = "ethereum"}).ok());
    ASSERT_TRUE(add_asset(*conn_, schema_,
                          {.code = "USDC",
                           .decimals = 6,
                           .chain = "ethereum",
                           .contract = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"})
                    .ok());
    ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "TRX", .decimals = 6, .chain = "tron"}).ok());
    // 0xccc is user 1's address on ethereum and user 2's on tron.
    exec(
        "INSERT INTO {schema}.deposit_addresses (chain, address, user_id) VALUES "
        "('ethereum', '0xccc', 1), ('tron', '0xccc', 2)");
  }
  std::string event_row(std::string_view id) {
    return scalar(
        "SELECT user_id || ' ' || asset || ' ' || coalesce(trim_scale(amount)::text, '-') FROM "
        "{schema}.payment_events WHERE event_id = '" +
        std::string(id) + "'");
  }
  // Claims and applies whatever is due, as a worker would.
  void drain() {
    const Dispatcher d(*ledger_, {.schema = schema_, .alerts = &alerts_});
    while (*d.run_once(*conn_) > 0) {
    }
  }
};

TEST_F(IntakeAssets, TheAssetIsNamedByCodeOrByChainAndContract_AddressesArePerChain) {
  EXPECT_EQ(
      *record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xccc",)"
              R"("chain":"ethereum","contract":"0xA0B86991C6218B36C1D19D4A2E9EB0CE3606EB48"})"),
      RecordResult::kAccepted);
  EXPECT_EQ(event_row("e1"), "1 USDC 5");
  EXPECT_EQ(
      *record(R"({"event_id":"e2","event_type":"deposit","amount":"0.5","to_address":"0xccc",)"
              R"("chain":"ethereum"})"),
      RecordResult::kAccepted);
  EXPECT_EQ(event_row("e2"), "1 ETH 0.5") << "no contract: the chain's native coin";
  EXPECT_EQ(*record(R"({"event_id":"e3","event_type":"deposit","amount":"7","to_address":"0xccc",)"
                    R"("asset":"TRX"})"),
            RecordResult::kAccepted);
  EXPECT_EQ(event_row("e3"), "2 TRX 7") << "the same address on another chain is another owner";
  EXPECT_EQ(*record(R"({"event_id":"e4","event_type":"deposit","amount":"1","to_address":"0xaaa",)"
                    R"("asset":"USDC"})"),
            RecordResult::kAccepted);
  EXPECT_EQ(event_row("e4"), "1 USDC 1") << "an address registered for any chain (v1's)";
  EXPECT_EQ(*record(R"({"event_id":"e5","event_type":"deposit","amount":"1","to_address":"0xccc",)"
                    R"("asset":"DEFAULT"})"),
            RecordResult::kUnmatchedAddress)
      << "0xccc is not registered on the default asset's chain";

  // Same id, same content but for the asset: a conflict.
  EXPECT_EQ(record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xccc",)"
                   R"("chain":"ethereum"})")
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
  drain();
  absl::StatusOr<Account> usdc = ledger_->account(*conn_, 1, AssetCode("USDC"));
  ASSERT_TRUE(usdc.ok()) << usdc.status();
  EXPECT_EQ(usdc->balance.to_string(), "6");
  EXPECT_EQ(ledger_->account(*conn_, 2, AssetCode("TRX"))->balance.to_string(), "7");
  expect_reconciled();
}

TEST_F(IntakeAssets, AnUnknownDisabledOrTooPreciseAssetIsRefusedByName) {
  absl::StatusOr<RecordResult> r =
      record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xccc",)"
             R"("chain":"ethereum","contract":"0xdac17f958d2ee523a2206206994597c13d831ec7"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("unknown asset: chain ethereum, contract 0xdac17f958d2ee523"));
  r = record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xccc",)"
             R"("asset":"DOGE"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("unknown asset DOGE"));
  r = record(R"({"event_id":"e1","event_type":"deposit","amount":"5.0000001","to_address":"0xccc",)"
             R"("asset":"USDC"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("USDC allows 6"));
  ASSERT_TRUE(set_asset_enabled(*conn_, schema_, "USDC", false, "issuer paused", "test").ok());
  r = record(R"({"event_id":"e1","event_type":"deposit","amount":"5","to_address":"0xccc",)"
             R"("asset":"USDC"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("asset USDC is disabled"));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0) << "nothing recorded";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.unmatched_deposits"), 0);
}

TEST_F(IntakeAssets, AWithdrawalsStepsGoThroughTheQueueEachOnce) {
  ASSERT_EQ(*ledger_->process_deposit(*conn_, {.event_id = "d",
                                               .type = EventType::kDeposit,
                                               .user_id = 1,
                                               .amount = *Amount::parse("100"),
                                               .asset = AssetCode("USDC")}),
            Outcome::kApplied);
  const std::string request =
      R"({"event_id":"w1","event_type":"withdrawal_requested","amount":"40","fee":"0.5",)"
      R"("user_id":1,"asset":"USDC","expires_in_s":3600})";
  // The confirmation overtakes its request: it waits (retried), never "no such hold".
  const std::string confirmed =
      R"({"event_id":"c1","event_type":"withdrawal_confirmed","withdrawal_id":"w1","user_id":1,)"
      R"("amount":"39"})";
  EXPECT_EQ(*record(confirmed), RecordResult::kAccepted);
  EXPECT_EQ(*record(request), RecordResult::kAccepted);
  EXPECT_EQ(*record(confirmed), RecordResult::kDuplicate)
      << "a copy after its request is still the same event, whatever asset it was recorded in";
  // One claim takes both, in the order they arrived: the confirmation finds no
  // hold yet and is sent back with a backoff. (Not drain(): a full-jitter
  // backoff can be ~0, and a second claim would then take it at once.)
  const Dispatcher d(*ledger_, {.schema = schema_, .alerts = &alerts_});
  ASSERT_EQ(*d.run_once(*conn_), 2);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'c1'"), "pending")
      << "retried after a backoff";
  exec("UPDATE {schema}.payment_events SET next_attempt_at = now() WHERE status = 'pending'");
  drain();
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ' ' || status, ', ' ORDER BY event_id) FROM "
                   "{schema}.payment_events WHERE event_id IN ('w1', 'c1')"),
            "c1 confirmed, w1 confirmed");
  absl::StatusOr<Account> a = ledger_->account(*conn_, 1, AssetCode("USDC"));
  EXPECT_EQ(a->balance.to_string(), "60.5") << "39 captured, the fee 0.5 kept, 1 released";
  EXPECT_EQ(a->held.to_string(), "0");

  // Late copies are duplicates; a changed copy is a conflict.
  EXPECT_EQ(*record(request), RecordResult::kDuplicate);
  EXPECT_EQ(*record(confirmed), RecordResult::kDuplicate);
  EXPECT_EQ(record(R"({"event_id":"c1","event_type":"withdrawal_confirmed","withdrawal_id":"w1",)"
                   R"("user_id":1,"amount":"40"})")
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
  // A failure reported after the post cannot undo it: failed, with a dead letter.
  EXPECT_EQ(*record(R"({"event_id":"f1","event_type":"withdrawal_failed","withdrawal_id":"w1",)"
                    R"("user_id":1})"),
            RecordResult::kAccepted);
  EXPECT_EQ(event_row("f1"), "1 USDC -") << "a step takes its hold's asset";
  drain();
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'f1'"), "failed");
  EXPECT_EQ(scalar("SELECT asset || ' ' || error FROM {schema}.dead_letter_queue WHERE event_id = "
                   "'f1'"),
            "USDC FAILED_PRECONDITION: withdrawal_failed of hold w1 refused: the hold is posted");
  EXPECT_THAT(alerts_.keys(), ::testing::Contains("hold_refused:w1"));
  EXPECT_EQ(ledger_->account(*conn_, 1, AssetCode("USDC"))->balance.to_string(), "60.5");
  expect_reconciled();
}

// record_events() straight from SQL, beside record_event() alone: one
// delivery's fields, NULL where absent.
struct Delivery {
  std::string id, type;
  std::optional<std::string> amount, asset, chain, contract, address;
  std::optional<std::int64_t> user;
  std::optional<std::string> fee, hold;
  std::optional<std::int64_t> expires_ms;
  std::string trace, payload;
  std::optional<std::string> hash;
};

class RecordEvents : public LedgerTest {
 protected:
  // The same assets, users and addresses in `s`: the default asset, ETH and
  // USDC on ethereum, TRX on tron, OLD disabled; 0xaaa (any chain) is user
  // 1's, 0xccc is user 1's on ethereum and user 2's on tron.
  void prepare(const Schema& s) {
    LedgerOptions in_s = options();
    in_s.schema = s;
    const Ledger ledger(in_s);
    for (std::int64_t u = 1; u <= 2; ++u) {
      ASSERT_TRUE(ledger.open_account(*conn_, u, *Amount::parse_balance("0")).ok());
    }
    ASSERT_TRUE(add_asset(*conn_, s, {.code = "ETH", .decimals = 18, .chain = "ethereum"}).ok());
    ASSERT_TRUE(
        add_asset(
            *conn_, s,
            {.code = "USDC", .decimals = 6, .chain = "ethereum", .contract = std::string(kUsdc)})
            .ok());
    ASSERT_TRUE(add_asset(*conn_, s, {.code = "TRX", .decimals = 6, .chain = "tron"}).ok());
    ASSERT_TRUE(add_asset(*conn_, s, {.code = "OLD", .decimals = 8, .enabled = false}).ok());
    ASSERT_TRUE(conn_
                    ->execute(s.qualify("INSERT INTO {schema}.deposit_addresses (chain, address, "
                                        "user_id) VALUES ('', '0xaaa', 1), ('ethereum', '0xccc', "
                                        "1), ('tron', '0xccc', 2)"))
                    .ok());
  }

  // "answer|sqlstate|message": what one delivery was answered.
  static std::string word(const std::optional<std::string>& answer,
                          const std::optional<std::string>& state,
                          const std::optional<std::string>& message) {
    return answer.value_or("") + "|" + state.value_or("") + "|" + message.value_or("");
  }

  // The word of each delivery, recorded in one call.
  std::vector<std::string> record_together(const Schema& s, std::span<const Delivery> batch) {
    return record_together(*conn_, s, batch);
  }
  std::vector<std::string> record_together(Connection& conn, const Schema& s,
                                           std::span<const Delivery> batch) {
    ArrayText ids, types, amounts, assets, chains, contracts, addresses, users, fees, holds,
        expires, traces, payloads, hashes;
    for (const Delivery& d : batch) {
      ids.add(d.id);
      types.add(d.type);
      amounts.add(d.amount);
      assets.add(d.asset);
      chains.add(d.chain);
      contracts.add(d.contract);
      addresses.add(d.address);
      users.add(d.user);
      fees.add(d.fee);
      holds.add(d.hold);
      expires.add(d.expires_ms);
      traces.add(d.trace);
      payloads.add(d.payload);
      hashes.add(d.hash);
    }
    absl::StatusOr<Result> r = conn.execute(
        s.qualify("SELECT r_ord, r_answer, r_state, r_message FROM {schema}.record_events("
                  "$1::text[], $2::text[], $3::numeric[], $4::text[], $5::text[], $6::text[], "
                  "$7::text[], $8::bigint[], $9::numeric[], $10::text[], $11::bigint[], "
                  "$12::text[], $13::text[], $14::text[])"),
        Params(std::move(ids).finish(), std::move(types).finish(), std::move(amounts).finish(),
               std::move(assets).finish(), std::move(chains).finish(),
               std::move(contracts).finish(), std::move(addresses).finish(),
               std::move(users).finish(), std::move(fees).finish(), std::move(holds).finish(),
               std::move(expires).finish(), std::move(traces).finish(),
               std::move(payloads).finish(), std::move(hashes).finish()));
    std::vector<std::string> words(batch.size());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return words;
    EXPECT_EQ(r->rows.size(), batch.size());
    for (std::size_t i = 0; i < r->rows.size(); ++i) {
      auto row = r->row(i)
                     .read<std::int64_t, std::optional<std::string>, std::optional<std::string>,
                           std::optional<std::string>>();
      EXPECT_TRUE(row.ok()) << row.status();
      if (!row.ok()) continue;
      const auto& [ord, answer, state, message] = *row;
      words.at(static_cast<std::size_t>(ord - 1)) = word(answer, state, message);
    }
    return words;
  }

  // The same word for one delivery recorded by record_event() alone.
  std::string record_alone(const Schema& s, const Delivery& d) {
    absl::StatusOr<Result> r = conn_->execute(
        s.qualify("SELECT * FROM {schema}.record_alone($1, $2, $3::numeric, $4, $5, $6, $7, "
                  "$8::bigint, $9::numeric, $10, $11::bigint, $12, $13, $14)"),
        Params(d.id, d.type, d.amount, d.asset, d.chain, d.contract, d.address, d.user, d.fee,
               d.hold, d.expires_ms, d.trace, d.payload, d.hash));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "?";
    auto row = r->row(0)
                   .read<std::optional<std::string>, std::optional<std::string>,
                         std::optional<std::string>>();
    EXPECT_TRUE(row.ok()) << row.status();
    if (!row.ok()) return "?";
    const auto& [answer, state, message] = *row;
    return word(answer, state, message);
  }

  // Everything intake writes, as one digest (timestamps only as present or not).
  std::string recorded(const Schema& s) {
    return scalar(s.qualify(
        "SELECT md5(string_agg(x, ';' ORDER BY x)) FROM ("
        "SELECT concat_ws(' ', event_id, user_id, asset, amount, fee, hold_id, event_type, "
        "  status, trace_id, tx_hash, expires_at IS NULL) AS x FROM {schema}.payment_events "
        "UNION ALL SELECT concat_ws(' ', event_id, to_address, amount, asset, payload, trace_id) "
        "  FROM {schema}.unmatched_deposits) t"));
  }

  // A plain deposit (to user 1's 0xaaa unless told), and a withdrawal of 1 by user 2.
  static Delivery deposit(std::string id, std::string amount = "1", std::string address = "0xaaa") {
    return Delivery{.id = std::move(id),
                    .type = "deposit",
                    .amount = std::move(amount),
                    .address = std::move(address),
                    .trace = "t",
                    .payload = "{}"};
  }
  static Delivery withdrawal(std::string id) {
    return Delivery{.id = std::move(id),
                    .type = "withdrawal",
                    .amount = "1",
                    .user = 2,
                    .trace = "t",
                    .payload = "{}"};
  }

  static constexpr std::string_view kUsdc = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48";
};

// A random stream of deliveries — deposits and airdrops by code, by chain and
// contract and in the default asset, to owned, per-chain and unknown
// addresses; withdrawals and their steps; copies, changed copies, unknown
// users and assets, a disabled asset, too many decimals — recorded once by
// record_event() alone into one schema and once through record_events() in
// batches of random sizes (up to intake's 64) into another: every answer,
// every recorded row and every unmatched deposit agree.
TEST_F(RecordEvents, RandomStream_BatchesAnswerAsSingles) {
  const Schema alone = unique_schema();
  ASSERT_TRUE(migrate(*conn_, alone).ok());
  prepare(schema_);
  prepare(alone);
  ASSERT_TRUE(conn_
                  ->execute(alone.qualify(R"sql(
      CREATE FUNCTION {schema}.record_alone(
          p_id text, p_type text, p_amount numeric, p_asset text, p_chain text, p_contract text,
          p_address text, p_user bigint, p_fee numeric, p_hold text, p_expires bigint,
          p_trace text, p_payload text, p_hash text,
          OUT answer text, OUT state text, OUT message text) LANGUAGE plpgsql AS $fn$
      BEGIN
          answer := {schema}.record_event(p_id, p_type, p_amount, p_asset, p_chain, p_contract,
                                          p_address, p_user, p_fee, p_hold, p_expires, p_trace,
                                          p_payload, p_hash);
      EXCEPTION WHEN OTHERS THEN
          GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
      END
      $fn$)sql"))
                  .ok());

  std::mt19937 rng(20261204);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<Delivery> stream;
  for (int i = 0; i < 1500; ++i) {
    const int roll = pick(100);
    if (roll < 20 && !stream.empty()) {  // a redelivery
      stream.push_back(sent_before(stream, pick));
      continue;
    }
    if (roll < 25 && !stream.empty()) {  // the same id, other content
      Delivery d = sent_before(stream, pick);
      switch (pick(4)) {
        case 0:
          d.amount = d.amount.value_or("1") + "1";
          break;
        case 1:
          d.address = pick(2) ? "0xnone" : "0xaaa";
          break;
        case 2:
          d.type = d.type == "deposit" ? "airdrop" : "deposit";
          break;
        default:
          d.hash = "0xother";
      }
      stream.push_back(std::move(d));
      continue;
    }
    Delivery d{.id = "r" + std::to_string(pick(3)) + "_" + std::to_string(i),
               .type = pick(6) == 0 ? "airdrop" : "deposit",
               .amount = std::to_string(1 + pick(50)) + "." + std::to_string(pick(100)),
               .trace = "t" + std::to_string(i),
               .payload = R"({"n":)" + std::to_string(i) + "}"};
    switch (pick(8)) {  // the asset
      case 0:
        d.asset = "ETH";
        break;
      case 1:
        d.asset = "USDC";
        break;
      case 2:
        d.chain = "ethereum";
        d.contract = std::string(kUsdc);
        break;
      case 3:
        d.chain = "tron";
        break;
      default:
        break;  // the default asset
    }
    const int odd = pick(100);
    if (odd < 3) {
      d.asset = "NOPE";
    } else if (odd < 5) {
      d.asset = "OLD";
    } else if (odd < 7) {
      d.asset.reset();
      d.chain = "ethereum";
      d.contract = "0xunknown";
    } else if (odd < 10) {
      *d.amount += "0000001";  // too many decimals for USDC and TRX
    } else if (odd < 13) {
      d.fee = "0.5";
    }
    if (pick(4) == 0) d.hash = "0x" + std::to_string(i);
    const int where = pick(20);
    d.address = where < 9 ? "0xaaa" : where < 18 ? "0xccc" : "0xnone";
    if (roll >= 88) {  // a withdrawal or one of its steps: user_id, never an address
      d.address.reset();
      d.user = pick(8) == 0 ? 99 : 1 + pick(2);
      switch (pick(4)) {
        case 0:
          d.type = "withdrawal";
          break;
        case 1:
          d.type = "withdrawal_requested";
          d.hold = d.id;
          d.expires_ms = 3600000;
          break;
        default:
          d.type = pick(2) ? "withdrawal_confirmed" : "withdrawal_failed";
          d.hold = "r1_" + std::to_string(pick(i + 1));
      }
    }
    stream.push_back(std::move(d));
  }

  std::vector<std::string> one_by_one, together;
  one_by_one.reserve(stream.size());
  together.reserve(stream.size());
  for (const Delivery& d : stream) one_by_one.push_back(record_alone(alone, d));
  for (std::size_t at = 0; at < stream.size();) {
    const std::size_t n = std::min(stream.size() - at, static_cast<std::size_t>(1 + pick(64)));
    for (std::string& w : record_together(schema_, std::span(stream).subspan(at, n))) {
      together.push_back(std::move(w));
    }
    at += n;
  }
  ASSERT_EQ(one_by_one.size(), together.size());
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < one_by_one.size(); ++i) {
    EXPECT_EQ(one_by_one[i], together[i]) << "delivery " << i << " (" << stream[i].id << ")";
    const std::string& w = one_by_one[i];
    ++seen[w.substr(0, w.find('|', w.find('|') + 1))];
  }
  // The stream exercised every answer.
  for (const char* w : {"accepted|", "duplicate|", "unmatched|", "|IL001", "|IL002", "|IL030",
                        "|IL031", "|IL032"}) {
    EXPECT_GT(seen[w], 0) << w;
  }
  EXPECT_EQ(recorded(schema_), recorded(alone));
  EXPECT_GT(count("SELECT count(*) FROM {schema}.payment_events"), 500);
  (void)conn_->execute(alone.qualify("DROP SCHEMA {schema} CASCADE"));
}

// Ids whose every copy is a plain deposit are recorded without
// record_event(); any other id goes through it, each copy in arrival order.
// An INSERT a table's CHECK refuses sends the whole batch one by one, each
// delivery with its own answer.
TEST_F(RecordEvents, PlainIdsTakeNoRecordEventCall_ARefusedInsertFallsBackOneByOne) {
  IDEMLEDGER_NEEDS_OWN_SESSION("function statistics are per session");
  prepare(schema_);
  exec("SET track_functions = 'pl'");
  const std::vector<Delivery> batch = {
      deposit("d_2", "2"), withdrawal("c_w"),   deposit("a_1", "1"),           deposit("a_2", "2"),
      deposit("a_1", "1"), deposit("a_2", "3"), deposit("m_1", "1", "0xnone"), deposit("m_1", "1")};
  // a_1, a_2 and d_2 in one statement; c_w and both copies of m_1 one by one:
  // m_1's first copy is unmatched, its second is then recorded, as alone.
  EXPECT_THAT(
      record_together(schema_, batch),
      ::testing::ElementsAre("accepted||", "accepted||", "accepted||", "accepted||", "duplicate||",
                             "|IL001|conflicting replay: event a_2 is recorded as deposit of "
                             "2.000000000000000000 DEFAULT for user 1",
                             "unmatched||", "accepted||"));
  EXPECT_EQ(function_calls("record_event"), "3");
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ' ' || user_id || ' ' || trim_scale(amount) || "
                   "' ' || status, ', ' ORDER BY event_id) FROM {schema}.payment_events"),
            "a_1 1 1 pending, a_2 1 2 pending, c_w 2 1 pending, d_2 1 2 pending, m_1 1 1 pending");
  EXPECT_EQ(scalar("SELECT event_id || ' ' || to_address FROM {schema}.unmatched_deposits"),
            "m_1 0xnone");

  // A negative amount passes no parser of ours, but record_events() is SQL:
  // payment_events' CHECK refuses it, alone.
  EXPECT_THAT(
      record_together(schema_,
                      std::vector{deposit("n_1", "1"), deposit("n_2", "-1"), deposit("a_1", "1")}),
      ::testing::ElementsAre("accepted||", ::testing::StartsWith("|23514|"), "duplicate||"));
  EXPECT_EQ(function_calls("record_event"), "5") << "one by one; n_2's raised, uncounted";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 6);

  absl::StatusOr<Result> shifted = conn_->execute(schema_.qualify(
      "SELECT * FROM {schema}.record_events('[0:0]={x}', '{deposit}', '{1}', '{NULL}', '{NULL}', "
      "'{NULL}', '{0xaaa}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{t}', '{p}', '{NULL}')"));
  EXPECT_EQ(shifted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shifted.status().message()), ::testing::HasSubstr("start at index 1"));
}

// Two batches can wait on each other only through an id that is a plain
// deposit in one and something else in the other. PostgreSQL fails one
// waiting record_event() after deadlock_timeout; its subtransaction turns
// that into the one delivery's retryable answer, the other batch goes on
// once the first commits, and each id is recorded once.
TEST_F(RecordEvents, BatchesWaitingOnEachOtherFailOneDeliveryRetryably) {
  prepare(schema_);
  std::unique_ptr<pg::Connection> a = connect(), b = connect();
  ASSERT_TRUE(a->execute("BEGIN").ok());
  ASSERT_TRUE(b->execute("BEGIN").ok());
  ASSERT_THAT(record_together(*a, schema_, std::vector{deposit("k1")}),
              ::testing::ElementsAre("accepted||"));
  ASSERT_THAT(record_together(*b, schema_, std::vector{deposit("k2")}),
              ::testing::ElementsAre("accepted||"));
  std::vector<std::string> from_a, from_b;
  std::atomic<int> finished{0};  // 1: a, 2: b
  std::thread ta([&] {
    from_a = record_together(*a, schema_, std::vector{withdrawal("k2")});
    int none = 0;
    finished.compare_exchange_strong(none, 1);
  });
  // No ASSERT while a thread runs: a test that returned would leave it joinable.
  EXPECT_EQ(lock_waiters("record_events", absl::Seconds(10)), 1) << "a waits for b's k2";
  std::thread tb([&] {
    from_b = record_together(*b, schema_, std::vector{withdrawal("k1")});
    int none = 0;
    finished.compare_exchange_strong(none, 2);
  });
  // PostgreSQL breaks the cycle after deadlock_timeout; the one it failed
  // has finished, and the other waits for it to commit.
  EXPECT_TRUE(eventually([&] { return finished.load() != 0; })) << "the cycle was broken";
  const int first = finished.load() == 2 ? 2 : 1;
  EXPECT_TRUE((first == 1 ? *a : *b).execute("COMMIT").ok());
  ta.join();
  tb.join();
  ASSERT_TRUE((first == 1 ? *b : *a).execute("COMMIT").ok());
  const std::vector<std::string>& victim = first == 1 ? from_a : from_b;
  const std::vector<std::string>& survivor = first == 1 ? from_b : from_a;
  ASSERT_EQ(victim.size(), 1U);
  EXPECT_THAT(victim[0], ::testing::StartsWith("|40P01|"));
  const absl::Status answered = status_from_sqlstate("40P01", "deadlock detected");
  EXPECT_TRUE(is_retryable(answered)) << "intake records it again (then answered as alone)";
  ASSERT_EQ(survivor.size(), 1U);
  EXPECT_THAT(survivor[0], ::testing::StartsWith("|IL001|conflicting replay: event k"));
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ' ' || event_type, ', ' ORDER BY event_id) FROM "
                   "{schema}.payment_events"),
            "k1 deposit, k2 deposit");
}

}  // namespace
}  // namespace idemledger::testing
