// A real server restart under a pool in use: the pool must reconnect by
// itself, and a retried deposit must apply exactly once. Runs alone
// (RUN_SERIAL): it restarts the server every other test talks to.
#include <cstdlib>
#include <string>

#include "idemledger/pg/pool.hpp"
#include "idemledger/retry.hpp"
#include "tests/integration/test_db.hpp"

namespace idemledger::testing {
namespace {

// pg_ctl restart of the private server started by scripts/with-postgres.sh.
void restart_server() {
  const char* bin = std::getenv("IDEMLEDGER_PG_BIN");
  const char* data = std::getenv("IDEMLEDGER_PG_DATA");
  ASSERT_TRUE(bin != nullptr && data != nullptr) << "run through scripts/with-postgres.sh";
  const char* as = std::getenv("IDEMLEDGER_PG_AS");
  const std::string cmd = std::string(as != nullptr ? as : "") + " " + bin + "/pg_ctl -D " + data +
                          " -m fast -w -t 60 restart >/dev/null 2>&1";
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
  restart_server();
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

}  // namespace
}  // namespace idemledger::testing
