#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/pg/pool.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

pg::PoolOptions small_pool(std::size_t size) {
  return {.dsn = test_dsn(),
          .max_size = size,
          .acquire_timeout = absl::Milliseconds(300),
          .connection = test_connection_options()};
}

TEST(Pool, CreatesLazilyAndBoundsWaiting) {
  pg::Pool pool(small_pool(2));
  EXPECT_EQ(pool.stats().open, 0u);
  absl::StatusOr<pg::PooledConnection> a = pool.acquire();
  absl::StatusOr<pg::PooledConnection> b = pool.acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(pool.stats().open, 2u);
  const absl::Time start = absl::Now();
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(is_retryable(c.status()));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  *a = std::move(*b);  // returns a's connection
  EXPECT_TRUE(pool.acquire().ok());
}

// A connection returned inside a transaction is rolled back, not replaced,
// and what its borrower locked is free the moment it returns, not when the
// pool next hands it out.
TEST(Pool, AConnectionReturnedInsideATransactionFreesItsLocksAsItReturns) {
  pg::Pool pool(small_pool(1));
  std::unique_ptr<pg::Connection> other = connect();
  const std::string try_lock = "SELECT pg_try_advisory_xact_lock(74319251)";
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->execute("BEGIN").ok());
    ASSERT_TRUE((*c)->execute("SELECT pg_advisory_xact_lock(74319251)").ok());
    ASSERT_TRUE((*c)->execute("CREATE TEMP TABLE leak (x int)").ok());
    EXPECT_EQ(other->execute(try_lock)->at(0, 0), "f") << "held while borrowed";
  }  // returned mid-transaction; nothing acquired since
  EXPECT_EQ(other->execute(try_lock)->at(0, 0), "t") << "still held by an idle pooled session";
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE((*c)->in_transaction());
    ASSERT_TRUE((*c)->execute("BEGIN").ok());
    EXPECT_FALSE((*c)->execute("SELECT 1 / 0").ok());
  }  // returned inside a failed transaction
  EXPECT_EQ(pool.stats().idle, 1u);
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->in_transaction());
  EXPECT_EQ((*c)->execute("SELECT to_regclass('pg_temp.leak') IS NULL")->at(0, 0), "t");
  const pg::Pool::Stats stats = pool.stats();
  EXPECT_EQ(stats.created, 1u) << "rolled back, not replaced";
  EXPECT_EQ(stats.dropped, 0u);
}

// Returned inside a transaction whose session the server ended: the
// ROLLBACK fails, so the session is dropped as it returns.
TEST(Pool, DropsAConnectionThatCannotRollBackAsItReturns) {
  IDEMLEDGER_NEEDS_OWN_SESSION("pg_terminate_backend of a borrowed session");
  pg::Pool pool(small_pool(1));
  std::unique_ptr<pg::Connection> admin = connect();
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->execute("BEGIN").ok());
    const std::string pid = std::to_string((*c)->backend_pid());
    ASSERT_EQ(admin->execute("SELECT pg_terminate_backend(" + pid + ", 5000)")->at(0, 0), "t");
  }
  const pg::Pool::Stats stats = pool.stats();
  EXPECT_EQ(stats.open, 0u);
  EXPECT_EQ(stats.idle, 0u);
  EXPECT_EQ(stats.dropped, 1u);
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->execute("SELECT 1").ok());
}

TEST(Pool, ReplacesASessionTheServerClosed) {
  IDEMLEDGER_NEEDS_OWN_SESSION("pg_terminate_backend of a pooled session");
  pg::Pool pool(small_pool(1));
  std::string pid;
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    pid = std::to_string((*c)->backend_pid());
  }
  std::unique_ptr<pg::Connection> admin = connect();
  ASSERT_EQ(admin->execute("SELECT pg_terminate_backend(" + pid + ")")->at(0, 0), "t");
  absl::SleepFor(absl::Milliseconds(100));
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->execute("SELECT 1").ok()) << "the pool must not hand out the dead session";
  EXPECT_NE(std::to_string((*c)->backend_pid()), pid);
  EXPECT_EQ(pool.stats().dropped, 1u);
}

