// outbox_worker — applies recorded events: claim, apply, retry, recover;
// sweeps expired holds.
//
// N threads, each with its own connection (claimers.hpp: which of them
// claim when): claim a batch of due pending events (SKIP LOCKED, leased)
// and apply it through the Ledger in the same transaction
// (Dispatcher::run_once: one commit for both), log one JSON line per event
// with the trace id intake assigned, then wait for a NOTIFY (or the poll
// interval). Thread 0 also returns expired leases to the queue
// and drains the dead-letter spool. SIGTERM: finish the batch in hand, exit.
//
// Configuration (environment): IDEMLEDGER_DSN, IDEMLEDGER_SCHEMA (idemledger),
// IDEMLEDGER_WORKER_THREADS (2: thread 0 claims, the others are spares that
// claim only while claims come back full or thread 0 has been in one claim
// longer than IDEMLEDGER_SPARE_AFTER_MS, 20; 0: every thread always claims),
// IDEMLEDGER_BATCH_SIZE (32), IDEMLEDGER_APPLY_IN_BATCHES (1),
// IDEMLEDGER_APPLY_WITH_CLAIM (1; 0: the claim commits before the apply),
// IDEMLEDGER_LEASE_MS (30000), IDEMLEDGER_POLL_MS (500), IDEMLEDGER_CLAIM_LINGER_MS (25: after
// a short claim, let events gather this long before the next),
// IDEMLEDGER_IDLE_IN_TRANSACTION_MS (30000: how long the server lets a claim
// and apply's transaction wait for this worker before it ends the session and
// the events go back to the queue; 0: the server's own setting),
// IDEMLEDGER_RETRY_BASE_MS (1000), IDEMLEDGER_DLQ_SPOOL (./dead_letters.spool),
// IDEMLEDGER_DLQ_SPOOL_KEY (required, >= 32 bytes: seals every spool line, so
// only what a worker spooled can become a dead letter),
// IDEMLEDGER_METRICS_PORT (-1 = no /metrics; 0 = any free port, logged),
// IDEMLEDGER_WRITE_NOTIFICATIONS (0; 1 writes an outbox row with each outcome),
// IDEMLEDGER_PREPARED_STATEMENTS (1; 0 behind PgBouncer < 1.21, where LISTEN
// is not delivered either and the poll interval does the waking),
// IDEMLEDGER_ETH_RPC_URL (empty; set: a deposit that carries a tx_hash is
// credited only once that Ethereum JSON-RPC node says it is final, asked
// through the shared breaker "eth_rpc"), IDEMLEDGER_RPC_TIMEOUT_MS (2000),
// IDEMLEDGER_FINALITY_RECHECK_MS (15000).
#include <atomic>
#include <thread>
#include <vector>

#include "../common/http.hpp"
#include "../common/http_client.hpp"
#include "../common/service.hpp"
#include "claimers.hpp"
#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

