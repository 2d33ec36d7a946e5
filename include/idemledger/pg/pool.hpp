// idemledger/pg/pool.hpp — a validated, thread-safe pool of libpq connections.
//
//   idemledger::pg::Pool pool({.dsn = dsn, .max_size = 8});
//   absl::StatusOr<idemledger::pg::PooledConnection> c = pool.acquire();
//   if (!c.ok()) return c.status();          // kUnavailable: exhausted / server down
//   ledger.process_deposit(**c, event);      // returned to the pool on scope exit
//
// Guarantees:
// - Connections are created lazily, at most max_size at once.
// - Every acquire() validates before handing out: a closed or broken session
//   is replaced; one that is not idle is checked with SELECT 1.
// - A connection returned inside a transaction (open or failed) is rolled
//   back as it is returned, so nothing it locked outlives the borrow; if the
//   ROLLBACK fails, it is dropped. The return then costs a round trip.
// - Session-level state a borrower sets (a SET without LOCAL, a LISTEN) is
//   not reset on return and reaches the next borrower: set what your work
//   needs transaction-scoped (SET LOCAL, set_config(..., true)).
// - A connection whose last status was connection_broken() is dropped on
//   return, so a server restart costs one failed call per connection, then
//   acquire() reconnects.
// - acquire() waits at most acquire_timeout, then answers kUnavailable.
// - fork()-safe: a Pool may be created in a child after fork(); a Pool copied
//   into a child by fork() abandons the parent's sessions without sending on
//   their sockets and opens its own.
//
// Pool is thread-safe. A PooledConnection is thread-compatible.
#ifndef IDEMLEDGER_PG_POOL_HPP
#define IDEMLEDGER_PG_POOL_HPP

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/pg/connection.hpp"

namespace idemledger::pg {

struct PoolOptions {
  std::string dsn;
  std::size_t max_size = 8;
  absl::Duration acquire_timeout = absl::Seconds(5);
  ConnectionOptions connection;
};

class Pool;

// A connection borrowed from a Pool; returns itself on destruction.
class PooledConnection {
 public:
  PooledConnection(PooledConnection&& other) noexcept;
  PooledConnection& operator=(PooledConnection&& other) noexcept;
  PooledConnection(const PooledConnection&) = delete;
  PooledConnection& operator=(const PooledConnection&) = delete;
  ~PooledConnection();

  Connection& operator*() const { return *conn_; }
  Connection* operator->() const { return conn_.get(); }

  // Drop this connection instead of reusing it (e.g. after a protocol error
  // the caller noticed itself).
  void discard() { discard_ = true; }

 private:
  friend class Pool;
  PooledConnection(Pool* pool, std::unique_ptr<Connection> conn);
  void give_back();

  Pool* pool_ = nullptr;
  std::unique_ptr<Connection> conn_;
  // The process (its fork generation) that borrowed it: a copy living on in
  // a fork()ed child must not return.
  long owner_process_ = 0;
  bool discard_ = false;
};

class Pool {
 public:
  explicit Pool(PoolOptions options);
  // REQUIRES: every PooledConnection has been returned.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // acquire()
  //
  // A validated connection, or kUnavailable after acquire_timeout (pool
  // exhausted, or the server unreachable).
  [[nodiscard]] absl::StatusOr<PooledConnection> acquire();

  // lender()
  //
  // acquire() as a SessionLender: each call borrows a connection for the
  // duration of `work`. REQUIRES: the Pool outlives it.
  [[nodiscard]] SessionLender lender();

  struct Stats {
    std::size_t open;     // connections that exist (idle + lent out)
    std::size_t idle;     // connections waiting in the pool
    std::size_t created;  // connections opened over the pool's life
    std::size_t dropped;  // connections closed as broken or invalid
  };
  [[nodiscard]] Stats stats() const;

 private:
  friend class PooledConnection;
  void release(std::unique_ptr<Connection> conn, bool discard);
  // Makes `conn` safe to hand out, or returns nullptr if it must be dropped.
  std::unique_ptr<Connection> validate(std::unique_ptr<Connection> conn);
  bool can_hand_out() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void abandon_if_forked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PoolOptions options_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  std::size_t open_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t created_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  long owner_process_ ABSL_GUARDED_BY(mu_);  // the process that owns the idle sessions
};

}  // namespace idemledger::pg

#endif  // IDEMLEDGER_PG_POOL_HPP
