#include "idemledger/pg/connection.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "idemledger/core/status.hpp"
#include "src/core/internal/absl_compat.hpp"

namespace idemledger::pg {
namespace {

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// NAMEDATALEN - 1: the longest application_name the server keeps whole.
constexpr std::size_t kMaxApplicationName = 63;
// SQLSTATE 08006 stands in when libpq reports a lost connection itself.
constexpr char kConnectionFailure[] = "08006";

std::string trimmed(const char* message) {
  return std::string(absl::StripTrailingAsciiWhitespace(message != nullptr ? message : ""));
}

// Text parameters must be NUL-terminated for libpq; a string_view need not
// be. One buffer holds them all, so a call allocates once, not per parameter.
class BoundParams {
 public:
  explicit BoundParams(std::span<const Param> params) {
    std::size_t total = 0;
    for (const Param& p : params) total += p ? p->size() + 1 : 0;
    buffer_.reserve(total);
    absl::InlinedVector<std::ptrdiff_t, 8> offsets;
    for (const Param& p : params) {
      if (!p) {
        offsets.push_back(-1);
        continue;
      }
      offsets.push_back(static_cast<std::ptrdiff_t>(buffer_.size()));
      buffer_.append(p->data(), p->size());
      buffer_.push_back('\0');
    }
    for (std::ptrdiff_t offset : offsets) {
      values_.push_back(offset < 0 ? nullptr : buffer_.data() + offset);
    }
  }
  int count() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return values_.data(); }

 private:
  std::string buffer_;
  absl::InlinedVector<const char*, 8> values_;
};

// kUnavailable for a session that is gone, carrying 08006 and connection_broken().
absl::Status connection_lost(std::string_view what, const char* libpq_message, bool in_doubt) {
  absl::Status s = absl::UnavailableError(fmt::format("{}: {}", what, trimmed(libpq_message)));
  s.SetPayload(internal::to_absl(kSqlStatePayload), absl::Cord(kConnectionFailure));
  mark_connection_broken(s);
  if (in_doubt) mark_commit_in_doubt(s);
  return s;
}

// ConnectionOptions' connect_timeout and network_timeout as libpq settings,
// in whole seconds (tcp_user_timeout in milliseconds); a zero bound sets
// nothing, and PGCONNECT_TIMEOUT in the environment keeps its say.
class NetworkSettings {
 public:
  explicit NetworkSettings(const ConnectionOptions& options) {
    const char* from_env = std::getenv("PGCONNECT_TIMEOUT");
    if (options.connect_timeout > absl::ZeroDuration() &&
        (from_env == nullptr || *from_env == '\0')) {
      connect_timeout_ = std::to_string(whole_seconds(options.connect_timeout));
    }
    if (options.network_timeout > absl::ZeroDuration()) {
      const std::int64_t s = whole_seconds(options.network_timeout);
      keepalives_idle_ = std::to_string(std::max<std::int64_t>(1, s / 2));
      keepalives_interval_ = std::to_string(std::max<std::int64_t>(1, s / 6));
      tcp_user_timeout_ = std::to_string(absl::ToInt64Milliseconds(options.network_timeout));
    }
  }
  template <class List>
  void append_to(List& keywords, List& values) const {
    if (!connect_timeout_.empty()) {
      keywords.push_back("connect_timeout");
      values.push_back(connect_timeout_.c_str());
    }
    if (tcp_user_timeout_.empty()) return;
    keywords.insert(keywords.end(), {"keepalives", "keepalives_idle", "keepalives_interval",
                                     "keepalives_count", "tcp_user_timeout"});
    values.insert(values.end(), {"1", keepalives_idle_.c_str(), keepalives_interval_.c_str(), "3",
                                 tcp_user_timeout_.c_str()});
  }

 private:
  // Rounded up: a bound of 1.5 s waits 2, never 1.
  static std::int64_t whole_seconds(absl::Duration d) {
    return absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
  }
  std::string connect_timeout_, keepalives_idle_, keepalives_interval_, tcp_user_timeout_;
};

// What a pipeline's Sync ends, which decides the answer when the session
// dies before it.
enum class PipelineEnd {
  kCommits,            // an implicit transaction: the commit may have happened
  kInHostTransaction,  // the host's transaction goes on: nothing committed
  kOpensTransaction,   // it starts with BEGIN, and the block stays open
};

}  // namespace

