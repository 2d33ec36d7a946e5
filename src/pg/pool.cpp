#include "idemledger/pg/pool.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "absl/time/clock.h"
#include "src/core/internal/absl_compat.hpp"

namespace idemledger::pg {
namespace {
// Pause between failed connection attempts while acquire() still has time.
constexpr absl::Duration kReconnectPause = absl::Milliseconds(50);

std::atomic<long> fork_generation{0};

// Which process this is, told apart from its fork()ed children and theirs:
// a counter every child bumps as fork() returns in it. Comparing it costs a
// load where getpid() costs a system call (glibc no longer caches the pid),
// and the pool asks twice per borrowed session. The handler is registered
// on the first call, which a Pool's constructor makes before it can hand
// anything out; if it cannot be, the pid it is (in parent and child alike).
long this_process() {
  static const bool registered = pthread_atfork(nullptr, nullptr, [] {
                                   fork_generation.fetch_add(1, std::memory_order_relaxed);
                                 }) == 0;
  return registered ? fork_generation.load(std::memory_order_relaxed) : static_cast<long>(getpid());
}
}  // namespace

PooledConnection::PooledConnection(Pool* pool, std::unique_ptr<Connection> conn)
    : pool_(pool), conn_(std::move(conn)), owner_process_(this_process()) {}

PooledConnection::PooledConnection(PooledConnection&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      conn_(std::move(other.conn_)),
      owner_process_(other.owner_process_),
      discard_(other.discard_) {}

PooledConnection& PooledConnection::operator=(PooledConnection&& other) noexcept {
  if (this != &other) {
    give_back();
    pool_ = std::exchange(other.pool_, nullptr);
    conn_ = std::move(other.conn_);
    owner_process_ = other.owner_process_;
    discard_ = other.discard_;
  }
  return *this;
}

PooledConnection::~PooledConnection() { give_back(); }

void PooledConnection::give_back() {
  if (pool_ == nullptr || conn_ == nullptr) return;
  if (owner_process_ != this_process()) {
    conn_->abandon_after_fork();  // borrowed before fork(): the parent's session
    conn_.reset();
  } else {
    pool_->release(std::move(conn_), discard_);
  }
  pool_ = nullptr;
}

Pool::Pool(PoolOptions options) : options_(std::move(options)), owner_process_(this_process()) {}

Pool::~Pool() {
  MutexLock lock(&mu_);
  abandon_if_forked();
  idle_.clear();
}

bool Pool::can_hand_out() const { return !idle_.empty() || open_ < options_.max_size; }

void Pool::abandon_if_forked() {
  if (owner_process_ == this_process()) return;
  for (auto& conn : idle_) conn->abandon_after_fork();
  idle_.clear();
  open_ = 0;
  owner_process_ = this_process();
}

absl::StatusOr<PooledConnection> Pool::acquire() {
  const absl::Time deadline = absl::Now() + options_.acquire_timeout;
  absl::Status last_connect_error;
  for (;;) {
    std::unique_ptr<Connection> candidate;
    {
      MutexLock lock(&mu_);
      abandon_if_forked();
      if (!mu_.AwaitWithDeadline([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return can_hand_out(); },
                                 deadline)) {
        return absl::UnavailableError(
            fmt::format("connection pool exhausted: all {} connections in use for {}",
                        options_.max_size, absl::FormatDuration(options_.acquire_timeout)));
      }
      if (!idle_.empty()) {
        candidate = std::move(idle_.back());
        idle_.pop_back();
      } else {
        ++open_;  // reserve the slot before connecting outside the lock
      }
    }
    if (candidate == nullptr) {
      absl::StatusOr<std::unique_ptr<Connection>> opened =
          Connection::open(options_.dsn, options_.connection);
      if (opened.ok()) {
        MutexLock lock(&mu_);
        ++created_;
        return PooledConnection(this, std::move(*opened));
      }
      {
        MutexLock lock(&mu_);
        --open_;
      }
      if (opened.status().code() == absl::StatusCode::kInvalidArgument) return opened.status();
      last_connect_error = opened.status();
      if (absl::Now() + kReconnectPause >= deadline) {
        return absl::UnavailableError(fmt::format("connection pool: no connection within {}: {}",
                                                  absl::FormatDuration(options_.acquire_timeout),
                                                  last_connect_error.message()));
      }
      absl::SleepFor(kReconnectPause);
      continue;
    }
    candidate = validate(std::move(candidate));
    if (candidate != nullptr) return PooledConnection(this, std::move(candidate));
    MutexLock lock(&mu_);
    --open_;
    ++dropped_;
  }
}

std::unique_ptr<Connection> Pool::validate(std::unique_ptr<Connection> conn) {
  if (!conn->poll_alive()) return nullptr;  // closed, or the server went away
  if (!conn->is_idle() && !conn->execute("SELECT 1").ok()) return nullptr;
  return conn;
}

void Pool::release(std::unique_ptr<Connection> conn, bool discard) {
  bool drop = discard || conn->is_broken();
  if (!drop && conn->in_transaction()) {
    // Returned inside a transaction (open or failed) by its borrower: roll
    // back now, outside the lock, so its locks and snapshot end with the
    // borrow instead of waiting in the idle list for the next acquire().
    // A session that cannot roll back is replaced.
    drop = !conn->execute("ROLLBACK").ok();
  }
  MutexLock lock(&mu_);
  if (drop) {
    --open_;
    ++dropped_;
    conn.reset();
    return;
  }
  idle_.push_back(std::move(conn));
}

Pool::Stats Pool::stats() const {
  MutexLock lock(&mu_);
  return {.open = open_, .idle = idle_.size(), .created = created_, .dropped = dropped_};
}

SessionLender Pool::lender() {
  return [this](const std::function<void(Connection&)>& work) -> absl::Status {
    absl::StatusOr<PooledConnection> conn = acquire();
    if (!conn.ok()) return conn.status();
    work(**conn);
    return absl::OkStatus();
  };
}

}  // namespace idemledger::pg
