// ops_load — the operations jobs at scale, on the private server.
//
//   ops_load --dsn DSN [--events 1000000] [--users 10000] [--clients 2] [--seconds 10]
//            [--partitioned 1]
//
// Seeds schema "ops" with `users` users and `events` ledger entries (and as
// many confirmed events and final idempotency records, 70 days old: a whole month past the 30-day
// TTL), with --partitioned 1 converts it to monthly partitions, then measures:
//   1. a full reconciliation: time, and this process's peak memory (VmHWM);
//   2. deposits/s with `clients` connections for `seconds`, alone (baseline);
//   3. cleanup of all the old idempotency records, while the same deposit
//      load runs: the cleanup's time and the deposits/s meanwhile.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "idemledger.hpp"
#include "idemledger/pg/connection.hpp"

namespace {

std::unique_ptr<idemledger::pg::Connection> connect(const std::string& dsn) {
  absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
      idemledger::pg::Connection::open(dsn);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*c);
}

void run(idemledger::Connection& c, const std::string& sql) {
  if (absl::StatusOr<idemledger::Result> r = c.execute(sql); !r.ok()) {
    std::fprintf(stderr, "%s: %s\n", sql.c_str(), r.status().ToString().c_str());
    std::exit(1);
  }
}

long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmHWM:")) return std::atol(line.c_str() + 6);
  }
  return -1;
}

