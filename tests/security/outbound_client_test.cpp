// The services' outbound HTTP client (examples/common/http_client.hpp: the
// relay's delivery, the finality oracle's JSON-RPC) against servers that
// misbehave on purpose, in this process on loopback: one that drips its
// answer a byte at a time, one that answers 300 MB, TLS servers whose
// certificate is trusted, untrusted, or for another name; and the provider
// simulator's senders on one thread (run_senders) against servers that hold
// their answers.
#include <sys/stat.h>
#include <unistd.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>
// (a block of its own, so it stays first)

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "examples/common/http_client.hpp"
#include "gmock/gmock.h"
#include "tests/support/loopback_server.hpp"
#include "tests/support/raw_client.hpp"

namespace example {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using idemledger::testing::LoopbackServer;
using idemledger::testing::rss_kib;

// Reads one request's header (enough for these servers).
void read_request(tcp::socket& s) {
  boost::asio::streambuf b;
  boost::system::error_code ec;
  asio::read_until(s, b, "\r\n\r\n", ec);
}

// Answers one request a byte every 0.4 s: its 60 bytes would take 24 s.
void drip(tcp::socket& s) {
  read_request(s);
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n01234567890123456789";
  for (char c : answer) {
    boost::system::error_code ec;
    asio::write(s, asio::buffer(&c, 1), ec);
    if (ec) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
}

// The test server itself: a test that gets fewer connections than its server
// awaits fails at once, rather than hanging in the server's end.
TEST(LoopbackServer, EndsAtOnceWhenFewerConnectionsCameThanItAwaits) {
  Clock::time_point ending;
  bool served = false;
  asio::io_context io;
  {
    LoopbackServer server(2, [&served](std::vector<tcp::socket>&) { served = true; });
    tcp::socket one(io);
    one.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                              static_cast<unsigned short>(server.port())));
    while (server.connections() < 1) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // blocked awaiting the second
    ending = Clock::now();
  }
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - ending).count(),
            1000)
      << "the server's end, in ms";
  EXPECT_FALSE(served) << "one connection of two: nothing to serve";
}

TEST(OutboundClient, ADripFeedingServerCannotStretchACallPastItsDeadline) {
  LoopbackServer server(drip);
  HttpCaller caller(Url(server.url("/notify")), std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(took.count(), 1000) << "the whole call, in ms";
  EXPECT_TRUE(absl::IsDeadlineExceeded(classify_http(r))) << "retryable, as the contract says";
}

TEST(OutboundClient, AHugeAnswerIsCutAtTheCapWhileItIsRead) {
  LoopbackServer server([](tcp::socket& s) {
    read_request(s);
    boost::system::error_code ec;
    asio::write(
        s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 314572800\r\n\r\n")), ec);
    const std::string mb(1 << 20, 'x');
    for (int i = 0; i < 300 && !ec; ++i) asio::write(s, asio::buffer(mb), ec);
  });
  const long before = rss_kib(::getpid());
  HttpCaller caller(Url(server.url("/rpc")), std::chrono::milliseconds(5000));
  const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("answer over 1048576 bytes"));
  EXPECT_LT(rss_kib(::getpid()) - before, 64 * 1024) << "KiB grown reading a 300 MB answer";
}

TEST(OutboundClient, AnAnswerWithinTheLimitsComesBackWhole) {
  LoopbackServer server([](tcp::socket& s) {
    read_request(s);
    boost::system::error_code ec;
    asio::write(s, asio::buffer(std::string("HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\nno")),
                ec);
  });
  HttpCaller caller(Url(server.url("/")), std::chrono::milliseconds(2000));
  const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "no");
  EXPECT_TRUE(absl::IsUnavailable(classify_http(r)));
}

// A self-signed certificate for `names` (SAN entries), made by the openssl CLI.
struct TestCert {
  std::string cert, key;
  TestCert(const std::string& stem, const std::string& names) {
    cert = ::testing::TempDir() + "/" + stem + ".crt";
    key = ::testing::TempDir() + "/" + stem + ".key";
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test -addext "
        "subjectAltName=" +
        names + " -keyout " + key + " -out " + cert + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  ~TestCert() {
    std::error_code ec;  // best effort: a leftover is harmless, a throw is not
    std::filesystem::remove(cert, ec);
    std::filesystem::remove(key, ec);
  }
  TestCert(const TestCert&) = delete;
  TestCert& operator=(const TestCert&) = delete;
};

// Serves one TLS connection: answers 200 "secure" to one request.
class TlsServer {
 public:
  explicit TlsServer(const TestCert& c) : tls_(asio::ssl::context::tls_server) {
    tls_.use_certificate_chain_file(c.cert);
    tls_.use_private_key_file(c.key, asio::ssl::context::pem);
    server_.emplace([this](tcp::socket& s) {
      asio::ssl::stream<tcp::socket&> stream(s, tls_);
      boost::system::error_code ec;
      stream.handshake(asio::ssl::stream_base::server, ec);
      if (ec) return;  // the client refused us
      boost::asio::streambuf b;
      asio::read_until(stream, b, "\r\n\r\n", ec);
      asio::write(stream,
                  asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure")),
                  ec);
      stream.shutdown(ec);
    });
  }
  int port() const { return server_->port(); }

