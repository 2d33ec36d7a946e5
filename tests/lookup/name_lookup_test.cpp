// The outbound client's name lookups (examples/common/http_client.hpp)
// against a resolver that does not answer. This binary puts its own
// getaddrinfo in front of the C library's: a name under hang.invalid is held,
// as a silent nameserver holds it, until the test lets it go (or 5 s pass);
// then loopback.*.hang.invalid answers 127.0.0.1 and any other fails. Every
// other name goes to the C library.
#include <dlfcn.h>
#include <netdb.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>
// (a block of its own, so it stays first)

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <latch>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "examples/common/http_client.hpp"
#include "gmock/gmock.h"
#include "tests/support/loopback_server.hpp"

namespace {

// What the held names see, shared with the tests.
struct HeldResolver {
  std::mutex mu;
  std::condition_variable cv;
  bool held = true;
  int in_flight = 0;
  std::map<std::string, int> lookups;  // per held name
  std::atomic<int> all = 0;            // every name
};

HeldResolver& held_resolver() {
  static auto* r = new HeldResolver;  // never destroyed: a lookup may outlive main()
  return *r;
}

}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                           addrinfo** res) {
  using Real = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static const auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "getaddrinfo"));
  const std::string_view name = node == nullptr ? "" : node;
  ++held_resolver().all;
  if (!name.ends_with(".hang.invalid")) return real(node, service, hints, res);
  HeldResolver& r = held_resolver();
  {
    std::unique_lock lock(r.mu);
    ++r.lookups[std::string(name)];
    ++r.in_flight;
    r.cv.wait_for(lock, std::chrono::seconds(5), [&r] { return !r.held; });
    --r.in_flight;
  }
  r.cv.notify_all();
  if (!name.starts_with("loopback.")) return EAI_AGAIN;
  return real("127.0.0.1", service, hints, res);
}

namespace example {
namespace {

using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;
using idemledger::testing::LoopbackServer;

long ms_since(Clock::time_point t0) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

class NameLookup : public ::testing::Test {
 protected:
  NameLookup() {
    const std::lock_guard lock(held_resolver().mu);
    held_resolver().held = true;
    held_resolver().lookups.clear();
  }
  // No held lookup outlives its test.
  ~NameLookup() override {
    release();
    wait_until_no_lookup_is_held();
  }

