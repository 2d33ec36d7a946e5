// The README's own example under contention: processes withdrawing from a few
// hot accounts at once, each call wrapped in with_retries(RetryPolicy{}) the
// way the README shows. Debits take the account's row lock NOWAIT, so losers
// answer 55P03 at once; the default policy's time budget must carry every
// one of them through — never surfacing kUnavailable to the host.
#include "gmock/gmock.h"
#include "idemledger/core/retry.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/pg/pool.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using Contention = LedgerTest;

TEST_F(Contention, ReadmeExample_SixProcessesOnHotAccountsNeverSurfaceLockConflicts) {
  constexpr int kProcesses = 6;
  constexpr int kWithdrawalsEach = 334;  // 2,004 in all
  constexpr int kHotAccounts = 3;
  for (int u = 1; u <= kHotAccounts; ++u) open_account(u, "1000000");
  const LedgerOptions opts = options();
  const std::vector<int> codes = run_forked(kProcesses, [&](int process) {
    pg::Pool pool({.dsn = test_dsn(), .max_size = 2, .connection = test_connection_options()});
    const Ledger ledger(opts);
    int failures = 0;
    for (int i = 0; i < kWithdrawalsEach; ++i) {
      const PaymentEvent e{.event_id = "w-" + std::to_string(process) + "-" + std::to_string(i),
                           .type = EventType::kWithdrawal,
                           .user_id = 1 + (i % kHotAccounts),
                           .amount = *Amount::parse("1")};
      // As in the README: retry the WHOLE unit of work, acquire + apply.
      absl::StatusOr<Outcome> outcome =
          with_retries(RetryPolicy{}, [&]() -> absl::StatusOr<Outcome> {
            absl::StatusOr<pg::PooledConnection> conn = pool.acquire();
            if (!conn.ok()) return conn.status();
            return ledger.process_withdrawal(**conn, e);
          });
      if (!outcome.ok() || *outcome != Outcome::kApplied) {
        std::fprintf(stderr, "%s: %s\n", e.event_id.c_str(),
                     outcome.ok() ? "not applied" : outcome.status().ToString().c_str());
        ++failures;
      }
    }
    return failures > 0 ? 1 : 0;
  });
  for (int code : codes) EXPECT_EQ(code, 0) << "a withdrawal surfaced an error to the host";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), kProcesses * kWithdrawalsEach);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"),
            kProcesses * kWithdrawalsEach);
  EXPECT_EQ(scalar("SELECT sum(balance) FROM {schema}.accounts"),
            std::to_string(3 * 1000000 - kProcesses * kWithdrawalsEach) + ".000000000000000000");
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