struct Connection::Impl {
  std::unique_ptr<PGconn, ConnDeleter> conn;
  ConnectionOptions options;
  absl::flat_hash_map<std::string, std::string> prepared;  // SQL text -> statement name
  bool broken = false;
  // The session still talks, but must not be handed out again (it is on a
  // node that cannot write): the pool replaces it.
  bool retired = false;
  bool lost_without_answer = false;  // the last error was the session vanishing mid-call

  bool connection_bad() const { return broken || PQstatus(conn.get()) != CONNECTION_OK; }

  // The status for a failed command: the server's SQLSTATE if it sent one,
  // 08006 (and "connection broken") if the session is gone.
  absl::Status error(const PGresult* result) {
    const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    // The primary message names the rule; the severity prefix and PL/pgSQL
    // context lines would only bury it.
    std::string message =
        trimmed(result != nullptr ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr);
    if (message.empty()) message = trimmed(PQerrorMessage(conn.get()));
    if (state == nullptr && connection_bad()) {
      state = kConnectionFailure;
      lost_without_answer = true;  // the server said nothing: whatever ran may have committed
    }
    absl::Status status =
        state != nullptr ? status_from_sqlstate(state, message) : absl::InternalError(message);
    if (connection_bad()) {
      broken = true;
      mark_connection_broken(status);
    } else if (connection_broken(status)) {
      retired = true;  // 25006: the session works, but on a node that cannot write
    }
    return status;
  }

  absl::StatusOr<Result> to_result(const PGresult* r) {
    switch (PQresultStatus(r)) {
      case PGRES_COMMAND_OK:
      case PGRES_TUPLES_OK:
        break;
      default:
        return error(r);
    }
    Result out;
    const int rows = PQntuples(r);
    const int columns = PQnfields(r);
    out.columns.reserve(static_cast<std::size_t>(columns));
    for (int j = 0; j < columns; ++j) out.columns.emplace_back(PQfname(r, j));
    out.rows.reserve(static_cast<std::size_t>(rows));
    for (int i = 0; i < rows; ++i) {
      auto& row = out.rows.emplace_back();
      row.reserve(static_cast<std::size_t>(columns));
      for (int j = 0; j < columns; ++j) {
        if (PQgetisnull(r, i, j)) {
          row.emplace_back(std::nullopt);
        } else {
          row.emplace_back(
              std::string(PQgetvalue(r, i, j), static_cast<std::size_t>(PQgetlength(r, i, j))));
        }
      }
    }
    // Empty for statements that touch no rows by definition (SELECT, DDL): 0.
    const std::string_view touched = PQcmdTuples(const_cast<PGresult*>(r));
    if (!touched.empty() && !absl::SimpleAtoi(internal::to_absl(touched), &out.affected_rows)) {
      return absl::InternalError(fmt::format("libpq reported {} rows touched", touched));
    }
    return out;
  }

  // The name of `sql`'s prepared statement, or nullptr if it still needs a Parse.
  const std::string* prepared_name(std::string_view sql) const {
    auto it = prepared.find(internal::to_absl(sql));
    return it == prepared.end() ? nullptr : &it->second;
  }
  std::string next_name() const { return fmt::format("idemledger_{}", prepared.size()); }

  // Sends `statements` and one Sync in one round trip and reads every answer;
  // returns the result of statements[answer] or the first error.
  // REQUIRES: in pipeline mode; answer < statements.size().
  absl::StatusOr<Result> run_pipeline(std::span<const Statement> statements, PipelineEnd end,
                                      std::size_t answer);
};

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

