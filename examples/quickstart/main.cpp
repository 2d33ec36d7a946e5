// quickstart — a host program using idemledger the way a payment service would.
//
// Migrates a schema, opens 100 accounts, then delivers 10,000 mixed deposit /
// withdrawal events from 8 threads, each event 1-3 times (shuffled, so copies
// race each other), plus a few replays whose content was tampered with. Prints
// what happened and checks the invariants; exits non-zero if any fails.
//
//   quickstart [DSN]     (default: $IDEMLEDGER_TEST_DSN, set by scripts/with-postgres.sh)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

namespace {

using idemledger::Amount;
using idemledger::EventType;
using idemledger::Outcome;
using idemledger::PaymentEvent;

constexpr int kUsers = 100;
constexpr int kEvents = 10'000;
constexpr int kThreads = 8;
constexpr int kTamperedReplays = 50;
constexpr char kSchema[] = "quickstart";

struct Delivery {
  int event;      // index into the event list
  bool tampered;  // same id, different amount: must be refused
};

struct Tally {
  std::atomic<long> applied{0}, duplicates{0}, insufficient{0}, conflicts{0}, errors{0};
};

bool check(bool ok, const char* what) {
  std::printf("  [%s] %s\n", ok ? " ok " : "FAIL", what);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const char* dsn = argc > 1 ? argv[1] : std::getenv("IDEMLEDGER_TEST_DSN");
  if (dsn == nullptr) {
    std::fprintf(stderr, "usage: quickstart DSN (or set IDEMLEDGER_TEST_DSN)\n");
    return 2;
  }
  idemledger::pg::Pool pool({.dsn = dsn, .max_size = kThreads});
  const idemledger::Ledger ledger({.schema = kSchema});
  {
    absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
    if (!conn.ok()) {
      std::fprintf(stderr, "cannot connect: %s\n", conn.status().ToString().c_str());
      return 1;
    }
    (void)(*conn)->execute("DROP SCHEMA IF EXISTS quickstart CASCADE");
    if (absl::Status s = idemledger::migrate(**conn, kSchema); !s.ok()) {
      std::fprintf(stderr, "migrate: %s\n", s.ToString().c_str());
      return 1;
    }
    for (int u = 1; u <= kUsers; ++u) {
      if (absl::Status s = ledger.open_account(**conn, u, *Amount::parse("100")); !s.ok()) {
        std::fprintf(stderr, "open_account: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }

  // 10,000 events: 60% deposits/airdrops, 40% withdrawals/fees, amounts with
  // up to 18 decimals, so some withdrawals must be refused for lack of funds.
  std::mt19937_64 rng(42);
  std::vector<PaymentEvent> events;
  events.reserve(kEvents);
  std::vector<Delivery> deliveries;
  deliveries.reserve(std::size_t{3} * kEvents);
  for (int i = 0; i < kEvents; ++i) {
    const int kind = static_cast<int>(rng() % 10);
    const EventType type = kind < 5   ? EventType::kDeposit
                           : kind < 6 ? EventType::kAirdrop
                           : kind < 9 ? EventType::kWithdrawal
                                      : EventType::kWithdrawalFee;
    const std::string amount =
        std::to_string(1 + rng() % 80) + "." + std::to_string(rng() % 1'000'000'000'000'000'000ULL);
    events.push_back({.event_id = "qs_" + std::to_string(i),
                      .type = type,
                      .user_id = 1 + static_cast<std::int64_t>(rng() % kUsers),
                      .amount = *Amount::parse(amount)});
    const int copies = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < copies; ++c) deliveries.push_back({i, false});
  }
  std::shuffle(deliveries.begin(), deliveries.end(), rng);
  // Replays with tampered content arrive late, after the originals: the
  // first content recorded for an id is the one that counts.
  std::vector<Delivery> late_replays;
  late_replays.reserve(kTamperedReplays);
  for (int t = 0; t < kTamperedReplays; ++t)
    late_replays.push_back({static_cast<int>(rng() % kEvents), true});

  std::printf(
      "idemledger %s quickstart: %d users, %d events, %zu deliveries (%d tampered), %d threads\n",
      idemledger::kVersionString, kUsers, kEvents, deliveries.size() + late_replays.size(),
      kTamperedReplays, kThreads);

  Tally tally;
  std::vector<std::atomic<int>> applied_per_event(kEvents);
  std::vector<std::atomic<int>> refused_per_event(kEvents);
  const auto deliver_all = [&](const std::vector<Delivery>& deliveries) {
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (std::size_t i; (i = next++) < deliveries.size();) {
          const Delivery& d = deliveries[i];
          PaymentEvent e = events[static_cast<std::size_t>(d.event)];
          if (d.tampered) e.amount = *e.amount.checked_add(*Amount::parse("1000"));
          // The whole unit of work is retried: acquire, apply. A connection the
          // server dropped is replaced on the next acquire.
          absl::StatusOr<Outcome> r = idemledger::with_retries(
              {.max_attempts = 50,
               .base_delay = absl::Milliseconds(1),
               .max_delay = absl::Milliseconds(100)},
              [&]() -> absl::StatusOr<Outcome> {
                absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
                if (!conn.ok()) return conn.status();
                return idemledger::is_credit(e.type) ? ledger.process_deposit(**conn, e)
                                                     : ledger.process_withdrawal(**conn, e);
              });
          if (!r.ok()) {
            if (r.status().code() == absl::StatusCode::kAlreadyExists && d.tampered) {
              ++tally.conflicts;
            } else {
              ++tally.errors;
              std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str());
            }
            continue;
          }
          switch (*r) {
            case Outcome::kApplied:
              ++tally.applied;
              ++applied_per_event[static_cast<std::size_t>(d.event)];
              break;
            case Outcome::kAlreadyApplied:
              ++tally.duplicates;
              break;
            case Outcome::kInsufficientFunds:
              ++tally.insufficient;
              ++refused_per_event[static_cast<std::size_t>(d.event)];
              break;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  };
  const absl::Time start = absl::Now();
  deliver_all(deliveries);
  const absl::Duration elapsed = absl::Now() - start;
  deliver_all(late_replays);

  std::printf("\n  applied                    %6ld\n", tally.applied.load());
  std::printf("  duplicates absorbed        %6ld\n", tally.duplicates.load());
  std::printf(
      "  insufficient funds         %6ld   (deliveries answering it; events refused below)\n",
      tally.insufficient.load());
  std::printf("  conflicting replays        %6ld   (refused, alerted on stderr)\n",
              tally.conflicts.load());
  std::printf("  errors                     %6ld\n", tally.errors.load());
  std::printf(
      "  elapsed                    %s (%lld deliveries/s)\n\n",
      absl::FormatDuration(elapsed).c_str(),
      static_cast<long long>(static_cast<std::int64_t>(deliveries.size()) * 1000 /
                             std::max<std::int64_t>(1, absl::ToInt64Milliseconds(elapsed))));

  absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
  if (!conn.ok()) return 1;
  const auto scalar = [&](const std::string& sql) {
    absl::StatusOr<idemledger::Result> r = (*conn)->execute(sql);
    return r.ok() && !r->rows.empty() ? r->at(0, 0).value_or("NULL") : std::string("ERROR");
  };
  long applied_events = 0, refused_events = 0, double_applied = 0, unresolved = 0;
  for (int i = 0; i < kEvents; ++i) {
    const int a = applied_per_event[static_cast<std::size_t>(i)];
    const int r = refused_per_event[static_cast<std::size_t>(i)];
    applied_events += a == 1;
    refused_events += r > 0 && a == 0;
    double_applied += a > 1 || (a > 0 && r > 0);
    unresolved += a == 0 && r == 0;
  }
  absl::StatusOr<std::vector<idemledger::BalanceMismatch>> mismatches =
      ledger.find_balance_mismatches(**conn);

  bool ok = true;
  std::printf("invariants:\n");
  ok &= check(tally.errors == 0, "no delivery ended in an error");
  ok &= check(double_applied == 0, "no event applied twice, none both applied and refused");
  ok &= check(unresolved == 0, "every event applied once or refused for insufficient funds");
  ok &= check(tally.conflicts == kTamperedReplays, "every tampered replay refused as a conflict");
  ok &= check(
      scalar("SELECT count(*) FROM quickstart.balance_events") == std::to_string(applied_events),
      "one balance_events row per applied event");
  ok &= check(scalar("SELECT count(*) FROM quickstart.payment_events WHERE status = 'failed'") ==
                  std::to_string(refused_events),
              "every refused event is failed with its outcome recorded");
  ok &= check(scalar("SELECT count(*) FROM quickstart.payment_events WHERE status NOT IN "
                     "('confirmed','failed')") == "0",
              "every event is terminal (confirmed or failed)");
  ok &= check(mismatches.ok() && mismatches->empty(),
              "balance = initial_balance + SUM(balance_events) for every account");
  ok &= check(scalar("SELECT count(*) FROM quickstart.accounts WHERE balance < 0") == "0",
              "no negative balance");
  std::printf("\n%s\n", ok ? "all invariants hold" : "INVARIANT VIOLATED");
  return ok ? 0 : 1;
}
