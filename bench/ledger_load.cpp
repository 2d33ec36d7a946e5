// ledger_load — end-to-end deposit throughput through process_deposit.
//
//   ledger_load --dsn DSN [--schema bench] [--reuse] [--clients 4] [--seconds 20]
//               [--history 100000] [--unnamed] [--metrics] [--partitioned]
//               [--workload deposit|hold_post] [--batch N [--mixed]] [--latency-log FILE]
//
// Sets up the schema like the reference workloads' start state (10,000
// users, N historical confirmed deposits, VACUUM ANALYZEd) — or, with
// --reuse, takes it as an earlier run left it (bench/run_scale.sh loads
// 10,000,000 rows once and measures on them several times) — then runs
// `clients` threads, each with its own connection, calling process_deposit
// with fresh event ids for `seconds`. --metrics records LedgerMetrics on every
// call; --partitioned converts the schema to monthly partitions after the
// history is loaded. --workload hold_post runs two-phase withdrawals instead:
// hold (amount + fee) then post, each its own transaction; one "operation" is
// the pair. --batch N sends N deposits per process_batch call instead (one
// transaction, one round trip); --mixed makes 30% of them withdrawals and 10%
// redeliveries of events already sent. Throughput and CPU are then per event
// (per pair with hold_post, whose batch is N/2 holds then their N/2 posts in
// one process_steps call), latency per call. --latency-log writes every operation's latency (µs,
// one per line, ascending) for bench/plots/latency.gp. Prints one line:
//   RESULT name=idemledger clients=4 deposits=... tps=... p50_us=... p99_us=... cpu_us=...
// cpu_us is the driver's own CPU (user + system, all its threads, from
// getrusage over the timed loop) per operation: what the library costs the
// host besides waiting for the server.
// bench/run_load.sh runs it beside pgbench on the same server and prints ratios.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "idemledger.hpp"
#include "idemledger/pg/connection.hpp"

namespace {

// This process's CPU so far, user + system, in microseconds.
std::int64_t process_cpu_us() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto us = [](const timeval& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1'000'000 + t.tv_usec;
  };
  return us(u.ru_utime) + us(u.ru_stime);
}

constexpr int kUsers = 10'000;

struct Options {
  std::string dsn;
  idemledger::Schema schema = "bench";
  bool reuse = false;  // the schema's ledger and history as an earlier run left them
  int clients = 4;
  int seconds = 20;
  int history = 100'000;
  bool prepared = true;
  bool metrics = false;
  bool partitioned = false;
  bool hold_post = false;
  int batch = 0;  // events per process_batch call; 0: single calls
  bool mixed = false;
  std::string latency_log;  // empty: none
};

bool run(idemledger::Connection& c, const std::string& sql) {
  absl::StatusOr<idemledger::Result> r = c.execute(sql);
  if (!r.ok()) std::fprintf(stderr, "setup: %s: %s\n", sql.c_str(), r.status().ToString().c_str());
  return r.ok();
}