 private:
  asio::ssl::context tls_;
  std::optional<LoopbackServer> server_;
};

TEST(OutboundClient, HttpsVerifiesTheCertificateAndTheName) {
  const TestCert good("client_good", "IP:127.0.0.1,DNS:localhost");
  const TestCert other("client_other", "DNS:other.example");
  // Trusted (our test CA is the certificate itself) and for this name: 200.
  ASSERT_EQ(::setenv("SSL_CERT_FILE", good.cert.c_str(), 1), 0);
  {
    TlsServer server(good);
    HttpCaller caller(Url("https://localhost:" + std::to_string(server.port()) + "/"),
                      std::chrono::milliseconds(3000));
    const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "secure");
  }
  // Trusted, but issued for another name: refused.
  ASSERT_EQ(::setenv("SSL_CERT_FILE", other.cert.c_str(), 1), 0);
  {
    TlsServer server(other);
    HttpCaller caller(Url("https://127.0.0.1:" + std::to_string(server.port()) + "/"),
                      std::chrono::milliseconds(3000));
    const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("TLS handshake"));
  }
  // Not trusted at all (the system's CAs never signed it): refused.
  ASSERT_EQ(::unsetenv("SSL_CERT_FILE"), 0);
  {
    TlsServer server(good);
    HttpCaller caller(Url("https://127.0.0.1:" + std::to_string(server.port()) + "/"),
                      std::chrono::milliseconds(3000));
    const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("certificate verify failed"));
  }
}

// run_senders: the provider simulator's closed-loop senders on one thread.

// `rounds` times reads one request on every connection and only then answers
// them all, with the round's number: a client that waits for one
// connection's answer before it sends on the next never gets one.
LoopbackServer::ServeAll rounds(int rounds) {
  return [rounds](std::vector<tcp::socket>& sockets) {
    boost::system::error_code ec;
    std::vector<asio::streambuf> read(sockets.size());
    for (int r = 0; r < rounds && !ec; ++r) {
      for (std::size_t i = 0; i < sockets.size() && !ec; ++i) {
        read[i].consume(asio::read_until(sockets[i], read[i], "\r\n\r\n", ec));
      }
      const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n" + std::to_string(r);
      for (std::size_t i = 0; i < sockets.size() && !ec; ++i) {
        asio::write(sockets[i], asio::buffer(answer), ec);
      }
    }
  };
}

