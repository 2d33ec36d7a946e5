// The Connection interface's own helpers, on a real server: the RAII
// Transaction with savepoints and an idle limit, and the default
// execute_atomically() and open_transaction() a host's driver inherits when
// it cannot pipeline.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/status.hpp"
#include "src/core/internal/pinned.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class ConnectionTest : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    exec("CREATE TABLE {schema}.t (x int PRIMARY KEY)");
  }
  long rows() { return count("SELECT count(*) FROM {schema}.t"); }
  std::string insert(int x) {
    return "INSERT INTO " + schema_name_ + ".t VALUES (" + std::to_string(x) + ")";
  }
};

TEST_F(ConnectionTest, TransactionRollsBackUnlessCommitted) {
  {
    absl::StatusOr<Transaction> tx = Transaction::begin(*conn_);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(conn_->execute(insert(1)).ok());
    EXPECT_TRUE(conn_->in_transaction());
  }
  EXPECT_FALSE(conn_->in_transaction());
  EXPECT_EQ(rows(), 0);
  absl::StatusOr<Transaction> tx = Transaction::begin(*conn_, IsolationLevel::kRepeatableRead);
  ASSERT_TRUE(tx.ok());
  EXPECT_EQ(scalar("SHOW transaction_isolation"), "repeatable read");
  ASSERT_TRUE(conn_->execute(insert(1)).ok());
  ASSERT_TRUE(tx->commit().ok());
  EXPECT_EQ(rows(), 1);
  EXPECT_EQ(tx->commit().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ConnectionTest, SavepointUndoesOneStepNotTheTransaction) {
  absl::StatusOr<Transaction> tx = Transaction::begin(*conn_);
  ASSERT_TRUE(tx.ok());
  ASSERT_TRUE(conn_->execute(insert(1)).ok());
  ASSERT_TRUE(tx->savepoint("event_2").ok());
  EXPECT_EQ(sqlstate(conn_->execute(insert(1)).status()), "23505");  // a bad step
  ASSERT_TRUE(tx->rollback_to("event_2").ok());
  ASSERT_TRUE(conn_->execute(insert(2)).ok());
  ASSERT_TRUE(tx->release("event_2").ok());
  ASSERT_TRUE(tx->commit().ok());
  EXPECT_EQ(rows(), 2);
  EXPECT_EQ(Transaction::begin(*conn_)->savepoint("x; DROP TABLE t").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ConnectionTest, DefaultExecuteAtomicallyIsAllOrNothing) {
  ForwardingConnection driver(*conn_);
  const std::string a = insert(1), b = insert(2), dup = insert(1);
  const Statement failing[] = {{a, {}}, {dup, {}}};
  EXPECT_EQ(sqlstate(driver.execute_atomically(failing).status()), "23505");
  EXPECT_FALSE(driver.in_transaction());
  EXPECT_EQ(rows(), 0);
  const Statement good[] = {{a, {}}, {b, {}}};
  ASSERT_TRUE(driver.execute_atomically(good).ok());
  EXPECT_EQ(rows(), 2);
}

// execute_atomically_then(): the last of `statements` answers, the epilogue
// runs in the same transaction, and a failure in it leaves nothing; over the
// libpq adapter (one pipeline) and over a host's driver (the default),
// outside a transaction and inside a host's.
TEST_F(ConnectionTest, AnEpilogueRunsInTheTransactionButDoesNotAnswer) {
  int base = 0;
  long committed = 0;
  over_adapter_and_host_driver([&](Connection& c) {
    const std::string first = insert(base + 1), second = insert(base + 2), third = insert(base + 3),
                      fourth = insert(base + 4);
    const Statement statements[] = {{first, {}}, {"SELECT 'the answer'", {}}};
    const Statement then[] = {{second, {}}, {"SELECT 'the epilogue'", {}}};
    absl::StatusOr<Result> r = c.execute_atomically_then(statements, then);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->at(0, 0), "the answer");
    EXPECT_FALSE(c.in_transaction());
    committed += 2;
    EXPECT_EQ(rows(), committed) << "both committed";

    const Statement more[] = {{third, {}}, {"SELECT 'the answer'", {}}};
    const Statement failing[] = {{first, {}}};  // a duplicate key
    EXPECT_EQ(sqlstate(c.execute_atomically_then(more, failing).status()), "23505");
    EXPECT_FALSE(c.in_transaction());
    EXPECT_EQ(rows(), committed) << "the epilogue failed: nothing of the batch stays";

    ASSERT_TRUE(c.execute("BEGIN").ok());
    const Statement epilogue[] = {{fourth, {}}};
    r = c.execute_atomically_then(more, epilogue);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->at(0, 0), "the answer");
    EXPECT_TRUE(c.in_transaction()) << "joined the host's transaction";
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.t WHERE x IN (" + std::to_string(base + 3) +
                    ", " + std::to_string(base + 4) + ")"),
              2);
    ASSERT_TRUE(c.execute("ROLLBACK").ok());
    EXPECT_EQ(rows(), committed) << "rolled back with the host's transaction";
    base += 10;
  });
}

