// The seed's multiprocessing tests, with fork(): separate processes, separate
// sessions, released together by a barrier.
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "gmock/gmock.h"
#include "idemledger/core/retry.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

enum ExitCode { kApplied = 0, kAlreadyApplied = 1, kInsufficient = 2, kError = 3 };

int exit_code_for(const absl::StatusOr<Outcome>& r) {
  if (!r.ok()) {
    std::fprintf(stderr, "child error: %s\n", r.status().ToString().c_str());
    return kError;
  }
  switch (*r) {
    case Outcome::kApplied:
      return kApplied;
    case Outcome::kAlreadyApplied:
      return kAlreadyApplied;
    case Outcome::kInsufficientFunds:
      return kInsufficient;
  }
  return kError;
}

// NOWAIT contention makes losers retry; give them room.
const RetryPolicy kPatient{
    .max_attempts = 200, .base_delay = absl::Milliseconds(1), .max_delay = absl::Milliseconds(50)};

using Concurrency = LedgerTest;

TEST_F(Concurrency, TenProcessesOneEvent_CreditOnce) {
  open_account(1, "100");
  record_event(event("evt_dup", EventType::kDeposit, 1, "50"), "enqueued");
  const LedgerOptions opts = options();
  const std::vector<int> codes = run_forked(10, [&](int) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(opts);
    return exit_code_for(with_retries(kPatient, [&] {
      return ledger.process_deposit(*c, event("evt_dup", EventType::kDeposit, 1, "50"));
    }));
  });
  EXPECT_EQ(std::count(codes.begin(), codes.end(), kApplied), 1);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), kAlreadyApplied), 9);
  EXPECT_EQ(balance(1), "150");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events WHERE outcome = 'success'"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 1);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'evt_dup'"),
            "confirmed");
  expect_reconciled();
}

TEST_F(Concurrency, TenProcessesWithdrawThirtyFromHundred_ExactlyThreeSucceed) {
  open_account(1, "100");
  const LedgerOptions opts = options();
  const std::vector<int> codes = run_forked(10, [&](int i) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(opts);
    const PaymentEvent e = event("w_" + std::to_string(i), EventType::kWithdrawal, 1, "30");
    return exit_code_for(with_retries(kPatient, [&] { return ledger.process_withdrawal(*c, e); }));
  });
  EXPECT_EQ(std::count(codes.begin(), codes.end(), kApplied), 3);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), kInsufficient), 7);
  EXPECT_EQ(balance(1), "10");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 3);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'failed'"), 7);
  EXPECT_EQ(
      count("SELECT count(*) FROM {schema}.processed_events WHERE outcome = 'insufficient_funds'"),
      7);
  expect_reconciled();
}

// 8 processes x 2,000 deliveries of random deposits and withdrawals over 20
// users; each event is delivered 1-3 times, by different processes, shuffled.
TEST_F(Concurrency, EightProcessesRandomEventsWithDuplicates_InvariantsHold) {
  constexpr int kProcesses = 8, kDeliveriesEach = 2000, kUsers = 20;
  for (int u = 1; u <= kUsers; ++u) open_account(u, "1000");

  std::mt19937 rng(20261129);
  std::vector<PaymentEvent> events;
  std::vector<std::vector<int>> deliveries(kProcesses);
  int total = 0;
  for (int id = 0; total < kProcesses * kDeliveriesEach; ++id) {
    const bool credit = rng() % 2 == 0;
    const std::string amount = std::to_string(1 + rng() % 300) + "." + std::to_string(rng() % 100);
    events.push_back(event("r_" + std::to_string(id),
                           credit ? EventType::kDeposit : EventType::kWithdrawal,
                           1 + static_cast<std::int64_t>(rng() % kUsers), amount));
    const int copies = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < copies && total < kProcesses * kDeliveriesEach; ++k, ++total) {
      deliveries[rng() % kProcesses].push_back(id);
    }
  }
  for (auto& d : deliveries) std::shuffle(d.begin(), d.end(), rng);

  const std::string prefix = scratch("outcomes_");
  const LedgerOptions opts = options();
  const std::vector<int> codes = run_forked(kProcesses, [&](int p) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(opts);
    std::ofstream out(prefix + std::to_string(p));
    for (int id : deliveries[p]) {
      const PaymentEvent& e = events[id];
      absl::StatusOr<Outcome> r = with_retries(kPatient, [&] {
        return is_credit(e.type) ? ledger.process_deposit(*c, e) : ledger.process_withdrawal(*c, e);
      });
      if (!r.ok()) return exit_code_for(r);
      out << id << ' ' << to_string(*r) << '\n';
    }
    return 0;
  });
  for (int code : codes) ASSERT_EQ(code, 0);

  std::map<int, std::map<std::string, int>> outcomes;  // event -> outcome -> count
  for (int p = 0; p < kProcesses; ++p) {
    std::ifstream in(prefix + std::to_string(p));
    int id;
    std::string outcome;
    while (in >> id >> outcome) ++outcomes[id][outcome];
  }
  long applied = 0, refused = 0;
  for (const auto& [id, by_outcome] : outcomes) {
    const int applied_here = by_outcome.count("applied") ? by_outcome.at("applied") : 0;
    const bool insufficient = by_outcome.count("insufficient_funds") > 0;
    if (insufficient) {
      EXPECT_EQ(applied_here, 0) << "event " << id;
      EXPECT_EQ(by_outcome.count("already_applied"), 0u) << "event " << id;
      ++refused;
    } else {
      EXPECT_EQ(applied_here, 1) << "event " << id << " applied " << applied_here << " times";
      ++applied;
    }
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), applied);
  EXPECT_EQ(count("SELECT count(DISTINCT source_event_id) FROM {schema}.balance_events"), applied);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"),
            applied);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'failed'"), refused);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), applied + refused);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