// The relay transport's X-Relay-Deadline: when its call stops waiting, or
// when the relay's claim on the message ends if that is sooner (a process
// paused past its lease must not have a downstream act on a call another
// replica may be making too).
TEST(RelayTransport, TheDeadlineIsTheCallsOrTheClaimsWhicheverIsSooner) {
  std::mutex mu;
  std::vector<long long> deadlines;
  LoopbackServer server([&](tcp::socket& s) {
    for (;;) {
      asio::streambuf b;
      boost::system::error_code ec;
      asio::read_until(s, b, "\r\n\r\n", ec);
      if (ec) return;
      const std::string head(asio::buffers_begin(b.data()), asio::buffers_end(b.data()));
      const std::size_t at = head.find("X-Relay-Deadline: ");
      if (at != std::string::npos) {
        const std::lock_guard lock(mu);
        deadlines.push_back(std::stoll(head.substr(at + 18)));
      }
      asio::write(s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")), ec);
    }
  });
  const HttpRelayTransport post(server.url("/notify"), 2000);
  const auto now_ms = [] { return absl::ToUnixMillis(absl::Now()); };
  long long unclaimed_at = 0, claim_ends = 0, claim_ended = 0;
  // On a thread of its own: the transport keeps its connection per thread,
  // and the server's end waits for it to close.
  std::thread([&] {
    idemledger::RelayMessage m{.outbox_id = 7, .topic = "credited", .payload = "{}"};
    unclaimed_at = now_ms();
    EXPECT_TRUE(post(m).ok());
    m.claimed_until = absl::Now() + absl::Milliseconds(300);
    claim_ends = absl::ToUnixMillis(m.claimed_until);
    EXPECT_TRUE(post(m).ok());
    m.claimed_until = absl::Now() - absl::Seconds(1);  // already over: the API is told so
    claim_ended = absl::ToUnixMillis(m.claimed_until);
    EXPECT_TRUE(post(m).ok());
  }).join();
  const std::lock_guard lock(mu);
  ASSERT_EQ(deadlines.size(), 3u);
  EXPECT_GE(deadlines[0], unclaimed_at + 2000) << "the call's own 2 s";
  EXPECT_LT(deadlines[0], unclaimed_at + 3000);
  EXPECT_EQ(deadlines[1], claim_ends) << "the claim ends before the call would";
  EXPECT_EQ(deadlines[2], claim_ended);
}

TEST(RunSenders, SendersRunAtOnceOnTheCallingThread) {
  constexpr int kSenders = 4;
  LoopbackServer server(kSenders, rounds(1));  // no answer until all four requests are in
  std::vector<std::vector<absl::StatusOr<HttpAnswer>>> answers(kSenders);
  const std::thread::id caller = std::this_thread::get_id();
  bool other_thread = false;
  run_senders(Url(server.url("/webhooks")), kSenders, std::chrono::milliseconds(3000),
              [&](int id, const absl::StatusOr<HttpAnswer>* last, Request& request) {
                other_thread |= std::this_thread::get_id() != caller;
                if (last != nullptr) answers[static_cast<std::size_t>(id)].push_back(*last);
                request = Request{.body = "{}"};
                return last == nullptr;
              });
  EXPECT_FALSE(other_thread) << "every callback on the thread that called run_senders";
  for (const auto& got : answers) {
    ASSERT_EQ(got.size(), 1U);
    ASSERT_TRUE(got[0].ok()) << got[0].status();
    EXPECT_EQ(got[0]->status, 200);
    EXPECT_EQ(got[0]->body, "0");
  }
}

TEST(RunSenders, ASenderKeepsItsConnectionAndWaitsTheDelayItIsAsked) {
  LoopbackServer server(1, rounds(3));  // one connection accepted: a second would never be answered
  std::vector<absl::StatusOr<HttpAnswer>> got;
  std::vector<Clock::time_point> at;
  run_senders(Url(server.url("/webhooks")), 1, std::chrono::milliseconds(3000),
              [&](int, const absl::StatusOr<HttpAnswer>* last, Request& request) {
                if (last != nullptr) {
                  got.push_back(*last);
                  at.push_back(Clock::now());
                }
                // The third request after 300 ms, as a provider's retry waits.
                request =
                    Request{.body = "{}", .delay = absl::Milliseconds(got.size() == 2 ? 300 : 0)};
                return got.size() < 3;
              });
  ASSERT_EQ(got.size(), 3U);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    EXPECT_EQ(got[i]->body, std::to_string(i)) << "answers in the order of the requests";
  }
  EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(at[2] - at[1]).count(), 300);
}

TEST(RunSenders, ADripFeedingServerCannotStretchADeliveryPastItsDeadline) {
  LoopbackServer server(drip);
  std::optional<absl::StatusOr<HttpAnswer>> got;
  const auto t0 = Clock::now();
  run_senders(Url(server.url("/webhooks")), 1, std::chrono::milliseconds(500),
              [&](int, const absl::StatusOr<HttpAnswer>* last, Request& request) {
                if (last != nullptr) got = *last;
                request = Request{.body = "{}"};
                return last == nullptr;
              });
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kDeadlineExceeded) << got->status();
  EXPECT_LT(took.count(), 1000) << "the whole delivery, in ms";
}

TEST(RunSenders, AnAnswerThatArrivedWhileTheLoopWasBusyIsTaken) {
  // Both requests read, then one connection answered at once and the other
  // 100 ms later; both kept open until the client closes them.
  LoopbackServer server(2, [](std::vector<tcp::socket>& sockets) {
    for (tcp::socket& s : sockets) read_request(s);
    const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    boost::system::error_code ec;
    asio::write(sockets[0], asio::buffer(answer), ec);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    asio::write(sockets[1], asio::buffer(answer), ec);
    for (tcp::socket& s : sockets) read_request(s);
  });
  std::vector<std::optional<absl::StatusOr<HttpAnswer>>> got(2);
  bool held = false;
  run_senders(Url(server.url("/webhooks")), 2, std::chrono::milliseconds(400),
              [&](int id, const absl::StatusOr<HttpAnswer>* last, Request& request) {
                if (last != nullptr) {
                  got[static_cast<std::size_t>(id)] = *last;
                  // The first answer's callback holds the loop past the other
                  // delivery's deadline; that delivery's answer comes meanwhile.
                  if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
                  held = true;
                }
                request = Request{.body = "{}"};
                return last == nullptr;
              });
  for (const auto& answer : got) {
    ASSERT_TRUE(answer.has_value());
    ASSERT_TRUE(answer->ok()) << "a whole answer in the socket is not thrown away: "
                              << answer->status();
    EXPECT_EQ((*answer)->status, 200);
    EXPECT_EQ((*answer)->body, "ok");
  }
}

TEST(RunSenders, WhatTheCallbackThrowsLeavesRunSenders) {
  EXPECT_THROW(run_senders(Url("http://127.0.0.1:1/webhooks"), 2, std::chrono::milliseconds(500),
                           [](int, const absl::StatusOr<HttpAnswer>*, Request&) -> bool {
                             throw std::runtime_error("the provider's own failure");
                           }),
               std::runtime_error);
}

}  // namespace
}  // namespace example