TEST(Pool, DropsAConnectionWhoseCallBrokeIt) {
  pg::Pool pool(small_pool(1));
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    absl::StatusOr<Result> r = (*c)->execute("SELECT pg_terminate_backend(pg_backend_pid())");
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(connection_broken(r.status())) << r.status();
  }
  EXPECT_EQ(pool.stats().open, 0u);
  EXPECT_EQ(pool.stats().dropped, 1u);
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->execute("SELECT 1").ok());
}

// A session that cannot write — on a standby, or on a primary demoted under
// it — is broken: retryable, never retried in place, replaced by the pool.
TEST(Pool, DropsASessionThatCannotWrite) {
  pg::Pool pool(small_pool(1));
  int pid = 0;
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    pid = (*c)->backend_pid();
    ASSERT_TRUE((*c)->execute("BEGIN READ ONLY").ok());
    absl::StatusOr<Result> r = (*c)->execute("CREATE TABLE idemledger_read_only_probe (i int)");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(sqlstate(r.status()), "25006");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(is_retryable(r.status()));
    EXPECT_TRUE(connection_broken(r.status())) << r.status();
    EXPECT_TRUE((*c)->is_broken());
  }
  EXPECT_EQ(pool.stats().dropped, 1u);
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)->backend_pid(), pid);
  EXPECT_TRUE((*c)->execute("SELECT 1").ok());
}

TEST(Pool, IsThreadSafeUnderContention) {
  pg::Pool pool({.dsn = test_dsn(),
                 .max_size = 3,
                 .acquire_timeout = absl::Seconds(10),
                 .connection = test_connection_options()});
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        absl::StatusOr<pg::PooledConnection> c = pool.acquire();
        if (c.ok() && (*c)->execute("SELECT 1").ok()) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 800);
  EXPECT_LE(pool.stats().created, 3u);
}

TEST(Pool, SurvivesForkOnBothSides) {
  pg::Pool pool(small_pool(2));
  std::string parent_pid;
  {
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    ASSERT_TRUE(c.ok());
    parent_pid = std::to_string((*c)->backend_pid());
  }
  const pid_t child = fork();
  if (child == 0) {
    // The child's copy of the pool must open its own session, and must not
    // send anything on (or close) the parent's.
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    const bool ok = c.ok() && (*c)->execute("SELECT 1").ok() &&
                    std::to_string((*c)->backend_pid()) != parent_pid;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  absl::StatusOr<pg::PooledConnection> c = pool.acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->execute("SELECT 1").ok()) << "the parent's session survived the child";
  EXPECT_EQ(std::to_string((*c)->backend_pid()), parent_pid);
}

