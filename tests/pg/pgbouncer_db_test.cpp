// Behind PgBouncer 1.18 in transaction pooling mode (started by
// scripts/with-postgres.sh, 3 server sessions shared by every client): the
// ledger with unnamed statements stays exactly-once, and none of its settings
// leaks into another client's transactions.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "idemledger/core/retry.hpp"
#include "idemledger/pg/pool.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

std::string bouncer_dsn() {
  const char* dsn = std::getenv("IDEMLEDGER_PGBOUNCER_DSN");
  if (dsn == nullptr) {
    ADD_FAILURE() << "IDEMLEDGER_PGBOUNCER_DSN is not set: run through scripts/with-postgres.sh";
    return "";
  }
  return dsn;
}

using PgBouncer = LedgerTest;

TEST_F(PgBouncer, EightThreadsWithDuplicatesApplyEachEventOnce) {
  constexpr int kEvents = 200, kThreads = 8;
  for (int u = 1; u <= 5; ++u) open_account(u, "0");
  pg::Pool pool({.dsn = bouncer_dsn(),
                 .max_size = kThreads,
                 .acquire_timeout = absl::Seconds(10),
                 .connection = {.prepared_statements = false}});
  std::atomic<int> applied{0}, duplicates{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Every thread delivers every event, each in its own order.
      for (int k = 0; k < kEvents; ++k) {
        const int id = (k * 7 + t * 31) % kEvents;
        const PaymentEvent e =
            event("b_" + std::to_string(id), EventType::kDeposit, 1 + id % 5, "1.25");
        absl::StatusOr<Outcome> r = with_retries({.max_attempts = 50,
                                                  .base_delay = absl::Milliseconds(1),
                                                  .max_delay = absl::Milliseconds(50)},
                                                 [&]() -> absl::StatusOr<Outcome> {
                                                   absl::StatusOr<pg::PooledConnection> c =
                                                       pool.acquire();
                                                   if (!c.ok()) return c.status();
                                                   return ledger_->process_deposit(**c, e);
                                                 });
        if (!r.ok()) {
          ++errors;
          ADD_FAILURE() << r.status();
        } else if (*r == Outcome::kApplied) {
          ++applied;
        } else {
          ++duplicates;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(applied.load(), kEvents);
  EXPECT_EQ(duplicates.load(), kEvents * (kThreads - 1));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), kEvents);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"),
            kEvents);
  EXPECT_EQ(scalar("SELECT sum(balance)::text FROM {schema}.accounts"), "250.000000000000000000");
  expect_reconciled();
}

TEST_F(PgBouncer, LedgerSettingsNeverLeakToOtherClients) {
  open_account(1, "0");
  const pg::ConnectionOptions unnamed{.prepared_statements = false};
  std::unique_ptr<pg::Connection> ours = std::move(*pg::Connection::open(bouncer_dsn(), unnamed));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        ledger_
            ->process_deposit(*ours, event("s_" + std::to_string(i), EventType::kDeposit, 1, "1"))
            .ok());
  }
  // Other clients, landing on whichever of the shared server sessions, see defaults.
  for (int i = 0; i < 6; ++i) {
    std::unique_ptr<pg::Connection> other =
        std::move(*pg::Connection::open(bouncer_dsn(), unnamed));
    absl::StatusOr<Result> r = other->execute(
        "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->at(0, 0), "0");
    EXPECT_EQ(r->at(0, 1), "0");
  }
  EXPECT_EQ(balance(1), "20");
}

// The server session under our transaction dies (killed, crashed, restarted
// by an operator) while PgBouncer keeps our client connection: the deposit is
// reported retryable, nothing of it was committed, and the retry applies once.
TEST_F(PgBouncer, ServerSessionKilledUnderOurTransaction_RetryAppliesOnce) {
  open_account(1, "0");
  const pg::ConnectionOptions unnamed{.prepared_statements = false};
  std::unique_ptr<pg::Connection> victim = std::move(*pg::Connection::open(bouncer_dsn(), unnamed));
  ASSERT_TRUE(victim->execute("BEGIN").ok());  // pins one server session until COMMIT
  const std::string server_pid = victim->execute("SELECT pg_backend_pid()")->at(0, 0).value_or("");
  ASSERT_EQ(scalar("SELECT pg_terminate_backend(" + server_pid + ")"), "t");
  absl::SleepFor(absl::Milliseconds(100));
  const PaymentEvent e = event("k_1", EventType::kDeposit, 1, "2");
  absl::StatusOr<Outcome> r = ledger_->process_deposit(*victim, e);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(is_retryable(r.status())) << r.status();
  EXPECT_EQ(balance(1), "0");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0);

  pg::Pool pool({.dsn = bouncer_dsn(), .max_size = 1, .connection = unnamed});
  absl::StatusOr<Outcome> retried =
      with_retries({.max_attempts = 5}, [&]() -> absl::StatusOr<Outcome> {
        absl::StatusOr<pg::PooledConnection> c = pool.acquire();
        if (!c.ok()) return c.status();
        return ledger_->process_deposit(**c, e);
      });
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, Outcome::kApplied);
  EXPECT_EQ(balance(1), "2");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
}

}  // namespace
}  // namespace idemledger::testing