namespace {

int run() {
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const idemledger::Schema schema = example::env_schema();
  const long threads = example::env_long("IDEMLEDGER_WORKER_THREADS", 2, 1, 64);
  const long spare_after_ms = example::env_long("IDEMLEDGER_SPARE_AFTER_MS", 20, 0, 60'000);
  const long batch = example::env_long("IDEMLEDGER_BATCH_SIZE", 32, 1, 10'000);
  const long lease_ms = example::env_long("IDEMLEDGER_LEASE_MS", 30'000, 10, 3'600'000);
  const long poll_ms = example::env_long("IDEMLEDGER_POLL_MS", 500, 10, 60'000);
  const long retry_base_ms = example::env_long("IDEMLEDGER_RETRY_BASE_MS", 1'000, 1, 60'000);
  const std::string spool = example::env_string("IDEMLEDGER_DLQ_SPOOL", "dead_letters.spool");
  const long metrics_port = example::env_long("IDEMLEDGER_METRICS_PORT", -1, -1, 65535);

  prometheus::Registry registry;
  idemledger::LedgerMetrics metrics(registry);
  // The library's own lines (one per event, with intake's trace id; spool
  // writes and drains; recoveries) go to stdout beside ours.
  idemledger::JsonLineLogSink logs(stdout);
  const idemledger::Ledger ledger(
      {.schema = schema,
       .write_notifications = example::env_long("IDEMLEDGER_WRITE_NOTIFICATIONS", 0, 0, 1) == 1,
       .metrics = &metrics});
  const idemledger::DeadLetterQueue dead_letters(
      {.schema = schema,
       .spool_path = spool,
       .spool_key = example::env_string("IDEMLEDGER_DLQ_SPOOL_KEY"),
       .log = &logs});
  if (absl::Status s = dead_letters.check_options(); !s.ok()) {
    example::config_error("IDEMLEDGER_DLQ_SPOOL_KEY: " + std::string(s.message()));
  }
  // Finality before credit, when a node is configured. The oracle's breaker
  // is this process's: its threads stop calling a dead node together and one
  // of them probes it.
  const std::string rpc_url = example::env_string("IDEMLEDGER_ETH_RPC_URL", "");
  std::optional<idemledger::LocalBreaker> rpc_breaker;
  std::optional<idemledger::EthFinalityOracle> finality;
  if (!rpc_url.empty()) {
    rpc_breaker.emplace(idemledger::BreakerOptions{.name = "eth_rpc", .metrics = &registry});
    finality.emplace(idemledger::EthFinalityOracleOptions{
        .transport = example::json_rpc_over_http(
            rpc_url, example::env_long("IDEMLEDGER_RPC_TIMEOUT_MS", 2'000, 10, 600'000)),
        .breaker = &*rpc_breaker});
  }
  const idemledger::Dispatcher dispatcher(
      ledger, {.schema = schema,
               .batch_size = static_cast<int>(batch),
               .lease = absl::Milliseconds(lease_ms),
               .retry_base = absl::Milliseconds(retry_base_ms),
               .dead_letters = &dead_letters,
               .metrics = &metrics,
               .finality = finality ? &*finality : nullptr,
               .finality_recheck = absl::Milliseconds(
                   example::env_long("IDEMLEDGER_FINALITY_RECHECK_MS", 15'000, 10, 3'600'000)),
               .log = &logs,
               .apply_in_batches = example::env_long("IDEMLEDGER_APPLY_IN_BATCHES", 1, 0, 1) == 1,
               .apply_with_claim = example::env_long("IDEMLEDGER_APPLY_WITH_CLAIM", 1, 0, 1) == 1,
               .idle_in_transaction_limit = absl::Milliseconds(example::env_long(
                   "IDEMLEDGER_IDLE_IN_TRANSACTION_MS",
                   absl::ToInt64Milliseconds(idemledger::kIdleInTransactionLimit), 0, 3'600'000)),
               .claim_linger = absl::Milliseconds(
                   example::env_long("IDEMLEDGER_CLAIM_LINGER_MS", 25, 0, 1'000))});
  // One connection per worker thread, one more for scrapes.
  idemledger::pg::Pool pool({.dsn = dsn,
                             .max_size = static_cast<std::size_t>(threads) + 1,
                             .connection = example::env_connection_options("outbox_worker")});
  example::install_stop_handlers();

  const example::MetricsEndpoint metrics_endpoint(
      metrics_port, [&] { return example::scrape_text(registry, metrics, pool, schema); });
  std::atomic<long> processed{0};
  example::Claimers claimers(static_cast<std::size_t>(batch), absl::Milliseconds(spare_after_ms));

  const auto work = [&](int thread) {
    // A spare neither LISTENs (nothing would read what piles up) nor waits
    // for a NOTIFY: Claimers wakes it.
    const bool spare = thread > 0 && spare_after_ms > 0;
    absl::Time next_maintenance = absl::InfinitePast();
    while (!example::stop_requested) {
      absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
      if (!conn.ok()) {
        example::log("warning",
                     {{"msg", "no database connection"}, {"error", conn.status().ToString()}});
        absl::SleepFor(absl::Milliseconds(poll_ms));
        continue;
      }
      if (!spare) {
        if (absl::Status s = dispatcher.listen(**conn); !s.ok())
          continue;  // the pool replaces a dead session
      }
      while (!example::stop_requested && !(*conn)->is_broken()) {
        if (thread == 0 && absl::Now() >= next_maintenance) {
          (void)dispatcher.recover_stale(**conn);  // logs what it recovers
          // Logs what it drains; a refused spool is also a critical alert.
          if (absl::StatusOr<int> drained = dead_letters.drain_spool(**conn); !drained.ok()) {
            example::log("error", {{"msg", "dead-letter spool not drained"},
                                   {"error", drained.status().ToString()}});
          }
          // The hold sweeper: releases holds past their expiry, each once
          // (other workers' sweeps skip what this one locked).
          if (absl::StatusOr<int> expired = ledger.expire_holds(**conn); !expired.ok()) {
            example::log("warning",
                         {{"msg", "hold sweep failed"}, {"error", expired.status().ToString()}});
          } else if (*expired > 0) {
            example::log("info", {{"msg", "holds expired"}, {"count", *expired}});
          }
          next_maintenance = absl::Now() + absl::Seconds(1);
        }
        // Claims and applies in one commit; finished even if SIGTERM
        // arrives; logs one line per event. A failure leaves the events to
        // their leases (or, rolled back, pending): a dead session is replaced.
        if (spare && !claimers.spare_may_claim(absl::Milliseconds(10))) continue;
        if (!spare) claimers.first_started();
        absl::StatusOr<int> claimed = dispatcher.run_once(**conn);
        if (!spare) claimers.first_finished();
        if (!claimed.ok()) {
          if ((*conn)->is_broken()) break;
          absl::SleepFor(absl::Milliseconds(poll_ms));
          continue;
        }
        processed += *claimed;
        claimers.claimed(static_cast<std::size_t>(*claimed));
        if (spare) continue;  // a short claim sends it back to standby
        if (*claimed == 0) {
          (void)dispatcher.wait_for_work(**conn, absl::Milliseconds(poll_ms));
        } else {
          // Let the next claim fill.
          absl::SleepFor(dispatcher.linger_after(static_cast<std::size_t>(*claimed)));
        }
      }
    }
  };
  example::log("info", {{"msg", "worker started"},
                        {"threads", threads},
                        {"spare_after_ms", spare_after_ms},
                        {"schema", schema.name()},
                        {"finality", rpc_url.empty() ? "off" : rpc_url}});
  std::vector<std::thread> pool_threads;
  pool_threads.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) pool_threads.emplace_back(work, t);
  for (auto& t : pool_threads) t.join();
  example::log("info", {{"msg", "worker stopped"},
                        {"processed", processed.load()},
                        {"usage", example::resource_usage()}});
  return 0;
}

}  // namespace

int main() { return example::guarded_main("outbox_worker", run); }
