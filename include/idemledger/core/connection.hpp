// idemledger/core/connection.hpp — the database connection the library needs.
//
// Everything the library does to PostgreSQL goes through this interface, so a
// host can run it over its own driver. The bundled libpq adapter is
// idemledger::pg::Connection (idemledger/pg/connection.hpp).
//
//   absl::StatusOr<Result> r = conn.execute("SELECT balance FROM t WHERE id = $1", Params(7));
//   absl::StatusOr<Amount> b = r->single_row("balance")->get<Amount>(0);
//   absl::StatusOr<Transaction> tx = Transaction::begin(conn, IsolationLevel::kRepeatableRead);
//   ... tx->commit();   // destroyed uncommitted -> ROLLBACK
//   Transaction::begin(conn, {.idle_limit = kIdleInTransactionLimit});  // see there
//
// Parameters are always bound as text (NULL = nullopt), never spliced into SQL
// (params.hpp); rows are read through types (result.hpp). A failed call
// carries the SQLSTATE (status.hpp).
//
// Connection is thread-compatible: one thread at a time.
#ifndef IDEMLEDGER_CORE_CONNECTION_HPP
#define IDEMLEDGER_CORE_CONNECTION_HPP

#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/params.hpp"
#include "idemledger/core/result.hpp"

namespace idemledger {

// One statement of a batch.
struct Statement {
  std::string_view sql;
  std::span<const Param> params;
};

class Connection {
 public:
  virtual ~Connection() = default;

  // execute()
  //
  // Runs one statement with bound text parameters.
  [[nodiscard]] virtual absl::StatusOr<Result> execute(std::string_view sql,
                                                       std::span<const Param> params) = 0;
  [[nodiscard]] absl::StatusOr<Result> execute(std::string_view sql,
                                               std::initializer_list<Param> params = {}) {
    return execute(sql, std::span<const Param>(params.begin(), params.size()));
  }

  // execute_atomically()
  //
  // Runs `statements` in order as one transaction and returns the result of
  // the last one; if any fails, none takes effect. Inside a transaction the
  // caller opened, they join it instead. The default runs BEGIN ... COMMIT
  // statement by statement; drivers that can pipeline (the libpq adapter)
  // send the whole batch in one round trip. A connection lost before the
  // outcome is known yields a status with commit_in_doubt().
  // REQUIRES: !statements.empty().
  [[nodiscard]] virtual absl::StatusOr<Result> execute_atomically(
      std::span<const Statement> statements);

  // execute_atomically_then()
  //
  // As execute_atomically(statements), and `then` after them in the same
  // transaction, but answers the result of the last of `statements`: `then`
  // is an epilogue whose own results nobody reads (the ledger puts a
  // caller's settings back with it). If any statement of either fails, none
  // takes effect. The default runs execute_atomically(statements) (a
  // driver's own pipelining included), then `then` statement by statement;
  // the libpq adapter sends them all in one round trip.
  // REQUIRES: !statements.empty().
  [[nodiscard]] virtual absl::StatusOr<Result> execute_atomically_then(
      std::span<const Statement> statements, std::span<const Statement> then);

  // open_transaction()
  //
  // Opens a transaction block with `begin_sql` (BEGIN, with its isolation
  // level) and runs `then` inside it, in order; returns the last result (the
  // BEGIN's if `then` is empty) and leaves the block open. Drivers that can
  // pipeline (the libpq adapter) send it all in one round trip; the default
  // runs it statement by statement. Nothing commits, so nothing is ever in
  // doubt. On failure the block may be left open and aborted: the caller
  // rolls it back (Transaction::begin() does).
  // REQUIRES: !in_transaction().
  [[nodiscard]] virtual absl::StatusOr<Result> open_transaction(std::string_view begin_sql,
                                                                std::span<const Statement> then);

  // True while the session is inside an explicit transaction block.
  [[nodiscard]] virtual bool in_transaction() const = 0;