  static void release() {
    {
      const std::lock_guard lock(held_resolver().mu);
      held_resolver().held = false;
    }
    held_resolver().cv.notify_all();
  }
  static int lookups(const std::string& name) {
    const std::lock_guard lock(held_resolver().mu);
    return held_resolver().lookups[name];
  }
  static void wait_until_no_lookup_is_held() {
    HeldResolver& r = held_resolver();
    std::unique_lock lock(r.mu);
    r.cv.wait(lock, [&r] { return r.in_flight == 0; });
  }
};

// Answers 200 "ok" to each request on a connection until its client closes it.
void answer_ok(LoopbackServer::Socket& s) {
  boost::system::error_code ec;
  for (asio::streambuf b; !ec;) {
    b.consume(asio::read_until(s, b, "\r\n\r\n", ec));
    if (!ec) {
      asio::write(s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")),
                  ec);
    }
  }
}

TEST_F(NameLookup, AHeldLookupCannotHoldACallPastItsDeadline) {
  LoopbackServer server(answer_ok);
  const std::string name = "loopback.api.hang.invalid";
  const auto t0 = Clock::now();
  {
    HttpCaller caller(Url(server.url("/notify", name)), std::chrono::milliseconds(300));
    const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    EXPECT_LT(ms_since(t0), 1000) << "the call, in ms (the lookup is held for 5 s)";
  }
  EXPECT_LT(ms_since(t0), 1000) << "the call and its caller's end: nothing joins the lookup";
  EXPECT_EQ(lookups(name), 1);
  // The lookup answers after the deadline: no connection is begun for the
  // call that gave up on it.
  release();
  wait_until_no_lookup_is_held();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(server.connections(), 0);
}

TEST_F(NameLookup, ALookupThatEndsInTimeWakesItsCallAtOnce) {
  LoopbackServer server(answer_ok);
  HttpCaller caller(Url(server.url("/notify", "loopback.soon.hang.invalid")),
                    std::chrono::milliseconds(3000));
  std::thread answers_soon([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    release();
  });
  const auto t0 = Clock::now();
  const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
  const long took = ms_since(t0);
  answers_soon.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  EXPECT_GE(took, 300);
  EXPECT_LT(took, 1000) << "ms: woken when the lookup ended, not at the deadline";
  EXPECT_EQ(server.connections(), 1);
  // The connection is kept: the next call looks nothing up.
  ASSERT_TRUE(caller.post("{}", {}).ok());
  EXPECT_EQ(lookups("loopback.soon.hang.invalid"), 1);
  EXPECT_EQ(server.connections(), 1);
}

TEST_F(NameLookup, CallsThatGiveUpShareTheOneLookupUnderWay) {
  const std::string name = "api.shared.hang.invalid";
  const Url url("http://" + name + ":9/notify");
  const auto t0 = Clock::now();
  // Three callers one after another, then eight senders twice each: every
  // call out of time, and one lookup for them all.
  for (int i = 0; i < 3; ++i) {
    HttpCaller caller(url, std::chrono::milliseconds(200));
    EXPECT_EQ(caller.post("{}", {}).status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  std::vector<absl::Status> answers;
  std::vector<int> sent(8, 0);
  run_senders(url, 8, std::chrono::milliseconds(200),
              [&](int id, const absl::StatusOr<HttpAnswer>* last, Request& request) {
                if (last != nullptr) answers.push_back(last->status());
                request = Request{.body = "{}"};
                return sent[static_cast<std::size_t>(id)]++ < 2;
              });
  ASSERT_EQ(answers.size(), 16U);
  for (const absl::Status& s : answers)
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(ms_since(t0), 2500) << "ms: five rounds of 200 ms, not 5 s each";
  EXPECT_EQ(lookups(name), 1);
  // Its failure is every waiter's answer, and is not kept once the lookup
  // has ended: a later call asks again (a call that came as it ended may
  // still have shared it).
  release();
  wait_until_no_lookup_is_held();
  HttpCaller caller(url, std::chrono::milliseconds(1000));
  for (int i = 0; i < 50 && lookups(name) < 2; ++i) {
    const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("cannot resolve " + name));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(lookups(name), 2);
}

TEST_F(NameLookup, CallersOnManyThreadsShareTheOneLookup) {
  // As the relay's delivery threads do, each with its own caller.
  constexpr int kThreads = 4;
  const std::string name = "loopback.threads.hang.invalid";
  LoopbackServer server(answer_ok);
  std::latch started(kThreads + 1);
  std::vector<absl::StatusOr<HttpAnswer>> got(kThreads, absl::UnknownError("no call"));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      HttpCaller caller(Url(server.url("/notify", name)), std::chrono::milliseconds(5000));
      started.arrive_and_wait();
      got[static_cast<std::size_t>(i)] = caller.post("{}", {});
    });
  }
  started.arrive_and_wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // every caller waits by now
  release();
  for (std::thread& t : threads) t.join();
  for (const auto& r : got) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(lookups(name), 1) << "four callers on four threads, one lookup";
  EXPECT_EQ(server.connections(), kThreads);
}

TEST_F(NameLookup, TheFinalityOraclesCallIsBoundedToo) {
  // json_rpc_over_http makes a caller per call: its end must not wait either.
  const idemledger::JsonRpcTransport rpc =
      json_rpc_over_http("http://node.hang.invalid:8545/", 300);
  const auto t0 = Clock::now();
  const absl::StatusOr<std::string> r =
      rpc(R"({"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(ms_since(t0), 1000);
}

TEST_F(NameLookup, AnAddressIsNotLookedUp) {
  LoopbackServer server(answer_ok);
  const int before = held_resolver().all;
  HttpCaller caller(Url(server.url("/notify")), std::chrono::milliseconds(1000));
  const absl::StatusOr<HttpAnswer> r = caller.post("{}", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(held_resolver().all, before) << "getaddrinfo calls: an address needs none";
}

}  // namespace
}  // namespace example