// Deposits from `clients` connections until `stop`; returns how many.
long deposit_load(const std::string& dsn, int clients, std::atomic<bool>& stop, int users,
                  const std::string& tag) {
  std::atomic<long> done{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(clients));
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<idemledger::pg::Connection> c = connect(dsn);
      const idemledger::Ledger ledger({.schema = "ops"});
      const idemledger::Amount amount = *idemledger::Amount::parse("1.25");
      for (long n = 0; !stop; ++n) {
        const idemledger::PaymentEvent e{
            .event_id = tag + std::to_string(t) + "_" + std::to_string(n),
            .type = idemledger::EventType::kDeposit,
            .user_id = 1 + (n * 7919 + t) % users,
            .amount = amount};
        if (idemledger::with_retries({}, [&] { return ledger.process_deposit(*c, e); }).ok())
          ++done;
      }
    });
  }
  for (auto& th : threads) th.join();
  return done.load();
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_dsn = std::getenv("IDEMLEDGER_TEST_DSN");
  std::string dsn = env_dsn != nullptr ? env_dsn : "";
  long events = 1'000'000;
  int users = 10'000, clients = 2, seconds = 10;
  bool partitioned = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--dsn")
      dsn = v;
    else if (a == "--events")
      events = std::atol(v.c_str());
    else if (a == "--users")
      users = std::atoi(v.c_str());
    else if (a == "--clients")
      clients = std::atoi(v.c_str());
    else if (a == "--seconds")
      seconds = std::atoi(v.c_str());
    else if (a == "--partitioned")
      partitioned = v == "1";
  }
  std::unique_ptr<idemledger::pg::Connection> c = connect(dsn);
  run(*c, "DROP SCHEMA IF EXISTS ops CASCADE");
  if (absl::Status s = idemledger::migrate(*c, "ops"); !s.ok()) return 1;
  const std::string n = std::to_string(events), u = std::to_string(users);
  std::fprintf(stderr, "seeding %ld ledger entries over %d users...\n", events, users);
  run(*c, "INSERT INTO ops.users (id) SELECT g FROM generate_series(1, " + u + ") g");
  run(*c,
      "INSERT INTO ops.balance_events (user_id, asset, amount, event_type, source_event_id, "
      "created_at) SELECT 1 + g % " +
          u +
          ", 'DEFAULT', (1 + g % 1000) / 100.0, 'deposit', 'h' || g, now() - interval '70 days' "
          "FROM generate_series(1, " +
          n + ") g");
  // The other leg of each: the full pass checks every asset sums to zero.
  run(*c,
      "INSERT INTO ops.system_entries (asset, account, amount, event_type, source_event_id, "
      "created_at) SELECT 'DEFAULT', 'external', -((1 + g % 1000) / 100.0), 'deposit', 'h' || g, "
      "now() - interval '70 days' FROM generate_series(1, " +
          n + ") g");
  // Their events too: plans cached while payment_events is empty would scan it
  // sequentially for the rest of the run (see bench/reference/README.md).
  run(*c,
      "INSERT INTO ops.payment_events (event_id, user_id, asset, amount, event_type, status, "
      "created_at, updated_at) SELECT 'h' || g, 1 + g % " +
          u +
          ", 'DEFAULT', (1 + g % 1000) / 100.0, 'deposit', 'confirmed', now() - interval '70 "
          "days', "
          "now() - interval '70 days' FROM generate_series(1, " +
          n + ") g");
  run(*c,
      "INSERT INTO ops.processed_events (idempotency_key, fingerprint, outcome, asset, created_at) "
      "SELECT md5('h' || g), 'history', 'success', 'DEFAULT', now() - interval '70 days' FROM "
      "generate_series(1, " +
          n + ") g");
  run(*c,
      "INSERT INTO ops.accounts (user_id, asset, balance, initial_balance) SELECT u.id, "
      "'DEFAULT', coalesce(s.total, 0), 0 FROM ops.users u LEFT JOIN (SELECT user_id, "
      "sum(amount) AS total FROM ops.balance_events GROUP BY user_id) s ON s.user_id = u.id");
  if (partitioned) {
    if (!idemledger::enable_monthly_partitioning(*c, {.schema = "ops"}).ok()) return 1;
    std::printf("RESULT layout=monthly_partitions\n");
  }
  run(*c, "VACUUM ANALYZE");

  const long rss_before = peak_rss_kib();
  absl::Time start = absl::Now();
  absl::StatusOr<idemledger::ReconcileReport> r =
      idemledger::Reconciler({.schema = "ops"}).full(*c);
  const absl::Duration reconcile_time = absl::Now() - start;
  if (!r.ok() || !r->clean()) {
    std::fprintf(stderr, "reconciliation failed or found mismatches\n");
    return 1;
  }
  std::printf(
      "RESULT full_reconciliation entries=%ld users=%lld seconds=%.2f peak_rss_kib=%ld (before "
      "%ld)\n",
      events, static_cast<long long>(r->users_checked), absl::ToDoubleSeconds(reconcile_time),
      peak_rss_kib(), rss_before);

  std::atomic<bool> stop{false};
  std::thread timer([&] {
    absl::SleepFor(absl::Seconds(seconds));
    stop = true;
  });
  const long baseline = deposit_load(dsn, clients, stop, users, "base");
  timer.join();
  std::printf("RESULT deposits_alone clients=%d per_second=%ld\n", clients, baseline / seconds);

  stop = false;
  std::atomic<long> during{0};
  std::thread load([&] { during = deposit_load(dsn, clients, stop, users, "during"); });
  start = absl::Now();
  absl::StatusOr<idemledger::CleanupReport> cleaned =
      idemledger::cleanup_idempotency_records(*c, {.schema = "ops",
                                                   .ttl = absl::Hours(24 * 30),
                                                   .batch_size = 5000,
                                                   .pause = absl::Milliseconds(20)});
  const absl::Duration cleanup_time = absl::Now() - start;
  stop = true;
  load.join();
  if (!cleaned.ok()) return 1;
  std::printf(
      "RESULT cleanup deleted=%lld batches=%lld partitions_dropped=%lld seconds=%.2f "
      "deposits_per_second_meanwhile=%lld\n",
      static_cast<long long>(cleaned->deleted), static_cast<long long>(cleaned->batches),
      static_cast<long long>(cleaned->partitions_dropped), absl::ToDoubleSeconds(cleanup_time),
      static_cast<long long>(during * 1000 /
                             std::max<std::int64_t>(1, absl::ToInt64Milliseconds(cleanup_time))));
  return 0;
}