  // wait_for_notification()
  //
  // Blocks until a NOTIFY arrives on a channel this session LISTENs to (true)
  // or `timeout` passes (false). The default cannot listen and just sleeps:
  // callers then fall back to polling, which is always correct, only slower.
  [[nodiscard]] virtual absl::StatusOr<bool> wait_for_notification(absl::Duration timeout);
};

// Lends a database session: calls `work` with a Connection nobody else uses
// meanwhile, or returns why it cannot. For components that run their own
// threads (Relay::run); pg::Pool::lender() is one.
using SessionLender = std::function<absl::Status(const std::function<void(Connection&)>& work)>;

enum class IsolationLevel { kReadCommitted, kRepeatableRead, kSerializable };

// How long a transaction the library opens for itself, one that spans round
// trips (a worker's claim-and-apply, a dead-letter replay, a reconciliation's
// snapshot, a migration), may sit idle waiting for its client before the
// server ends the session, and the transaction with it. A client cut off
// between two round trips (a partition, a frozen host) then holds its locks
// and its snapshot this long at most, not until the server's TCP gives up
// (two hours by default). The client's own work between two round trips is
// microseconds. See TransactionOptions::idle_limit.
inline constexpr absl::Duration kIdleInTransactionLimit = absl::Seconds(30);

struct TransactionOptions {
  IsolationLevel isolation = IsolationLevel::kReadCommitted;
  // Nonzero: the transaction's idle_in_transaction_session_timeout, set
  // transaction-scoped (set_config(..., true): a pooled or PgBouncer-shared
  // session keeps its own) in the BEGIN's round trip. When the session's own
  // setting is lower, that one stays. Zero: the session's setting alone.
  // Rounded up to whole milliseconds; at most one hour (kInvalidArgument).
  // Keep it far above the client's own pauses between two statements: the
  // server counts from the end of each statement, and a session it ends is
  // a retry (kUnavailable), with nothing committed.
  absl::Duration idle_limit = absl::ZeroDuration();
  // True: the transaction's search_path is pg_catalog, pg_temp, set
  // transaction-scoped in the BEGIN's round trip (before the idle limit), so
  // every function, operator and type its statements name unqualified is a
  // built-in, whatever the session's own search_path lists (a schema another
  // role can create objects in, even before pg_catalog). Tables then need
  // their schema named, as the library's always do. False: the session's.
  bool pin_search_path = false;
};

// What the library's own transactions that span round trips use.
inline constexpr TransactionOptions kBoundedTransaction{.idle_limit = kIdleInTransactionLimit,
                                                        .pin_search_path = true};
inline constexpr TransactionOptions kBoundedSnapshot{.isolation = IsolationLevel::kRepeatableRead,
                                                     .idle_limit = kIdleInTransactionLimit,
                                                     .pin_search_path = true};

// Transaction
//
// RAII transaction scope: BEGIN (with the isolation level in the BEGIN itself,
// so it is transaction-scoped and PgBouncer-safe) on begin(), ROLLBACK on
// destruction unless commit() succeeded. Movable, not copyable.
//
// begin() refuses a connection already inside a transaction
// (kFailedPrecondition, nothing sent): there a BEGIN is only a warning, and
// this scope's COMMIT or ROLLBACK would end the caller's transaction. The
// library's calls that open their own transaction (reconciliation, reports,
// the dead-letter drain and replay, partition upkeep, migrations) answer the
// same. The event calls (process_deposit and the others) join a host's
// transaction instead, and roll back with it.
class Transaction {
 public:
  [[nodiscard]] static absl::StatusOr<Transaction> begin(
      Connection& conn, IsolationLevel level = IsolationLevel::kReadCommitted);
  // One round trip with the libpq adapter, with or without an idle limit.
  [[nodiscard]] static absl::StatusOr<Transaction> begin(Connection& conn,
                                                         const TransactionOptions& options);

  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  [[nodiscard]] absl::Status commit();
  [[nodiscard]] absl::Status rollback();

  // Savepoints: one bad step rolls back to its savepoint, not the whole
  // transaction. `name` must be a plain identifier ([a-z_][a-z0-9_]*).
  [[nodiscard]] absl::Status savepoint(std::string_view name);
  [[nodiscard]] absl::Status rollback_to(std::string_view name);
  [[nodiscard]] absl::Status release(std::string_view name);

  [[nodiscard]] Connection& connection() { return *conn_; }

 private:
  explicit Transaction(Connection& conn) : conn_(&conn) {}
  absl::Status run_savepoint_command(std::string_view verb, std::string_view name);

  Connection* conn_;
  bool active_ = true;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_CONNECTION_HPP