TEST_F(ConnectionTest, LedgerWorksOverAHostDriverWithoutPipelining) {
  ForwardingConnection driver(*conn_);
  open_account(1, "0");
  const PaymentEvent e = event("d_1", EventType::kDeposit, 1, "2.5");
  EXPECT_EQ(*ledger_->process_deposit(driver, e), Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_deposit(driver, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "2.5");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
}

// What the session answers for `setting` (SHOW), through `c`.
std::string show(Connection& c, const std::string& setting) {
  absl::StatusOr<Result> r = c.execute("SHOW " + setting);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return "";
  absl::StatusOr<std::string> v = r->single_row(setting)->get<std::string>(0);
  return v.ok() ? *v : "";
}

// The limit holds inside the transaction and is gone after it, over the
// libpq adapter (BEGIN and the setting pipelined in one round trip) and over
// a host's driver that cannot pipeline (the interface's default).
TEST_F(ConnectionTest, IdleLimitHoldsForItsTransactionOnly) {
  over_adapter_and_host_driver([&](Connection& c) {
    const std::string before = show(c, "idle_in_transaction_session_timeout");
    {
      absl::StatusOr<Transaction> tx = Transaction::begin(
          c,
          {.isolation = IsolationLevel::kRepeatableRead, .idle_limit = absl::Milliseconds(1500)});
      ASSERT_TRUE(tx.ok()) << tx.status();
      EXPECT_EQ(show(c, "idle_in_transaction_session_timeout"), "1500ms");
      EXPECT_EQ(show(c, "transaction_isolation"), "repeatable read");
      ASSERT_TRUE(c.execute(insert(1)).ok());
      ASSERT_TRUE(tx->commit().ok());
    }
    EXPECT_EQ(show(c, "idle_in_transaction_session_timeout"), before);
    {
      // Rounded up to the next millisecond, so a positive limit never
      // becomes 0 (which would mean none). Not checked with a limit under
      // 1 ms itself: the server would end this session, idle between two
      // statements that long, before the test could read it.
      absl::StatusOr<Transaction> tx =
          Transaction::begin(c, {.idle_limit = absl::Milliseconds(1500) + absl::Nanoseconds(1)});
      ASSERT_TRUE(tx.ok()) << tx.status();
      EXPECT_EQ(show(c, "idle_in_transaction_session_timeout"), "1501ms");
    }
    EXPECT_EQ(show(c, "idle_in_transaction_session_timeout"), before);
    EXPECT_FALSE(c.in_transaction());
    ASSERT_TRUE(c.execute("DELETE FROM " + schema_name_ + ".t").ok());
  });
  EXPECT_EQ(rows(), 0);
}

TEST_F(ConnectionTest, IdleLimitsBelowZeroOrAboveAnHourAreRefused) {
  for (const absl::Duration bad :
       {absl::Milliseconds(-1), absl::Minutes(61), absl::InfiniteDuration()}) {
    absl::StatusOr<Transaction> tx = Transaction::begin(*conn_, {.idle_limit = bad});
    EXPECT_EQ(tx.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(conn_->in_transaction()) << "nothing is opened for a refused limit";
  }
  absl::StatusOr<Transaction> tx = Transaction::begin(*conn_, {.idle_limit = absl::Hours(1)});
  ASSERT_TRUE(tx.ok()) << tx.status();
  EXPECT_EQ(show(*conn_, "idle_in_transaction_session_timeout"), "1h");
}

// The library's statements name built-ins whatever the session's search_path
// lists: a transaction it opens pins the path in its BEGIN's round trip
// (before the idle limit, which is then parsed under it), and a statement of
// its own runs in a transaction of its own that does, or, inside the host's,
// gives the host its path back after it. Over the adapter and over a host's
// driver.
TEST_F(ConnectionTest, TheLibrarysStatementsPinTheirSearchPathAndLeaveTheCallers) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  const std::string own = schema_name_ + ", public";
  const auto path_seen_by = [](Connection& c, std::string_view sql) -> std::string {
    absl::StatusOr<Result> r = internal::execute_pinned(c, sql);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->row(0).get<std::string>(0).value_or("") : "";
  };
  over_adapter_and_host_driver([&](Connection& c) {
    ASSERT_TRUE(c.execute("SET search_path = " + own).ok());
    {
      absl::StatusOr<Transaction> tx = Transaction::begin(c, kBoundedTransaction);
      ASSERT_TRUE(tx.ok()) << tx.status();
      EXPECT_EQ(show(c, "search_path"), "pg_catalog, pg_temp");
      EXPECT_EQ(show(c, "idle_in_transaction_session_timeout"), "30s");
      ASSERT_TRUE(tx->commit().ok());
    }
    EXPECT_EQ(show(c, "search_path"), own);
    {
      absl::StatusOr<Transaction> tx = Transaction::begin(c, kBoundedTransaction);
      ASSERT_TRUE(tx.ok()) << tx.status();
    }  // rolled back
    EXPECT_EQ(show(c, "search_path"), own);
    {
      absl::StatusOr<Transaction> tx = Transaction::begin(c);
      ASSERT_TRUE(tx.ok()) << tx.status();
      EXPECT_EQ(show(c, "search_path"), own) << "a host's transaction is not pinned";
    }
    // On its own: pinned, in a transaction that ends with it.
    EXPECT_EQ(path_seen_by(c, "SELECT pg_catalog.current_setting('search_path')"),
              "pg_catalog, pg_temp");
    EXPECT_FALSE(c.in_transaction());
    EXPECT_EQ(show(c, "search_path"), own);
    EXPECT_FALSE(internal::execute_pinned(c, "SELECT 1 / 0").ok());
    EXPECT_FALSE(c.in_transaction()) << "a failed statement leaves nothing open";
    EXPECT_EQ(show(c, "search_path"), own);
    // Inside the host's: pinned for the statement, the host's own after it.
    ASSERT_TRUE(c.execute("BEGIN").ok());
    ASSERT_TRUE(c.execute("SET LOCAL search_path = public").ok());
    EXPECT_EQ(path_seen_by(c, "SELECT pg_catalog.current_setting('search_path')"),
              "pg_catalog, pg_temp");
    EXPECT_TRUE(c.in_transaction());
    EXPECT_EQ(show(c, "search_path"), "public");
    ASSERT_TRUE(c.execute("COMMIT").ok());
    EXPECT_EQ(show(c, "search_path"), own);
    ASSERT_TRUE(c.execute("RESET search_path").ok());
  });
}

// Inside a host's transaction a BEGIN is only a warning, and a scope's
// COMMIT would commit the host's unfinished work (its ROLLBACK would undo
// it). So neither Transaction::begin nor a library call that opens its own
// transaction starts there; the host's transaction stays open and its own.
TEST_F(ConnectionTest, ATransactionCannotBeginInsideAnother) {
  over_adapter_and_host_driver([&](Connection& c) {
    const std::string limit = show(c, "idle_in_transaction_session_timeout");
    ASSERT_TRUE(c.execute("BEGIN").ok());
    ASSERT_TRUE(c.execute(insert(1)).ok());
    for (const TransactionOptions& o : {TransactionOptions{}, kBoundedSnapshot}) {
      EXPECT_EQ(Transaction::begin(c, o).status().code(), absl::StatusCode::kFailedPrecondition);
    }
    absl::StatusOr<std::vector<BalanceMismatch>> found = ledger_->find_balance_mismatches(c);
    EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(found.status().message(), ::testing::HasSubstr("cannot begin inside another"));
    EXPECT_TRUE(c.in_transaction()) << "the host's transaction is still open";
    EXPECT_EQ(show(c, "transaction_isolation"), "read committed");
    EXPECT_EQ(show(c, "idle_in_transaction_session_timeout"), limit) << "its limit untouched";
    ASSERT_TRUE(c.execute("ROLLBACK").ok());
    EXPECT_EQ(rows(), 0) << "nothing of the host's work was committed for it";
  });
}

// A tighter limit the session already has (the server's, the role's, the
// host's) stays: ours only ever lowers it.
TEST_F(ConnectionTest, TheSessionsLowerIdleLimitStays) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level SET");
  const struct {
    const char* session;
    const char* inside;
  } cases[] = {{"500ms", "500ms"}, {"29s", "29s"}, {"1min", "30s"}, {"0", "30s"}};
  for (const auto& c : cases) {
    exec(std::string("SET idle_in_transaction_session_timeout = '") + c.session + "'");
    {
      absl::StatusOr<Transaction> tx = Transaction::begin(*conn_, kBoundedTransaction);
      ASSERT_TRUE(tx.ok()) << tx.status();
      EXPECT_EQ(show(*conn_, "idle_in_transaction_session_timeout"), c.inside) << c.session;
    }
    EXPECT_EQ(show(*conn_, "idle_in_transaction_session_timeout"), c.session);
  }
  exec("RESET idle_in_transaction_session_timeout");
}