// The populated start state: without history, plans cached on empty tables
// pick sequential scans and keep them (see bench/reference/README.md).
bool set_up(idemledger::Connection& c, const idemledger::Schema& schema, int history) {
  // Every statement names its tables through the validated Schema.
  const auto sql = [&](const std::string& text) { return run(c, schema.qualify(text)); };
  if (!sql("DROP SCHEMA IF EXISTS {schema} CASCADE")) return false;
  if (absl::Status s = idemledger::migrate(c, schema); !s.ok()) {
    std::fprintf(stderr, "migrate: %s\n", s.ToString().c_str());
    return false;
  }
  const std::string h = std::to_string(history);
  // Every history deposit as the ledger writes one: the user's leg, the
  // chain's opposite leg, the idempotency record, the event; then the
  // accounts hold what their entries sum to.
  return sql("INSERT INTO {schema}.users (id) SELECT g FROM generate_series(1, " +
             std::to_string(kUsers) + ") g") &&
         sql("INSERT INTO {schema}.payment_events (event_id, user_id, asset, amount, event_type, "
             "status, created_at, updated_at) "
             "SELECT 'h' || g, 1 + g % 10000, 'DEFAULT', (1 + g % 1000000) / 100.0, 'deposit', "
             "'confirmed', now() - interval '1 day', now() - interval '1 day' "
             "FROM generate_series(1, " +
             h + ") g") &&
         // Same key encoding as idempotency_key(): SHA-256 over length-prefixed fields.
         sql("INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset, "
             "created_at) "
             "SELECT encode(sha256(int4send(octet_length('h' || g)) || convert_to('h' || g, "
             "'UTF8') || int4send(7) || convert_to('deposit', 'UTF8')), 'hex'), 'history', "
             "'success', 'DEFAULT', now() - interval '1 day' FROM generate_series(1, " +
             h + ") g") &&
         sql("INSERT INTO {schema}.balance_events (user_id, asset, amount, event_type, "
             "source_event_id, created_at) "
             "SELECT 1 + g % 10000, 'DEFAULT', (1 + g % 1000000) / 100.0, 'deposit', 'h' || g, "
             "now() - interval '1 day' FROM generate_series(1, " +
             h + ") g") &&
         sql("INSERT INTO {schema}.system_entries (asset, account, amount, event_type, "
             "source_event_id, created_at) "
             "SELECT 'DEFAULT', 'external', -((1 + g % 1000000) / 100.0), 'deposit', 'h' || g, "
             "now() - interval '1 day' FROM generate_series(1, " +
             h + ") g") &&
         sql("INSERT INTO {schema}.accounts (user_id, asset, balance, initial_balance) "
             "SELECT u.id, 'DEFAULT', coalesce(s.total, 0), 0 FROM {schema}.users u LEFT JOIN "
             "(SELECT user_id, sum(amount) AS total FROM {schema}.balance_events GROUP BY "
             "user_id) s ON s.user_id = u.id") &&
         run(c, "VACUUM ANALYZE") && run(c, "CHECKPOINT");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("IDEMLEDGER_TEST_DSN")) o.dsn = env;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--dsn")
      o.dsn = value();
    else if (a == "--clients")
      o.clients = std::atoi(value().c_str());
    else if (a == "--seconds")
      o.seconds = std::atoi(value().c_str());
    else if (a == "--schema")
      o.schema = [&] {
        absl::StatusOr<idemledger::Schema> schema = idemledger::Schema::create(value());
        if (!schema.ok()) {
          std::fprintf(stderr, "--schema: %s\n", schema.status().ToString().c_str());
          std::exit(2);
        }
        return *schema;
      }();
    else if (a == "--reuse")
      o.reuse = true;
    else if (a == "--history")
      o.history = std::atoi(value().c_str());
    else if (a == "--unnamed")
      o.prepared = false;
    else if (a == "--metrics")
      o.metrics = true;
    else if (a == "--partitioned")
      o.partitioned = true;
    else if (a == "--batch")
      o.batch = std::atoi(value().c_str());
    else if (a == "--mixed")
      o.mixed = true;
    else if (a == "--latency-log" && i + 1 < argc)
      o.latency_log = value();
    else if (a == "--workload" && i + 1 < argc &&
             (std::string_view(argv[i + 1]) == "deposit" ||
              std::string_view(argv[i + 1]) == "hold_post"))
      o.hold_post = value() == "hold_post";
    else {
      std::fprintf(
          stderr,
          "usage: ledger_load --dsn DSN [--schema NAME] [--reuse] [--clients N] [--seconds S] "
          "[--history N] "
          "[--unnamed] [--metrics] [--partitioned] [--workload deposit|hold_post] "
          "[--batch N [--mixed]] [--latency-log FILE]\n");
      return 2;
    }
  }
  if (o.batch < 0 || o.batch > static_cast<int>(idemledger::kMaxBatchSize) ||
      (o.batch == 1 && o.hold_post) || (o.mixed && (o.batch == 0 || o.hold_post))) {
    std::fprintf(stderr,
                 "--batch takes 1..%zu steps (2.. with hold_post); --mixed needs it, not "
                 "hold_post\n",
                 idemledger::kMaxBatchSize);
    return 2;
  }
  absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> admin =
      idemledger::pg::Connection::open(o.dsn);
  if (!admin.ok()) {
    std::fprintf(stderr, "connect: %s\n", admin.status().ToString().c_str());
    return 1;
  }
  if (!o.reuse && !set_up(**admin, o.schema, o.history)) return 1;
  if (o.partitioned && !o.reuse) {
    absl::StatusOr<int> created =
        idemledger::enable_monthly_partitioning(**admin, {.schema = o.schema});
    if (!created.ok() || !run(**admin, "VACUUM ANALYZE")) {
      std::fprintf(stderr, "partitioning: %s\n", created.status().ToString().c_str());
      return 1;
    }
  }

  prometheus::Registry registry;
  idemledger::LedgerMetrics metrics(registry);
  const idemledger::Ledger ledger({.schema = o.schema, .metrics = o.metrics ? &metrics : nullptr});
  std::vector<idemledger::Amount> amounts;  // 0.01 .. 10000.00, like the reference scripts
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4096; ++i) {
    const auto cents = 1 + rng() % 1'000'000;
    amounts.push_back(*idemledger::Amount::parse(std::to_string(cents / 100) + "." +
                                                 std::to_string(cents % 100)));
  }
  std::vector<idemledger::Amount> small;  // 0.01 .. 1.00, what a hold takes
  for (int cents = 1; cents <= 100; ++cents) {
    small.push_back(*idemledger::Amount::from_base_units(std::to_string(cents), 2));
  }

  // Fresh event ids: a reused schema already holds an earlier run's.
  const std::string tag =
      o.reuse ? "R" + std::to_string(absl::ToUnixMicros(absl::Now())) + "_" : std::string("L");
  std::atomic<bool> failed{false};
  std::atomic<std::int64_t> events{0}, applied{0};  // events answered, and applied
  std::vector<std::vector<std::int64_t>> latencies(static_cast<std::size_t>(o.clients));
  const absl::Time deadline = absl::Now() + absl::Seconds(o.seconds);
  const absl::Time start = absl::Now();
  const std::int64_t cpu_start = process_cpu_us();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(o.clients));
  for (int t = 0; t < o.clients; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
          idemledger::pg::Connection::open(o.dsn, {.prepared_statements = o.prepared});
      if (!c.ok()) {
        failed = true;
        return;
      }
      std::mt19937_64 local(static_cast<std::uint64_t>(t) + 1);
      auto& lat = latencies[static_cast<std::size_t>(t)];
      lat.reserve(200'000);
      idemledger::PaymentEvent e{.type = idemledger::EventType::kDeposit};
      idemledger::HoldRequest hold{.fee = *idemledger::Amount::parse("0.01"),
                                   .expires_in = absl::Hours(1)};
      idemledger::PostRequest post;
      const auto report = [&](std::string_view what, const std::string& id,
                              const absl::Status& status, std::string_view outcome) {
        std::fprintf(stderr, "%.*s %s: %s\n", static_cast<int>(what.size()), what.data(),
                     id.c_str(),
                     status.ok() ? std::string(outcome).c_str() : status.ToString().c_str());
        failed = true;
      };
      if (o.batch > 0 && o.hold_post) {
        // N/2 holds, then a post of each: one transaction per N steps.
        const std::size_t pairs = static_cast<std::size_t>(o.batch) / 2;
        std::vector<idemledger::LedgerStep> steps(2 * pairs);
        for (std::int64_t n = 0; absl::Now() < deadline;) {
          for (std::size_t i = 0; i < pairs; ++i, ++n) {
            hold.event_id = tag + std::to_string(t) + "_" + std::to_string(n);
            hold.user_id = 1 + static_cast<std::int64_t>(local() % kUsers);
            hold.amount = small[local() % small.size()];  // balances never run dry
            post.hold_id = hold.event_id;
            steps[i] = hold;
            steps[pairs + i] = post;
          }
          const absl::Time begin = absl::Now();
          absl::StatusOr<std::vector<absl::StatusOr<idemledger::StepResult>>> r =
              idemledger::with_retries(idemledger::RetryPolicy{},
                                       [&] { return ledger.process_steps(**c, steps); });
          if (!r.ok()) return report("steps", tag, r.status(), "");
          for (std::size_t i = 0; i < steps.size(); ++i) {
            const absl::StatusOr<idemledger::StepResult>& a = (*r)[i];
            const auto* held = a.ok() ? std::get_if<idemledger::HoldResult>(&*a) : nullptr;
            if (held == nullptr || held->outcome != idemledger::HoldOutcome::kApplied) {
              return report("batched step", std::to_string(i), a.status(),
                            held != nullptr ? idemledger::to_string(held->outcome) : "");
            }
          }
          events += static_cast<std::int64_t>(pairs);
          applied += static_cast<std::int64_t>(pairs);
          lat.push_back(absl::ToInt64Microseconds(absl::Now() - begin));
        }
        return;
      }
      if (o.batch > 0) {
        std::vector<idemledger::PaymentEvent> batch(static_cast<std::size_t>(o.batch), e);
        std::vector<idemledger::PaymentEvent> previous;
        for (std::int64_t n = 0; absl::Now() < deadline;) {
          for (auto& b : batch) {
            const auto roll = local() % 100;
            if (o.mixed && roll < 10 && !previous.empty()) {
              b = previous[local() % previous.size()];  // a redelivery
              continue;
            }
            b.event_id = tag + std::to_string(t) + "_" + std::to_string(n++);
            b.user_id = 1 + static_cast<std::int64_t>(local() % kUsers);
            const bool debit = o.mixed && roll < 40;
            b.type = debit ? idemledger::EventType::kWithdrawal : idemledger::EventType::kDeposit;
            // A withdrawal takes what a hold would: balances never run dry.
            b.amount = debit ? small[local() % small.size()] : amounts[local() % amounts.size()];
          }
          const absl::Time begin = absl::Now();
          absl::StatusOr<std::vector<absl::StatusOr<idemledger::Outcome>>> r =
              idemledger::with_retries(idemledger::RetryPolicy{},
                                       [&] { return ledger.process_batch(**c, batch); });
          if (!r.ok()) return report("batch", batch.front().event_id, r.status(), "");
          for (std::size_t i = 0; i < batch.size(); ++i) {
            const absl::StatusOr<idemledger::Outcome>& a = (*r)[i];
            if (!a.ok() || *a == idemledger::Outcome::kInsufficientFunds) {
              return report("batched event", batch[i].event_id, a.status(),
                            a.ok() ? idemledger::to_string(*a) : "");
            }
            if (*a == idemledger::Outcome::kApplied) ++applied;
          }
          events += static_cast<std::int64_t>(batch.size());
          lat.push_back(absl::ToInt64Microseconds(absl::Now() - begin));
          // What was just sent is where redeliveries come from; the batch
          // before it is overwritten next (no copy after the first call).
          if (previous.empty()) {
            previous = batch;
          } else {
            previous.swap(batch);
          }
        }
        return;
      }
      for (std::int64_t n = 0; absl::Now() < deadline; ++n) {
        e.event_id = tag + std::to_string(t) + "_" + std::to_string(n);
        e.user_id = 1 + static_cast<std::int64_t>(local() % kUsers);
        e.amount = amounts[local() % amounts.size()];
        const absl::Time begin = absl::Now();
        if (o.hold_post) {
          hold.event_id = e.event_id;
          hold.user_id = e.user_id;
          hold.amount = small[local() % small.size()];  // balances never run dry
          absl::StatusOr<idemledger::HoldResult> h = idemledger::with_retries(
              idemledger::RetryPolicy{}, [&] { return ledger.hold(**c, hold); });
          if (!h.ok() || h->outcome != idemledger::HoldOutcome::kApplied) {
            return report("hold", e.event_id, h.status(),
                          h.ok() ? idemledger::to_string(h->outcome) : "");
          }
          post.hold_id = e.event_id;
          absl::StatusOr<idemledger::HoldResult> p = idemledger::with_retries(
              idemledger::RetryPolicy{}, [&] { return ledger.post(**c, post); });
          if (!p.ok() || p->outcome != idemledger::HoldOutcome::kApplied) {
            return report("post", e.event_id, p.status(),
                          p.ok() ? idemledger::to_string(p->outcome) : "");
          }
        } else {
          absl::StatusOr<idemledger::Outcome> r = idemledger::with_retries(
              idemledger::RetryPolicy{}, [&] { return ledger.process_deposit(**c, e); });
          if (!r.ok() || *r != idemledger::Outcome::kApplied) {
            return report("deposit", e.event_id, r.status(),
                          r.ok() ? idemledger::to_string(*r) : "");
          }
        }
        lat.push_back(absl::ToInt64Microseconds(absl::Now() - begin));
        ++events;
        ++applied;
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::int64_t elapsed_us = absl::ToInt64Microseconds(absl::Now() - start);
  const std::int64_t cpu_us = process_cpu_us() - cpu_start;
  std::vector<std::int64_t> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  if (failed || all.empty()) return 1;
  std::sort(all.begin(), all.end());
  const auto pct = [&](int p) {
    return all[std::min(all.size() - 1, all.size() * static_cast<std::size_t>(p) / 100)];
  };

  if (!o.latency_log.empty()) {
    std::FILE* log = std::fopen(o.latency_log.c_str(), "w");
    if (log == nullptr) {
      std::fprintf(stderr, "cannot write %s: %s\n", o.latency_log.c_str(), std::strerror(errno));
      return 1;
    }
    for (const std::int64_t us : all) std::fprintf(log, "%lld\n", static_cast<long long>(us));
    std::fclose(log);
  }

  absl::StatusOr<std::vector<idemledger::BalanceMismatch>> mismatches =
      ledger.find_balance_mismatches(**admin);
  if (!mismatches.ok() || !mismatches->empty()) {
    std::fprintf(stderr, "reconciliation failed after the load\n");
    return 1;
  }
  if (o.metrics && static_cast<std::int64_t>(metrics.applied.Value()) != applied) {
    std::fprintf(stderr, "metrics counted %llu applied, the driver %lld\n",
                 static_cast<unsigned long long>(metrics.applied.Value()),
                 static_cast<long long>(applied.load()));
    return 1;
  }
  std::printf(
      "RESULT name=idemledger clients=%d deposits=%zu tps=%lld p50_us=%lld p99_us=%lld "
      "cpu_us=%lld.%lld\n",
      o.clients, static_cast<std::size_t>(events.load()),
      static_cast<long long>(events.load() * 1'000'000 / elapsed_us),
      static_cast<long long>(pct(50)), static_cast<long long>(pct(99)),
      static_cast<long long>(cpu_us / events.load()),
      static_cast<long long>(cpu_us * 10 / events.load() % 10));
  return 0;
}