// A session the parent holds across fork(): the child's copy of the handle,
// given back in the child, is abandoned there — never pooled, so the child's
// next acquire() opens its own — and so is it in the child's own child.
TEST(Pool, ASessionBorrowedBeforeForkIsNeverPooledByTheChild) {
  pg::Pool pool(small_pool(2));
  absl::StatusOr<pg::PooledConnection> held = pool.acquire();
  ASSERT_TRUE(held.ok());
  const std::string parent_pid = std::to_string((*held)->backend_pid());
  const auto in_child = [&]() -> bool {
    { const pg::PooledConnection mine = std::move(*held); }  // given back here
    absl::StatusOr<pg::PooledConnection> c = pool.acquire();
    return c.ok() && (*c)->execute("SELECT 1").ok() &&
           std::to_string((*c)->backend_pid()) != parent_pid;
  };
  const pid_t child = fork();
  if (child == 0) {
    bool ok = true;
    const pid_t grandchild = fork();
    if (grandchild == 0) _exit(in_child() ? 0 : 1);
    int status = 0;
    ok = waitpid(grandchild, &status, 0) == grandchild && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
    _exit(ok && in_child() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE((*held)->execute("SELECT 1").ok()) << "the parent's session survived its children";
  EXPECT_EQ(std::to_string((*held)->backend_pid()), parent_pid);
}

TEST(Pool, RefusesAMalformedDsnAtOnce) {
  pg::Pool pool({.dsn = "host=/tmp port=notaport =oops", .max_size = 1});
  EXPECT_EQ(pool.acquire().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PgConnection, UnnamedStatementModeWorksForPgBouncer) {
  absl::StatusOr<std::unique_ptr<pg::Connection>> c =
      pg::Connection::open(test_dsn(), {.prepared_statements = false});
  ASSERT_TRUE(c.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*c)->execute("SELECT $1::int + 1", {Param("41")})->at(0, 0), "42");
  }
  const Param p[] = {Param("x")};
  const Statement batch[] = {{"SELECT 1", {}}, {"SELECT $1::text", p}};
  EXPECT_EQ((*c)->execute_atomically(batch)->at(0, 0), "x");
  EXPECT_EQ((*c)->execute("SELECT count(*) FROM pg_prepared_statements")->at(0, 0), "0");
}

TEST(PgConnection, NamesItsSessionUnlessTheDsnDoes) {
  pg::ConnectionOptions options = test_connection_options();
  const auto name_seen = [&](const std::string& dsn) -> std::string {
    absl::StatusOr<std::unique_ptr<pg::Connection>> c = pg::Connection::open(dsn, options);
    if (!c.ok()) return c.status().ToString();
    absl::StatusOr<Result> r = (*c)->execute("SELECT current_setting('application_name')");
    return r.ok() ? r->at(0, 0).value_or("NULL") : r.status().ToString();
  };
  options.application_name = "outbox_worker (test 1.0)";
  EXPECT_EQ(name_seen(test_dsn()), "outbox_worker (test 1.0)");
  options.application_name = std::string(63, 'n');
  EXPECT_EQ(name_seen(test_dsn()), options.application_name) << "63 characters are kept whole";
  EXPECT_EQ(name_seen(test_dsn() + " application_name=from_dsn"), "from_dsn")
      << "the DSN's own name wins over the fallback";

  // Refused before any connection is tried, with the rule that was broken.
  for (const std::string& bad : {std::string(64, 'n'), std::string("tab\there"),
                                 std::string("caf\xc3\xa9"), std::string("nul\0x", 5)}) {
    options.application_name = bad;
    absl::StatusOr<std::unique_ptr<pg::Connection>> c = pg::Connection::open(test_dsn(), options);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.status().message(), ::testing::HasSubstr("printable ASCII")) << bad;
  }
  pg::Pool pool({.dsn = test_dsn(), .max_size = 1, .connection = options});
  EXPECT_EQ(pool.acquire().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PgConnection, PipelinedBatchIsAtomic) {
  std::unique_ptr<pg::Connection> c = connect();
  // A real table, not a temporary one: behind PgBouncer the next transaction
  // may run in another server session.
  const std::string t = "pipelined_" + std::to_string(getpid());
  ASSERT_TRUE(c->execute("CREATE TABLE " + t + " (x int PRIMARY KEY)").ok());
  const std::string insert = "INSERT INTO " + t + " VALUES (1)";
  const std::string count = "SELECT count(*) FROM " + t;
  const Statement batch[] = {{insert, {}}, {insert, {}}};
  absl::StatusOr<Result> r = c->execute_atomically(batch);
  EXPECT_EQ(sqlstate(r.status()), "23505");
  EXPECT_FALSE(commit_in_doubt(r.status())) << "a server refusal is a definite no";
  EXPECT_EQ(c->execute(count)->at(0, 0), "0");
  EXPECT_TRUE(c->is_idle());
  const Statement good[] = {{insert, {}}, {count, {}}};
  EXPECT_EQ(c->execute_atomically(good)->at(0, 0), "1");
  ASSERT_TRUE(c->execute("DROP TABLE " + t).ok());
}

}  // namespace
}  // namespace idemledger::testing