class IdleLimitTest : public ConnectionTest {
 protected:
  void SetUp() override {
    ConnectionTest::SetUp();
    exec("INSERT INTO {schema}.t VALUES (1)");
  }
  // Opens quiet_, a session of its own that locks row 1 in a transaction
  // with `limit` and then sends nothing: its client is gone without a word
  // (cut off, frozen, or a host thread stuck between two statements).
  void lock_and_go_quiet(absl::Duration limit) {
    quiet_ = connect();
    absl::StatusOr<Transaction> tx = Transaction::begin(*quiet_, {.idle_limit = limit});
    ASSERT_TRUE(tx.ok()) << tx.status();
    quiet_tx_.emplace(*std::move(tx));
    ASSERT_TRUE(
        quiet_->execute("SELECT x FROM " + schema_name_ + ".t WHERE x = 1 FOR UPDATE").ok());
  }
  // True if this test's own session can lock row 1 now (and lets it go).
  bool row_is_free() {
    absl::StatusOr<Transaction> tx = Transaction::begin(*conn_);
    EXPECT_TRUE(tx.ok());
    absl::StatusOr<Result> r =
        conn_->execute("SELECT x FROM " + schema_name_ + ".t WHERE x = 1 FOR UPDATE NOWAIT");
    if (!r.ok()) {
      EXPECT_EQ(sqlstate(r.status()), "55P03") << r.status();
    }
    return r.ok();
  }
  std::unique_ptr<pg::Connection> quiet_;
  std::optional<Transaction> quiet_tx_;  // declared after quiet_: ends first
};

