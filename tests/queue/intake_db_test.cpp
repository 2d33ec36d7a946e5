// Intake on a real server: record as pending, duplicates, conflicts, unknown
// addresses, and the whole path intake -> dispatcher -> ledger.
#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/asset.hpp"
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

}  // namespace
}  // namespace idemledger::testing
