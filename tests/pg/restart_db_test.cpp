// A real server restart under a pool in use: the pool must reconnect by
// itself, and a retried deposit must apply exactly once. Runs alone
// (RUN_SERIAL): it restarts the server every other test talks to.
#include <cstdlib>
#include <string>

#include "idemledger/core/retry.hpp"
#include "idemledger/pg/pool.hpp"
#include "idemledger/queue/dlq.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

// pg_ctl on the private server started by scripts/with-postgres.sh:
// "restart", "stop", or "start" (with the same port, socket and settings).
void pg_ctl(const std::string& action) {
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  ASSERT_FALSE(env("IDEMLEDGER_PG_DATA").empty()) << "run through scripts/with-postgres.sh";
  std::string cmd = env("IDEMLEDGER_PG_AS") + " " + env("IDEMLEDGER_PG_BIN") + "/pg_ctl -D " +
                    env("IDEMLEDGER_PG_DATA") + " -m fast -w -t 60 ";
  if (action == "start") {
    cmd += "-l " + env("IDEMLEDGER_PG_DATA") + "/../server.log -o \"-p " +
           env("IDEMLEDGER_PG_PORT") + " -k " + env("IDEMLEDGER_PG_SOCKET") +
           " -c listen_addresses=127.0.0.1 -c max_connections=200 " + env("IDEMLEDGER_PG_OPTS") +
           "\" ";
  }
  cmd += action + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

using ServerRestart = LedgerTest;

TEST_F(ServerRestart, PoolReconnectsAndRetriedDepositAppliesOnce) {
  open_account(1, "0");
  pg::Pool pool({.dsn = test_dsn(), .max_size = 2, .acquire_timeout = absl::Seconds(20)});
  const auto deposit = [&](const PaymentEvent& e) {
    return with_retries(
        {.max_attempts = 20, .base_delay = absl::Milliseconds(50), .max_delay = absl::Seconds(1)},
        [&]() -> absl::StatusOr<Outcome> {
          absl::StatusOr<pg::PooledConnection> c = pool.acquire();
          if (!c.ok()) return c.status();
          return ledger_->process_deposit(**c, e);
        });
  };
  ASSERT_EQ(*deposit(event("before", EventType::kDeposit, 1, "1")), Outcome::kApplied);
  {  // two idle sessions in the pool, both about to die
    absl::StatusOr<pg::PooledConnection> a = pool.acquire();
    absl::StatusOr<pg::PooledConnection> b = pool.acquire();
    ASSERT_TRUE(a.ok() && b.ok());
  }
  pg_ctl("restart");
  conn_ = connect();  // the fixture's own session died too

  absl::StatusOr<Outcome> r = deposit(event("after", EventType::kDeposit, 1, "2"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Outcome::kApplied);
  EXPECT_EQ(*deposit(event("after", EventType::kDeposit, 1, "2")), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "3");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 2);
  EXPECT_GE(pool.stats().dropped, 1u) << "dead sessions were dropped, not handed out";
  expect_reconciled();
}

// The database is down while a dead letter is written: it lands in the spool,
// and after the restart it is drained into the table once.
TEST_F(ServerRestart, DatabaseStoppedDuringDeadLetterWrite_SpooledThenDrainedOnce) {
  const std::string spool = scratch("restart.spool");
  DeadLetterQueue dlq(
      {.schema = schema_, .spool_path = spool, .spool_key = kTestSpoolKey, .alerts = &alerts_});
  const DeadLetter letter{.event_id = "e1",
                          .event_type = "deposit",
                          .user_id = 1,
                          .amount = "5",
                          .reason = "retries_exhausted",
                          .error = "server gone",
                          .trace_id = "t"};
  pg_ctl("stop");
  EXPECT_EQ(dlq.record(*conn_, letter), DeadLetterQueue::Destination::kSpool);
  pg_ctl("start");
  conn_ = connect();
  EXPECT_EQ(*dlq.drain_spool(*conn_), 1);
  EXPECT_EQ(*dlq.drain_spool(*conn_), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'e1' AND "
                  "spool_id IS NOT NULL"),
            1);
}

}  // namespace
}  // namespace idemledger::testing
