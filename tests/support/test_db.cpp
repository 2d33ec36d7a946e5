#include "tests/support/test_db.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <system_error>

#include "absl/time/clock.h"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/ops/partitioning.hpp"

namespace idemledger::testing {

bool via_pgbouncer() {
  static const bool via = [] {
    const char* v = std::getenv("IDEMLEDGER_TEST_VIA_PGBOUNCER");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return via;
}

bool partitioned_schemas() {
  static const bool on = [] {
    const char* v = std::getenv("IDEMLEDGER_TEST_PARTITIONED");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

const std::string& test_dsn() {
  static const std::string dsn = [] {
    const char* name = via_pgbouncer() ? "IDEMLEDGER_PGBOUNCER_SUITE_DSN" : "IDEMLEDGER_TEST_DSN";
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
      std::fprintf(stderr,
                   "%s is not set: run the tests through scripts/test.sh, "
                   "which starts a private PostgreSQL (and PgBouncer)\n",
                   name);
      std::abort();
    }
    return std::string(v);
  }();
  return dsn;
}

pg::ConnectionOptions test_connection_options() {
  // PgBouncer 1.18 in transaction mode cannot keep named prepared statements.
  return {.prepared_statements = !via_pgbouncer()};
}

std::unique_ptr<pg::Connection> connect() {
  absl::StatusOr<std::unique_ptr<pg::Connection>> c =
      pg::Connection::open(test_dsn(), test_connection_options());
  if (!c.ok()) {
    ADD_FAILURE() << "connect: " << c.status();
    std::abort();
  }
  return std::move(*c);
}

void RecordingAlertSink::alert(const Alert& a) {
  MutexLock lock(&mu_);
  keys_.emplace_back(a.key);
}

std::vector<std::string> RecordingAlertSink::keys() const {
  MutexLock lock(&mu_);
  return keys_;
}

Schema unique_schema() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  return *Schema::create("t_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" +
                         std::to_string(rd() % 1000000));
}

void LedgerTest::SetUp() {
  schema_ = unique_schema();
  schema_name_ = std::string(schema_.name());
  conn_ = connect();
  ASSERT_TRUE(migrate(*conn_, schema_).ok());
  if (partitioned_schemas()) {
    absl::StatusOr<int> created = enable_monthly_partitioning(*conn_, {.schema = schema_});
    ASSERT_TRUE(created.ok()) << created.status();
  }
  ledger_ = std::make_unique<Ledger>(options());
}

void LedgerTest::TearDown() {
  if (conn_ != nullptr && !conn_->is_broken()) {
    (void)conn_->execute("DROP SCHEMA " + schema_name_ + " CASCADE");
  }
  // SetUp never ran: no directory of ours, and scratch_dir() would name
  // TempDir() itself.
  if (schema_name_.empty()) return;
  std::error_code ec;  // nothing to remove when scratch() was never called
  std::filesystem::remove_all(scratch_dir(), ec);
  EXPECT_FALSE(ec) << "removing " << scratch_dir() << ": " << ec.message();
}

std::string LedgerTest::scratch_dir() const { return ::testing::TempDir() + "/" + schema_name_; }

std::string LedgerTest::scratch(std::string_view name) {
  std::error_code ec;
  std::filesystem::create_directory(scratch_dir(), ec);  // false, no error, if it exists
  EXPECT_FALSE(ec) << "creating " << scratch_dir() << ": " << ec.message();
  return scratch_dir() + "/" + std::string(name);
}

LedgerOptions LedgerTest::options(LedgerOptions base) const {
  base.schema = schema_;
  base.alerts = const_cast<RecordingAlertSink*>(&alerts_);
  return base;
}

std::string LedgerTest::scalar(const std::string& sql) {
  absl::StatusOr<Result> r = conn_->execute(schema_.qualify(sql));
  EXPECT_TRUE(r.ok()) << sql << ": " << r.status();
  if (!r.ok() || r->rows.empty()) return "NULL";
  return r->at(0, 0).value_or("NULL");
}

std::string LedgerTest::status_of(std::string_view event_id) {
  absl::StatusOr<Result> r = conn_->execute(
      schema_.qualify("SELECT status FROM {schema}.payment_events WHERE event_id = $1"),
      Params(std::string(event_id)));
  EXPECT_TRUE(r.ok()) << event_id << ": " << r.status();
  if (!r.ok() || r->rows.empty()) return "NULL";
  return r->at(0, 0).value_or("NULL");
}

void LedgerTest::exec(const std::string& sql) {
  absl::StatusOr<Result> r = conn_->execute(schema_.qualify(sql));
  ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
}

std::string LedgerTest::function_calls(std::string_view function) {
  exec("SELECT pg_stat_force_next_flush()");
  exec("SELECT 1");  // a transaction end flushes the counts
  exec("SELECT pg_stat_clear_snapshot()");
  return scalar("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = '" +
                schema_name_ + "' AND funcname = '" + std::string(function) + "'");
}

void LedgerTest::open_account(std::int64_t user, std::string_view balance) {
  ASSERT_TRUE(ledger_->open_account(*conn_, user, *Amount::parse_balance(balance)).ok());
}

std::string LedgerTest::balance(std::int64_t user) {
  absl::StatusOr<Amount> b = ledger_->balance(*conn_, user);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? b->to_string() : "?";
}

void LedgerTest::record_event(const PaymentEvent& e, std::string_view status, int retry_count) {
  const std::string user = std::to_string(e.user_id);
  const std::string amount = e.amount.to_string();
  const std::string retries = std::to_string(retry_count);
  absl::StatusOr<Result> r = conn_->execute(
      schema_.qualify(
          "INSERT INTO {schema}.payment_events (event_id, user_id, amount, event_type, status, "
          "retry_count, asset) VALUES ($1, $2::bigint, $3::numeric, $4, $5, $6::int, "
          "coalesce($7, (SELECT code FROM {schema}.assets WHERE is_default)))"),
      {Param(e.event_id), Param(user), Param(amount), Param(to_string(e.type)), Param(status),
       Param(retries), e.asset ? Param(e.asset->code()) : Param()});
  ASSERT_TRUE(r.ok()) << r.status();
}

std::unique_ptr<pg::Connection> LedgerTest::hold_locks(const std::string& locking_sql) {
  std::unique_ptr<pg::Connection> holder = connect();
  EXPECT_TRUE(holder->execute("BEGIN").ok());
  absl::StatusOr<Result> r = holder->execute(schema_.qualify(locking_sql));
  EXPECT_TRUE(r.ok()) << r.status();
  return holder;
}

long LedgerTest::lock_waiters(std::string_view function, absl::Duration patience) {
  const std::string waiting =
      "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%" +
      schema_name_ + "." + std::string(function) + "%'";
  const absl::Time deadline = absl::Now() + patience;
  long n = count(waiting);
  while (n == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    n = count(waiting);
  }
  return n;
}

bool LedgerTest::eventually(const std::function<bool()>& done, absl::Duration patience) {
  const absl::Time deadline = absl::Now() + patience;
  while (!done() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  return done();
}

void LedgerTest::expect_reconciled() {
  absl::StatusOr<std::vector<BalanceMismatch>> m = ledger_->find_balance_mismatches(*conn_);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const BalanceMismatch& x : *m) {
    ADD_FAILURE() << "user " << x.user_id << " balance " << x.balance << " expected " << x.expected;
  }
  EXPECT_EQ(
      count(
          "SELECT count(*) FROM {schema}.accounts WHERE balance < 0 OR held < 0 OR held > balance"),
      0);
}

void LedgerTest::over_adapter_and_host_driver(const std::function<void(Connection&)>& check) {
  {
    SCOPED_TRACE("over the libpq adapter");
    check(*conn_);
  }
  if (HasFatalFailure()) return;
  ForwardingConnection host_driver(*conn_);
  SCOPED_TRACE("over a host's driver");
  check(host_driver);
}

PaymentEvent LedgerTest::event(std::string id, EventType type, std::int64_t user,
                               std::string_view amount) {
  return {
      .event_id = std::move(id), .type = type, .user_id = user, .amount = *Amount::parse(amount)};
}

std::vector<int> run_forked(int n, const std::function<int(int)>& work) {
  int barrier[2];
  if (pipe(barrier) != 0) std::abort();
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      close(barrier[1]);
      char byte;
      // Blocks until the parent closes the write end: every child starts together.
      while (read(barrier[0], &byte, 1) > 0) {
      }
      const int code = work(i);
      std::fflush(nullptr);
      _exit(code);  // no gtest teardown, no atexit handlers in the child
    }
    children.push_back(pid);
  }
  close(barrier[0]);
  close(barrier[1]);
  std::vector<int> codes;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace idemledger::testing
