// A raw TCP client for the attacks of tests/security/ on the real service
// binaries (loopback only): bytes sent exactly as written, answers read as
// they arrive, each held against the API contract (docs/openapi.yaml); and
// the attacks more than one listener must withstand, each bounded in bytes
// and time: a flood of header lines, and a siege of idle and slow clients.
#ifndef IDEMLEDGER_TESTS_SUPPORT_RAW_CLIENT_HPP
#define IDEMLEDGER_TESTS_SUPPORT_RAW_CLIENT_HPP

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "tests/support/openapi_contract.hpp"

namespace idemledger::testing {

// A TCP connection to 127.0.0.1 that sends raw bytes and reads raw answers.
class Raw {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Raw(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() {
    if (fd_ >= 0) ::close(fd_);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  bool connected() const { return connected_; }

  // False once the server has closed (or reset) the connection.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Whatever arrives within `wait` (up to the server closing), at most 64 KiB.
  std::string read(std::chrono::milliseconds wait) {
    std::string out;
    const auto deadline = Clock::now() + wait;
    while (out.size() < 65536) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      if (out.find("\r\n\r\n") != std::string::npos && complete(out)) break;
    }
    return out;
  }
  // "HTTP/1.1 NNN" -> NNN, or 0 if there was no answer. An answer is also
  // held against the API contract (docs/openapi.yaml): by default the webhook
  // operation, which documents whatever its listener may answer.
  static int status(const std::string& answer,
                    std::string_view operation = "recordPaymentWebhook") {
    const HttpAnswer parsed = parse_raw_answer(answer);  // status 0 until the head is complete
    if (parsed.status != 0) {
      EXPECT_THAT(OpenApiContract::intake().violations(operation, parsed), ::testing::IsEmpty());
    }
    return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : 0;
  }

 private:
  static bool complete(const std::string& answer) {
    const std::size_t end = answer.find("\r\n\r\n");
    const std::size_t at = answer.find("Content-Length: ");
    if (at == std::string::npos || at > end) return true;
    return answer.size() >= end + 4 + std::stoul(answer.substr(at + 16));
  }
  int fd_;
  bool connected_ = false;
};

// One request on a fresh connection; the whole answer.
inline std::string ask(int port, const std::string& request,
                       std::chrono::milliseconds wait = std::chrono::milliseconds(5000)) {
  Raw c(port);
  EXPECT_TRUE(c.connected());
  c.send(request);
  return c.read(wait);
}

inline long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// `request_line` with 100 small header fields: few bytes, too many fields.
inline std::string with_many_fields(const std::string& request_line) {
  std::string request = request_line + "\r\n";
  for (int i = 0; i < 100; ++i) request += "X" + std::to_string(i) + ": y\r\n";
  return request + "\r\n";
}

// Streams `request_line` and then up to 2,000,000 header lines (in blocks of
// 1,000) to `port`, until the server stops reading; what it answered. A
// server that reads them all fails the test.
inline std::string flood_header_lines(int port, const std::string& request_line) {
  Raw c(port);
  EXPECT_TRUE(c.send(request_line + "\r\n"));
  std::string lines;
  for (int i = 0; i < 1000; ++i) lines += "X-A: b\r\n";
  int sent = 0;
  while (sent < 2000 && c.send(lines)) ++sent;
  EXPECT_LT(sent, 2000) << "the server stopped reading";
  return c.read(std::chrono::milliseconds(2000));
}

// While it lives: `idle` connections to `port` that send nothing, and `slow`
// ones that began `request_line` and send one more header line every 200 ms
// (from a thread of its own).
class Siege {
 public:
  Siege(int port, int idle, int slow, const std::string& request_line) {
    idle_.reserve(static_cast<std::size_t>(idle));
    for (int i = 0; i < idle; ++i) idle_.push_back(std::make_unique<Raw>(port));
    slow_.reserve(static_cast<std::size_t>(slow));
    for (int i = 0; i < slow; ++i) {
      slow_.push_back(std::make_unique<Raw>(port));
      slow_.back()->send(request_line + "\r\n");
    }
    dribble_ = std::thread([this] {
      while (!done_) {
        for (auto& s : slow_) s->send("X-Slow: 1\r\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  ~Siege() { lift(); }
  Siege(const Siege&) = delete;
  Siege& operator=(const Siege&) = delete;

  // What the first slow client is answered within `wait`, the siege lifted.
  std::string slow_answer(std::chrono::milliseconds wait) {
    std::string answer = slow_.front()->read(wait);
    lift();
    return answer;
  }
  void lift() {
    done_ = true;
    if (dribble_.joinable()) dribble_.join();
  }

 private:
  std::vector<std::unique_ptr<Raw>> idle_;
  std::vector<std::unique_ptr<Raw>> slow_;
  std::atomic<bool> done_ = false;
  std::thread dribble_;
};

// The slowest of `n` answers to `request` on `port` (50 ms apart), each on
// a fresh connection; each must be `status` for `operation`.
inline std::chrono::milliseconds worst_answer(int port, const std::string& request, int status,
                                              std::string_view operation, int n = 10) {
  std::chrono::milliseconds worst{0};
  for (int i = 0; i < n; ++i) {
    const auto t0 = Raw::Clock::now();
    const std::string answer = ask(port, request);
    worst = std::max(worst,
                     std::chrono::duration_cast<std::chrono::milliseconds>(Raw::Clock::now() - t0));
    EXPECT_EQ(Raw::status(answer, operation), status) << answer;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return worst;
}

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_SUPPORT_RAW_CLIENT_HPP