// The server ends a transaction whose client went quiet past its limit: the
// session ends (SQLSTATE 25P03), its locks are free for everyone else, and
// the client, when it speaks again, learns its session is gone and nothing
// of the transaction committed.
TEST_F(IdleLimitTest, TheServerEndsAnAbandonedTransactionAndFreesItsLocks) {
  IDEMLEDGER_NEEDS_OWN_SESSION("the server ends the session itself");
  const auto start = std::chrono::steady_clock::now();
  // 1.5 s: room for a loaded machine between the lock and the first check.
  lock_and_go_quiet(absl::Milliseconds(1500));
  EXPECT_FALSE(row_is_free()) << "locked while its client is quiet, within the limit";
  ASSERT_TRUE(eventually([&] { return row_is_free(); }, absl::Seconds(10)))
      << "still locked 10 s after its client went quiet, with a 1.5-s limit";
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(took, 1.5);
  EXPECT_LT(took, 4.5);
  absl::StatusOr<Result> r = quiet_->execute("UPDATE " + schema_name_ + ".t SET x = 2");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(connection_broken(r.status())) << r.status();
  EXPECT_TRUE(is_retryable(r.status())) << r.status();
  EXPECT_FALSE(commit_in_doubt(r.status())) << r.status();
  EXPECT_TRUE(quiet_->is_broken());
  EXPECT_FALSE(quiet_tx_->commit().ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.t WHERE x = 1"), 1);
}

// The control, so the case above can fail: without a limit, the quiet
// client's locks are still held 3 s later, and its transaction goes on.
TEST_F(IdleLimitTest, WithoutALimitAnAbandonedTransactionKeepsItsLocks) {
  IDEMLEDGER_NEEDS_OWN_SESSION("the same session as the case above");
  lock_and_go_quiet(absl::ZeroDuration());
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_FALSE(row_is_free());
  ASSERT_TRUE(quiet_->execute("UPDATE " + schema_name_ + ".t SET x = 2").ok());
  ASSERT_TRUE(quiet_tx_->commit().ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.t WHERE x = 2"), 1);
}

}  // namespace
}  // namespace idemledger::testing