absl::StatusOr<std::unique_ptr<Connection>> Connection::open(std::string_view dsn,
                                                             ConnectionOptions options) {
  const std::string conninfo(dsn);
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string why = trimmed(parse_error);
    PQfreemem(parse_error);
    return absl::InvalidArgumentError(fmt::format("invalid PostgreSQL DSN: {}", why));
  }
  PQconninfoFree(parsed);
  if (const std::string& name = options.application_name;
      name.size() > kMaxApplicationName || !std::all_of(name.begin(), name.end(), [](char ch) {
        return absl::ascii_isprint(static_cast<unsigned char>(ch));
      })) {
    return absl::InvalidArgumentError(
        fmt::format("application_name must be at most {} printable ASCII characters, got {} bytes",
                    kMaxApplicationName, name.size()));
  }

  // An hour is far above any bound that helps, and within what libpq and
  // Linux take (keepalive idle at most 32,767 s; tcp_user_timeout an int of
  // milliseconds).
  for (const absl::Duration bound : {options.connect_timeout, options.network_timeout}) {
    if (bound < absl::ZeroDuration() || bound > absl::Hours(1)) {
      return absl::InvalidArgumentError(fmt::format(
          "connect_timeout and network_timeout must be between 0 (no bound) and 1h, got {}",
          absl::FormatDuration(bound)));
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const NetworkSettings network(impl->options);
  // The DSN is expanded as `dbname` (a conninfo string or URI): what it sets
  // wins over the bounds before it, and its application_name over the
  // fallback after it.
  const std::string& name = impl->options.application_name;
  absl::InlinedVector<const char*, 9> keywords;
  absl::InlinedVector<const char*, 9> values;
  network.append_to(keywords, values);
  keywords.insert(keywords.end(), {"dbname", "fallback_application_name", nullptr});
  values.insert(values.end(), {conninfo.c_str(), name.empty() ? nullptr : name.c_str(), nullptr});
  impl->conn.reset(PQconnectdbParams(keywords.data(), values.data(), /*expand_dbname=*/1));
  if (impl->conn == nullptr)
    return absl::ResourceExhaustedError("libpq could not allocate a connection");
  // Server NOTICEs ("schema ... does not exist, skipping") are not the host's
  // business; libpq would print them on stderr.
  PQsetNoticeProcessor(
      impl->conn.get(), [](void*, const char*) {}, nullptr);
  if (PQstatus(impl->conn.get()) != CONNECTION_OK) {
    absl::Status s = absl::UnavailableError(
        fmt::format("cannot connect to PostgreSQL: {}", trimmed(PQerrorMessage(impl->conn.get()))));
    mark_connection_broken(s);
    return s;
  }
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

absl::StatusOr<Result> Connection::execute(std::string_view sql, std::span<const Param> params) {
  if (impl_->connection_bad()) return impl_->error(nullptr);
  PGconn* c = impl_->conn.get();
  // Outside a transaction block a statement commits by itself (BEGIN and
  // ROLLBACK aside), and a COMMIT commits the block: if the session dies
  // before the answer, the commit may or may not have landed.
  const absl::string_view text = internal::to_absl(sql);
  const bool commits = in_transaction() ? absl::EqualsIgnoreCase(text, "COMMIT")
                                        : !absl::StartsWithIgnoreCase(text, "BEGIN") &&
                                              !absl::EqualsIgnoreCase(text, "ROLLBACK");
  impl_->lost_without_answer = false;
  const auto answer = [&](absl::StatusOr<Result> r) {
    if (!r.ok() && commits && impl_->lost_without_answer) {
      absl::Status s = r.status();
      mark_commit_in_doubt(s);
      return absl::StatusOr<Result>(s);
    }
    return r;
  };
  const BoundParams bound(params);
  ResultPtr result;
  if (!impl_->options.prepared_statements) {
    result.reset(PQexecParams(c, std::string(sql).c_str(), bound.count(), nullptr, bound.values(),
                              nullptr, nullptr, 0));
  } else {
    const std::string* name = impl_->prepared_name(sql);
    if (name == nullptr) {
      std::string new_name = impl_->next_name();
      ResultPtr prepared(
          PQprepare(c, new_name.c_str(), std::string(sql).c_str(), bound.count(), nullptr));
      if (PQresultStatus(prepared.get()) != PGRES_COMMAND_OK) {
        return impl_->error(prepared.get());  // nothing ran yet: never in doubt
      }
      name = &impl_->prepared.emplace(std::string(sql), std::move(new_name)).first->second;
    }
    result.reset(
        PQexecPrepared(c, name->c_str(), bound.count(), bound.values(), nullptr, nullptr, 0));
  }
  return answer(impl_->to_result(result.get()));
}

absl::StatusOr<Result> Connection::execute_atomically(std::span<const Statement> statements) {
  return execute_atomically_then(statements, {});
}

absl::StatusOr<Result> Connection::execute_atomically_then(std::span<const Statement> statements,
                                                           std::span<const Statement> then) {
  if (impl_->connection_bad()) return impl_->error(nullptr);
  // Inside the host's own transaction nothing commits at our Sync.
  const PipelineEnd end =
      in_transaction() ? PipelineEnd::kInHostTransaction : PipelineEnd::kCommits;
  if (PQenterPipelineMode(impl_->conn.get()) != 1) {
    return then.empty() ? idemledger::Connection::execute_atomically(statements)
                        : idemledger::Connection::execute_atomically_then(statements, then);
  }
  if (then.empty()) return impl_->run_pipeline(statements, end, statements.size() - 1);
  absl::InlinedVector<Statement, 4> all(statements.begin(), statements.end());
  all.insert(all.end(), then.begin(), then.end());
  return impl_->run_pipeline(all, end, statements.size() - 1);
}

absl::StatusOr<Result> Connection::open_transaction(std::string_view begin_sql,
                                                    std::span<const Statement> then) {
  if (impl_->connection_bad()) return impl_->error(nullptr);
  if (PQenterPipelineMode(impl_->conn.get()) != 1) {
    return idemledger::Connection::open_transaction(begin_sql, then);
  }
  absl::InlinedVector<Statement, 4> statements;
  statements.push_back({begin_sql, {}});
  statements.insert(statements.end(), then.begin(), then.end());
  return impl_->run_pipeline(statements, PipelineEnd::kOpensTransaction, statements.size() - 1);
}

absl::StatusOr<Result> Connection::Impl::run_pipeline(std::span<const Statement> statements,
                                                      PipelineEnd end, std::size_t answer) {
  PGconn* c = conn.get();
  // Send everything, then one Sync: without an explicit BEGIN the server runs
  // the batch as one implicit transaction and commits it at the Sync; after
  // one, the block stays open.
  struct Pending {
    bool is_prepare;
    std::string sql;  // for prepares: cache it once the Parse succeeded
    std::string name;
  };
  std::vector<Pending> pending;
  pending.reserve(statements.size() * 2);
  bool sent = true;
  for (const Statement& s : statements) {
    const BoundParams bound(s.params);
    if (!options.prepared_statements) {
      sent = sent && PQsendQueryParams(c, std::string(s.sql).c_str(), bound.count(), nullptr,
                                       bound.values(), nullptr, nullptr, 0) == 1;
      pending.push_back({false, {}, {}});
      continue;
    }
    // Steady state: the statement is prepared, and nothing is copied.
    const std::string* name = prepared_name(s.sql);
    if (name == nullptr) {
      Pending& parse = pending.emplace_back(
          Pending{true, std::string(s.sql), fmt::format("{}_{}", next_name(), pending.size())});
      sent = sent &&
             PQsendPrepare(c, parse.name.c_str(), parse.sql.c_str(), bound.count(), nullptr) == 1;
      name = &parse.name;
    }
    sent = sent && PQsendQueryPrepared(c, name->c_str(), bound.count(), bound.values(), nullptr,
                                       nullptr, 0) == 1;
    pending.push_back({false, {}, {}});
  }
  sent = sent && PQpipelineSync(c) == 1;
  if (!sent) {
    absl::Status s = error(nullptr);
    broken = true;  // a half-sent pipeline leaves the protocol state unknown
    mark_connection_broken(s);
    return s;
  }

  absl::Status first_error;
  absl::StatusOr<Result> answered;
  std::size_t statement = 0;  // which of `statements` the next result answers
  for (const Pending& p : pending) {
    ResultPtr r(PQgetResult(c));
    if (r == nullptr) {
      first_error.Update(error(nullptr));
      break;
    }
    while (ResultPtr extra{PQgetResult(c)}) {
    }  // drain to the command's end marker
    const ExecStatusType status = PQresultStatus(r.get());
    if (p.is_prepare) {
      if (status == PGRES_PIPELINE_ABORTED) continue;
      if (status == PGRES_COMMAND_OK)
        prepared.emplace(p.sql, p.name);
      else
        first_error.Update(error(r.get()));
      continue;
    }
    const bool is_answer = statement++ == answer;
    if (status == PGRES_PIPELINE_ABORTED) continue;
    absl::StatusOr<Result> result = to_result(r.get());
    if (!result.ok()) first_error.Update(result.status());
    if (is_answer) answered = std::move(result);
    if (connection_bad()) break;
  }
  if (!connection_bad()) {
    ResultPtr sync(PQgetResult(c));
    if (sync != nullptr && PQresultStatus(sync.get()) == PGRES_PIPELINE_SYNC &&
        PQexitPipelineMode(c) == 1) {
      if (!first_error.ok()) return first_error;
      return answered;
    }
    broken = true;
  }
  // A server error means the implicit transaction rolled back: a definite no.
  if (!first_error.ok() && !connection_broken(first_error)) return first_error;
  // The session died before the Sync's answer. Outside a host transaction the
  // commit may or may not have happened: say so, never guess. Inside one,
  // the host's transaction died with the session: definitely not committed.
  switch (end) {
    case PipelineEnd::kCommits:
      break;
    case PipelineEnd::kInHostTransaction:
      return connection_lost("connection lost; the enclosing transaction is rolled back",
                             PQerrorMessage(c), /*in_doubt=*/false);
    case PipelineEnd::kOpensTransaction:
      return connection_lost("connection lost while opening a transaction; nothing committed",
                             PQerrorMessage(c), /*in_doubt=*/false);
  }
  return connection_lost("commit in doubt: connection lost before the outcome arrived",
                         PQerrorMessage(c), /*in_doubt=*/true);
}

absl::StatusOr<bool> Connection::wait_for_notification(absl::Duration timeout) {
  if (impl_->connection_bad()) return impl_->error(nullptr);
  PGconn* c = impl_->conn.get();
  const auto take_notifications = [&] {
    bool any = false;
    while (PGnotify* n = PQnotifies(c)) {  // one wake-up is enough; drain the rest
      PQfreemem(n);
      any = true;
    }
    return any;
  };
  if (PQconsumeInput(c) != 1) return impl_->error(nullptr);
  if (take_notifications()) return true;
  pollfd readable{.fd = PQsocket(c), .events = POLLIN, .revents = 0};
  const int ready = poll(&readable, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (ready <= 0) return false;  // timed out (or interrupted): the caller polls anyway
  if (PQconsumeInput(c) != 1) return impl_->error(nullptr);
  return take_notifications();
}

bool Connection::in_transaction() const {
  const PGTransactionStatusType t = PQtransactionStatus(impl_->conn.get());
  return t == PQTRANS_INTRANS || t == PQTRANS_INERROR;
}

bool Connection::is_broken() const { return impl_->connection_bad() || impl_->retired; }

bool Connection::is_idle() const {
  return !impl_->connection_bad() && PQtransactionStatus(impl_->conn.get()) == PQTRANS_IDLE;
}

bool Connection::poll_alive() {
  if (impl_->connection_bad()) return false;
  // An idle session receives nothing unless the server is ending it (the FATAL
  // of an administrator shutdown, then EOF). Look without blocking; only if
  // something arrived, read it and confirm with a round trip.
  pollfd readable{.fd = PQsocket(impl_->conn.get()), .events = POLLIN, .revents = 0};
  if (poll(&readable, 1, 0) == 0) return true;
  if (PQconsumeInput(impl_->conn.get()) != 1 || !execute("SELECT 1").ok()) impl_->broken = true;
  return !impl_->connection_bad();
}

int Connection::backend_pid() const { return PQbackendPID(impl_->conn.get()); }

void Connection::abandon_after_fork() {
  (void)impl_->conn.release();  // the parent still owns the socket; send nothing on it
  impl_->broken = true;
}

}  // namespace idemledger::pg
