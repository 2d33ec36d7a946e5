// The Connection interface's own helpers, on a real server: the RAII
// Transaction with savepoints, and the default execute_atomically() a host's
// driver inherits when it cannot pipeline.
#include "idemledger/core/connection.hpp"
#include "idemledger/core/status.hpp"
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

TEST_F(ConnectionTest, LedgerWorksOverAHostDriverWithoutPipelining) {
  ForwardingConnection driver(*conn_);
  open_account(1, "0");
  const PaymentEvent e = event("d_1", EventType::kDeposit, 1, "2.5");
  EXPECT_EQ(*ledger_->process_deposit(driver, e), Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_deposit(driver, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "2.5");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
}

}  // namespace
}  // namespace idemledger::testing
