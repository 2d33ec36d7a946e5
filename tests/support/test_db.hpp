// Shared helpers for integration tests: a real PostgreSQL from
// IDEMLEDGER_TEST_DSN (set by scripts/with-postgres.sh), a fresh schema per
// test, fork()-based workers with a start barrier, and a recording alert sink.
#ifndef IDEMLEDGER_TESTS_SUPPORT_TEST_DB_HPP
#define IDEMLEDGER_TESTS_SUPPORT_TEST_DB_HPP

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "idemledger/core/alert.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/pg/connection.hpp"

namespace idemledger::testing {

// True in the suite's second pass (IDEMLEDGER_TEST_VIA_PGBOUNCER=1), where
// every test connects through PgBouncer in transaction pooling mode.
bool via_pgbouncer();

// True in the suite's partitioned pass (IDEMLEDGER_TEST_PARTITIONED=1), where
// every test schema is converted by enable_monthly_partitioning() after
// migrate(): the whole suite then proves the guarantees on that layout.
bool partitioned_schemas();

// The DSN of the private test server, or of PgBouncer in front of it in the
// second pass; fails the test run loudly if unset.
const std::string& test_dsn();

// Options every test connection uses: unnamed statements behind PgBouncer.
pg::ConnectionOptions test_connection_options();

// A new connection to the test server; aborts the test on failure.
std::unique_ptr<pg::Connection> connect();

// For a test whose subject is a server session itself (LISTEN, killing one
// known backend, a server restart): behind a transaction pooler the client
// has no session of its own, so it runs in the direct pass only.
#define IDEMLEDGER_NEEDS_OWN_SESSION(why)                                                \
  do {                                                                                   \
    if (::idemledger::testing::via_pgbouncer())                                          \
      GTEST_SKIP() << "needs its own server session (" why "); runs in the direct pass"; \
  } while (0)

// Alerts collected in memory, thread-safe.
class RecordingAlertSink : public AlertSink {
 public:
  void alert(const Alert& a) override;
  std::vector<std::string> keys() const;

 private:
  mutable Mutex mu_;
  std::vector<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

// A host-style driver over a real connection: forwards execute() and
// in_transaction() and inherits the interface's default execute_atomically()
// (BEGIN ... COMMIT, no pipelining). Fault-injecting tests derive from it.
class ForwardingConnection : public Connection {
 public:
  explicit ForwardingConnection(Connection& real) : real_(real) {}
  using Connection::execute;
  absl::StatusOr<Result> execute(std::string_view sql, std::span<const Param> params) override {
    return real_.execute(sql, params);
  }
  bool in_transaction() const override { return real_.in_transaction(); }

 protected:
  Connection& real_;
};

// Each test gets its own migrated schema, dropped afterwards.
class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Options for ledger_ (schema and alert sink filled in).
  LedgerOptions options(LedgerOptions base = {}) const;

  // First column of the first row of `sql` ({schema} substituted), or "NULL".
  std::string scalar(const std::string& sql);
  long count(const std::string& sql) { return std::stol(scalar(sql)); }
  void exec(const std::string& sql);
  // How many times this session has called the schema's `function` (with
  // `SET track_functions = 'pl'` run first; a call that raised is not counted).
  std::string function_calls(std::string_view function);

  // The payment event's status, or "NULL" if there is no such event.
  std::string status_of(std::string_view event_id);
  void open_account(std::int64_t user, std::string_view balance);
  std::string balance(std::int64_t user);
  // Inserts a payment_events row directly, as intake would.
  void record_event(const PaymentEvent& e, std::string_view status, int retry_count = 0);
  // Another session that has run `locking_sql` ({schema} substituted) inside an
  // open transaction, holding its row locks until it is rolled back or destroyed.
  std::unique_ptr<pg::Connection> hold_locks(const std::string& locking_sql);
  // How many sessions are waiting on a lock inside this schema's `function`
  // (matched in their query text), polled until there is one or `patience`
  // runs out: the suite's other passes run beside the test, in other schemas.
  long lock_waiters(std::string_view function, absl::Duration patience);
  // Every user's balance == initial_balance + SUM(balance_events), none negative.
  void expect_reconciled();
  // Runs `check` over conn_ itself (the libpq adapter) and then over a host's
  // driver on the same session (ForwardingConnection: the interface's
  // defaults, no pipelining), each under a trace that names it. A fatal
  // failure in the first run ends the test there.
  void over_adapter_and_host_driver(const std::function<void(Connection&)>& check);
  // Polls `done` every 20 ms until it holds or `patience` runs out; its last
  // answer (for a service process the test started, or a forked child).
  static bool eventually(const std::function<bool()>& done,
                         absl::Duration patience = absl::Seconds(20));

  static PaymentEvent event(std::string id, EventType type, std::int64_t user,
                            std::string_view amount);

  // A path for a file the test (or its forked children, or a service it
  // starts) writes: `name` inside the test's own directory (named after its
  // schema, created by any call, parent's or child's), which TearDown removes
  // with everything in it.
  std::string scratch(std::string_view name);

  // The test's own schema, "t_<pid>_<n>_<random>".
  Schema schema_ = kDefaultSchema;
  std::string schema_name_;  // schema_.name(), for building SQL text
  std::unique_ptr<pg::Connection> conn_;
  RecordingAlertSink alerts_;
  std::unique_ptr<Ledger> ledger_;

 private:
  // TempDir()/<schema name>: unique per test, as the schema is.
  std::string scratch_dir() const;
};

// A unique schema name for one test: "t_<pid>_<n>_<random>".
Schema unique_schema();

// One of `stream`'s elements, chosen by `pick(n)` (0..n-1): what a random
// stream sends again (a redelivery, or the same id with other content).
template <typename T, typename Pick>
const T& sent_before(const std::vector<T>& stream, Pick& pick) {
  return stream[static_cast<std::size_t>(pick(static_cast<int>(stream.size())))];
}

// The dead-letter spool key tests seal with (queue/dlq.hpp wants >= 32 bytes).
inline const std::string kTestSpoolKey(32, 'k');

// Runs `work(i)` in `n` forked children, all released at once by a barrier;
// returns each child's exit code (work's return value, 0..255) by index.
std::vector<int> run_forked(int n, const std::function<int(int)>& work);

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_SUPPORT_TEST_DB_HPP
