// The libpq adapter's bounds on a network that stops answering: a server that
// accepts and never speaks, and a session whose network dies under it (its
// packets dropped, no reset: a partition, a host gone, a failover whose old
// address goes dark). Without the bounds each call waits for the system's TCP
// retries: minutes for a connect, about 15 for a statement.
//
// It takes its network down (`ip link set lo down`), so it runs only in a
// network namespace of its own with a server of its own inside, never on the
// machine's: tests/pg/in_private_network.sh starts both (root, as in CI).
// Outside one it fails without touching anything.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/pg/connection.hpp"

namespace idemledger::pg {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// True if this process runs in the network namespace that
// in_private_network.sh made: not the one it was started from (whose inode
// it exports).
bool in_private_network() {
  const char* outer = std::getenv("IDEMLEDGER_OUTER_NETNS");
  struct stat ours {};
  return outer != nullptr && *outer != '\0' && stat("/proc/self/ns/net", &ours) == 0 &&
         std::to_string(ours.st_ino) != outer;
}

class DeadNetwork : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(in_private_network())
        << "this test takes the loopback interface down: run it through "
           "tests/pg/in_private_network.sh, never in the machine's own network";
    const char* port = std::getenv("IDEMLEDGER_PG_PORT");
    ASSERT_NE(port, nullptr) << "no server: run it through tests/pg/in_private_network.sh";
    // Over TCP on purpose: a unix socket has no network to lose.
    tcp_dsn_ = std::string("host=127.0.0.1 dbname=postgres user=postgres port=") + port;
    network(true);
  }
  void TearDown() override {
    if (in_private_network()) network(true);
  }
  static void network(bool up) {
    const std::string cmd = std::string("ip link set lo ") + (up ? "up" : "down");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // A session over TCP that has answered, inside a transaction (unless
  // `autocommit`); the network then dies.
  std::unique_ptr<Connection> session_then_dead_network(ConnectionOptions options,
                                                        bool autocommit = false) {
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::open(tcp_dsn_ + dsn_extra_, std::move(options));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    EXPECT_TRUE((*c)->execute(autocommit ? "SELECT 1" : "BEGIN").ok());
    network(false);
    return *std::move(c);
  }
  std::string tcp_dsn_;
  std::string dsn_extra_;
};

// A listener on 127.0.0.1 that never accepts: the kernel completes the
// handshake, and nobody ever answers libpq's first message.
class SilentServer {
 public:
  SilentServer() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentServer() { close(fd_); }
  SilentServer(const SilentServer&) = delete;
  SilentServer& operator=(const SilentServer&) = delete;
  std::string dsn() const {
    return "host=127.0.0.1 dbname=postgres user=postgres port=" + std::to_string(port_);
  }

 private:
  int fd_;
  int port_ = 0;
};

// How long open() took to give up on a silent server, and that it did so
// with a retryable kUnavailable.
double seconds_to_give_up(const std::string& dsn, ConnectionOptions options) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<Connection>> c = Connection::open(dsn, std::move(options));
  const double took = seconds_since(start);
  EXPECT_FALSE(c.ok());
  if (!c.ok()) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
    EXPECT_TRUE(is_retryable(c.status())) << c.status();
  }
  return took;
}

TEST_F(DeadNetwork, ASilentServerEndsTheConnectAfterConnectTimeout) {
  const SilentServer silent;
  const double took = seconds_to_give_up(silent.dsn(), {.connect_timeout = absl::Seconds(2)});
  EXPECT_GE(took, 1.5);
  EXPECT_LT(took, 6.0);
}

TEST_F(DeadNetwork, TheDefaultConnectTimeoutIsFiveSeconds) {
  const SilentServer silent;
  const double took = seconds_to_give_up(silent.dsn(), {});
  EXPECT_GE(took, 4.5);
  EXPECT_LT(took, 9.0);
}

