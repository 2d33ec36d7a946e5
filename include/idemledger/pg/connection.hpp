// idemledger/pg/connection.hpp — the bundled libpq implementation of Connection.
//
//   absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
//       idemledger::pg::Connection::open("host=/tmp port=5432 dbname=app");
//   idemledger::migrate(**c);
//
// Statements use named prepared statements, cached per connection, so each is
// parsed once per session. Behind PgBouncer < 1.21 in transaction pooling mode
// named statements do not survive between transactions: set
// `prepared_statements = false` there and every statement is sent unnamed
// (parse + bind + execute in one message sequence). execute_atomically() uses
// libpq pipeline mode: the whole batch and its commit cost one round trip; so
// do execute_atomically_then() (its epilogue included) and open_transaction()
// (BEGIN and the statements that follow it).
// `application_name` names the session to the server (pg_stat_activity, the
// log's %a, pg_stat_statements' sessions) unless the DSN names it itself.
//
// This header does not include libpq-fe.h.
// Connection is thread-compatible: one thread at a time.
#ifndef IDEMLEDGER_PG_CONNECTION_HPP
#define IDEMLEDGER_PG_CONNECTION_HPP

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/connection.hpp"

namespace idemledger::pg {

struct ConnectionOptions {
  // Named prepared statements (fast, direct connections) or unnamed ones
  // (PgBouncer < 1.21 in transaction pooling mode).
  bool prepared_statements = true;
  // The session's application_name when the DSN does not set one (libpq's
  // fallback_application_name), so an operator sees which service holds a
  // session. At most 63 printable ASCII characters (the server's own limit;
  // it would cut a longer name and turn other bytes into '?'); anything else
  // is refused by open() with kInvalidArgument. Empty: none.
  std::string application_name;
  // How long connecting may take before open() gives up with kUnavailable:
  // libpq's connect_timeout, in whole seconds (libpq counts anything under 2
  // as 2), for each host of a multi-host DSN in turn. Without it a server
  // whose network drops packets holds open() for the system's SYN retries
  // (about two minutes). Zero: no bound of ours. The DSN's own
  // connect_timeout, or PGCONNECT_TIMEOUT in the environment, wins. open()
  // refuses a bound below zero or above 1h with kInvalidArgument (as it
  // does network_timeout's).
  absl::Duration connect_timeout = absl::Seconds(5);
  // How long the network to the server may stay silent before the session is
  // declared dead: data sent and not acknowledged for that long (libpq's
  // tcp_user_timeout), or an idle session whose keepalive probes (after half
  // of it) go unanswered. The call in flight then fails kUnavailable and the
  // connection is broken (a COMMIT in flight is in doubt). Without it a
  // session on a dead network waits for the system's retransmissions: about
  // 15 minutes. It never ends a slow statement: the server's machine answers
  // the probes however long a statement runs (statement_timeout bounds
  // those). TCP only: a unix socket has no network. Zero: the system's
  // defaults. The DSN's own keepalives* and tcp_user_timeout win.
  absl::Duration network_timeout = absl::Seconds(10);
};

class Connection final : public idemledger::Connection {
 public:
  // open()
  //
  // Connects with a libpq conninfo string or URI. kUnavailable if the server
  // cannot be reached (retryable), kInvalidArgument for a malformed DSN.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Connection>> open(
      std::string_view dsn, ConnectionOptions options = {});

  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  using idemledger::Connection::execute;
  [[nodiscard]] absl::StatusOr<Result> execute(std::string_view sql,
                                               std::span<const Param> params) override;
  [[nodiscard]] absl::StatusOr<Result> execute_atomically(
      std::span<const Statement> statements) override;
  [[nodiscard]] absl::StatusOr<Result> execute_atomically_then(
      std::span<const Statement> statements, std::span<const Statement> then) override;
  [[nodiscard]] absl::StatusOr<Result> open_transaction(std::string_view begin_sql,
                                                        std::span<const Statement> then) override;
  [[nodiscard]] bool in_transaction() const override;
  [[nodiscard]] absl::StatusOr<bool> wait_for_notification(absl::Duration timeout) override;

  // True if the session is gone (closed by the server, network error, or a
  // status reported connection_broken()) or must not be reused (it answered
  // 25006: it is on a standby, or on a primary demoted under it).
  [[nodiscard]] bool is_broken() const;
  // poll_alive()
  //
  // Reads, without blocking, whatever the server sent while the session sat
  // idle, and answers false if the server has closed it (restart, admin
  // termination). The pool calls it before handing a connection out.
  [[nodiscard]] bool poll_alive();

  // True if the session is idle outside any transaction.
  [[nodiscard]] bool is_idle() const;
  // The server process id of this session (for pg_terminate_backend in tests).
  [[nodiscard]] int backend_pid() const;

  // Forgets the session without talking to the server: for a copy inherited
  // across fork(), whose socket belongs to the parent. After this, the object
  // is broken and its destructor sends nothing.
  void abandon_after_fork();

 private:
  struct Impl;
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace idemledger::pg

#endif  // IDEMLEDGER_PG_CONNECTION_HPP