TEST_F(DeadNetwork, TheDsnsOwnConnectTimeoutWins) {
  const SilentServer silent;
  const double took = seconds_to_give_up(silent.dsn() + " connect_timeout=2",
                                         {.connect_timeout = absl::Seconds(60)});
  EXPECT_LT(took, 6.0);
}

TEST_F(DeadNetwork, PgconnectTimeoutInTheEnvironmentWins) {
  const SilentServer silent;
  ASSERT_EQ(setenv("PGCONNECT_TIMEOUT", "2", 1), 0);
  const double took = seconds_to_give_up(silent.dsn(), {.connect_timeout = absl::Seconds(60)});
  unsetenv("PGCONNECT_TIMEOUT");
  EXPECT_LT(took, 6.0);
}

TEST_F(DeadNetwork, BoundsBelowZeroOrAboveAnHourAreRefused) {
  for (const absl::Duration bad :
       {absl::Seconds(-1), absl::Minutes(61), absl::InfiniteDuration()}) {
    EXPECT_EQ(Connection::open(tcp_dsn_, {.connect_timeout = bad}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Connection::open(tcp_dsn_, {.network_timeout = bad}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  const absl::StatusOr<std::unique_ptr<Connection>> longest = Connection::open(
      tcp_dsn_, {.connect_timeout = absl::Hours(1), .network_timeout = absl::Hours(1)});
  EXPECT_TRUE(longest.ok()) << longest.status();
}

// A statement sent into a dead network fails once its bytes have gone
// unacknowledged for network_timeout, and the session is broken. Inside a
// transaction that is retryable (nothing committed); a statement that
// commits by itself is in doubt, and says so.
void expect_statement_ends(Connection& conn, double at_least, double below,
                           bool autocommit = false) {
  const Clock::time_point start = Clock::now();
  const absl::StatusOr<Result> r = conn.execute("SELECT 1");
  const double took = seconds_since(start);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(connection_broken(r.status())) << r.status();
  EXPECT_EQ(commit_in_doubt(r.status()), autocommit) << r.status();
  EXPECT_EQ(is_retryable(r.status()), !autocommit) << r.status();
  EXPECT_TRUE(conn.is_broken());
  EXPECT_GE(took, at_least);
  EXPECT_LT(took, below);
}

TEST_F(DeadNetwork, AStatementOnADeadNetworkFailsAfterNetworkTimeout) {
  std::unique_ptr<Connection> c = session_then_dead_network({.network_timeout = absl::Seconds(2)});
  ASSERT_NE(c, nullptr);
  expect_statement_ends(*c, 1.5, 6.0);
}

TEST_F(DeadNetwork, AStatementThatCommitsByItselfIsInDoubtOnADeadNetwork) {
  std::unique_ptr<Connection> c =
      session_then_dead_network({.network_timeout = absl::Seconds(2)}, /*autocommit=*/true);
  ASSERT_NE(c, nullptr);
  expect_statement_ends(*c, 1.5, 6.0, /*autocommit=*/true);
}

TEST_F(DeadNetwork, TheDefaultNetworkTimeoutIsTenSeconds) {
  std::unique_ptr<Connection> c = session_then_dead_network({});
  ASSERT_NE(c, nullptr);
  expect_statement_ends(*c, 9.0, 16.0);
}

TEST_F(DeadNetwork, TheDsnsOwnTcpUserTimeoutWins) {
  dsn_extra_ = " tcp_user_timeout=2000";
  std::unique_ptr<Connection> c = session_then_dead_network({.network_timeout = absl::Seconds(60)});
  ASSERT_NE(c, nullptr);
  expect_statement_ends(*c, 1.5, 6.0);
}

// An idle session (a worker waiting for a NOTIFY) learns of the dead network
// from its keepalive probes, without sending a statement.
TEST_F(DeadNetwork, AnIdleSessionLearnsOfADeadNetworkFromKeepalives) {
  std::unique_ptr<Connection> c = session_then_dead_network({.network_timeout = absl::Seconds(2)});
  ASSERT_NE(c, nullptr);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<bool> woke = false;
  while (woke.ok() && seconds_since(start) < 20) woke = c->wait_for_notification(absl::Seconds(1));
  ASSERT_FALSE(woke.ok()) << "still waiting 20 s after the network died";
  EXPECT_EQ(woke.status().code(), absl::StatusCode::kUnavailable) << woke.status();
  EXPECT_TRUE(c->is_broken());
  EXPECT_LT(seconds_since(start), 8.0);
}

// The control, so the cases above can fail: with the bounds off, a
// statement on a dead network is still waiting 6 s later, and finishes once
// the network is back (TCP's own retransmission).
TEST_F(DeadNetwork, WithoutTheBoundsAStatementWaitsForTheNetwork) {
  std::unique_ptr<Connection> c = session_then_dead_network(
      {.connect_timeout = absl::ZeroDuration(), .network_timeout = absl::ZeroDuration()});
  ASSERT_NE(c, nullptr);
  std::future<absl::StatusOr<Result>> r =
      std::async(std::launch::async, [&] { return c->execute("SELECT 1"); });
  EXPECT_EQ(r.wait_for(std::chrono::seconds(6)), std::future_status::timeout);
  network(true);
  ASSERT_EQ(r.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(r.get().ok());
}

// The server's side of a partition: a transaction whose client was cut off
// between two round trips keeps its locks while its backend waits for the
// next message, until the server's TCP keepalive gives up (two hours by
// default). With an idle limit, the server ends it after that long. The
// lock is watched over the unix socket, which the dead loopback leaves
// alone.
class CutOffMidTransaction : public DeadNetwork {
 protected:
  // True if, `after` the network died under a transaction holding an
  // advisory lock with `idle_limit`, another session can take the lock.
  bool lock_free_after(absl::Duration idle_limit, double after) {
    const char* unix_dsn = std::getenv("IDEMLEDGER_TEST_DSN");
    EXPECT_NE(unix_dsn, nullptr);
    absl::StatusOr<std::unique_ptr<Connection>> watcher = Connection::open(unix_dsn);
    absl::StatusOr<std::unique_ptr<Connection>> cut =
        Connection::open(tcp_dsn_, {.network_timeout = absl::ZeroDuration()});
    EXPECT_TRUE(watcher.ok() && cut.ok());
    if (!watcher.ok() || !cut.ok()) return false;
    absl::StatusOr<Transaction> tx = Transaction::begin(**cut, {.idle_limit = idle_limit});
    EXPECT_TRUE(tx.ok()) << tx.status();
    EXPECT_TRUE((*cut)->execute("SELECT pg_advisory_xact_lock(4242)").ok());
    network(false);
    const Clock::time_point start = Clock::now();
    bool free = false;
    while (!free && seconds_since(start) < after) {
      absl::StatusOr<Result> r = (*watcher)->execute("SELECT pg_try_advisory_xact_lock(4242)");
      EXPECT_TRUE(r.ok()) << r.status();
      free = r.ok() && r->single_row("lock")->get<bool>(0).value_or(false);
      if (!free) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    freed_after_ = seconds_since(start);
    network(true);
    return free;
  }
  double freed_after_ = 0;
};

TEST_F(CutOffMidTransaction, TheServerEndsItAfterTheIdleLimit) {
  EXPECT_TRUE(lock_free_after(absl::Seconds(1), 10.0)) << "still held 10 s after the cut";
  EXPECT_LT(freed_after_, 4.0);
}

// The control: without the limit, the lock is still held 4 s after the cut.
TEST_F(CutOffMidTransaction, WithoutTheLimitTheLockOutlivesTheClient) {
  EXPECT_FALSE(lock_free_after(absl::ZeroDuration(), 4.0));
}

}  // namespace
}  // namespace idemledger::pg
