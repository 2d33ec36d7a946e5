// mock_downstream — the external notification API, switchable to fail, time
// out, or recover on command, that counts what it really received.
//
//   POST /notify    a delivery (Idempotency-Key names the message; the relay
//                   sends X-Relay-Dlq-Retries > 0 for a resend from its DLQ,
//                   and X-Relay-Deadline, when the caller stops waiting)
//   POST /control   ?mode=ok|fail|timeout &failure_percent=N &delay_ms=N
//   GET  /stats     JSON: requests, delivered, unique, duplicates, late,
//                   duplicates_unexplained, failed, max_concurrency (requests
//                   being served at once whose caller still waits: one past
//                   its X-Relay-Deadline is not counted), in_flight (being
//                   served, waited on or not), mode, outage_marks
//   GET  /deliveries JSON: every 2xx in arrival order:
//                   [key, dlq_retries, seq, late]
//
// Like many real APIs it acts on a request it dequeues after the caller gave
// up (a pool busy with hung requests queues new ones): such a 2xx is "late",
// the caller never saw it and sends the message again. A repeat is explained
// when the key had that many late 2xx: duplicates_unexplained = the sum over
// keys of max(0, deliveries - 1 - late ones), what the relay alone repeated.
//
// fail answers 503; timeout holds the request for MOCK_TIMEOUT_HOLD_MS and
// then answers 504 (the client has given up long before); failure_percent
// answers 503 to that share of requests at random even in mode ok. A switch
// to fail or timeout records the request sequence number in outage_marks, so
// a test can tell what arrived after the outage began.
//
// Configuration (environment): MOCK_LISTEN_PORT (0 = any free, logged),
// MOCK_THREADS (64), MOCK_DELAY_MS (0), MOCK_FAILURE_PERCENT (0),
// MOCK_TIMEOUT_HOLD_MS (3000).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../common/service.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

// Binds `server` to 127.0.0.1:`port` (0: any free port) and returns the port;
// a port that cannot be had is a configuration error.
int bind_loopback(httplib::Server& server, long port) {
  const int bound =
      port == 0 ? server.bind_to_any_port("127.0.0.1")
                : (server.bind_to_port("127.0.0.1", static_cast<int>(port)) ? static_cast<int>(port)
                                                                            : -1);
  if (bound < 0) example::config_error("cannot listen on 127.0.0.1:" + std::to_string(port));
  return bound;
}

struct Delivery {
  std::string key;
  long dlq_retries;
  long seq;
  bool late;  // acted on after the caller's X-Relay-Deadline
};

// How often a key was acted on, and how often after its caller gave up.
struct KeyCount {
  long delivered = 0;
  long late = 0;
};

class Downstream {
 public:
  Downstream(long delay_ms, long failure_percent, long hold_ms)
      : delay_ms_(delay_ms), failure_percent_(failure_percent), hold_ms_(hold_ms) {}

  void notify(const httplib::Request& req, httplib::Response& res) {
    const long seq = ++requests_;
    const long deadline = deadline_of(req);
    std::string mode;
    long delay_ms = 0;
    bool unlucky = false;
    {
      std::lock_guard lock(mu_);
      mode = mode_;
      delay_ms = delay_ms_;
      unlucky = failure_percent_ > 0 &&
                std::uniform_int_distribution<long>(0, 99)(random_) < failure_percent_;
      // The sender's bound is on the calls it waits for. A request it gave up
      // on may still be served here (a slow machine, a hung API), and the
      // sender is free to call again, so only requests whose deadline has not
      // passed are counted as served at once.
      waiting_.insert(deadline);
      const long now = absl::ToUnixMillis(absl::Now());
      const long waited_on = std::distance(waiting_.upper_bound(now), waiting_.end());
      max_concurrency_ = std::max(max_concurrency_, waited_on);
    }
    if (mode == "timeout") {
      // Hung: the client gives up long before this answers.
      absl::SleepFor(absl::Milliseconds(hold_ms_));
      fail(res, 504);
    } else {
      if (delay_ms > 0) absl::SleepFor(absl::Milliseconds(delay_ms));
      if (mode == "fail" || unlucky) {
        fail(res, 503);
      } else {
        accept(req, res, seq, deadline);
      }
    }
    std::lock_guard lock(mu_);
    waiting_.erase(waiting_.find(deadline));
  }

  void control(const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu_);
    if (req.has_param("mode")) {
      const std::string mode = req.get_param_value("mode");
      if (mode != "ok" && mode != "fail" && mode != "timeout") {
        res.status = 400;
        res.set_content("mode must be ok, fail or timeout\n", "text/plain");
        return;
      }
      if (mode != "ok" && mode_ == "ok") outage_marks_.push_back(requests_.load());
      mode_ = mode;
    }
    if (req.has_param("failure_percent")) {
      failure_percent_ = std::stol(req.get_param_value("failure_percent"));
    }
    if (req.has_param("delay_ms")) delay_ms_ = std::stol(req.get_param_value("delay_ms"));
    res.set_content("{\"mode\":\"" + mode_ + "\"}\n", "application/json");
  }

  nlohmann::json stats() {
    std::lock_guard lock(mu_);
    long duplicates = 0, late = 0, unexplained = 0;
    for (const auto& [key, n] : delivered_per_key_) {
      duplicates += n.delivered - 1;
      late += n.late;
      unexplained += std::max(0L, n.delivered - 1 - n.late);
    }
    return {{"requests", requests_.load()},
            {"delivered", static_cast<long>(deliveries_.size())},
            {"unique", static_cast<long>(delivered_per_key_.size())},
            {"duplicates", duplicates},
            {"late", late},
            {"duplicates_unexplained", unexplained},
            {"failed", failed_},
            {"max_concurrency", max_concurrency_},
            {"in_flight", static_cast<long>(waiting_.size())},
            {"mode", mode_},
            {"outage_marks", outage_marks_}};
  }

  nlohmann::json deliveries() {
    std::lock_guard lock(mu_);
    nlohmann::json out = nlohmann::json::array();
    for (const Delivery& d : deliveries_) out.push_back({d.key, d.dlq_retries, d.seq, d.late});
    return out;
  }

 private:
  // X-Relay-Deadline (Unix ms), or never for a caller that sent none.
  static long deadline_of(const httplib::Request& req) {
    const std::string deadline = req.get_header_value("X-Relay-Deadline");
    return deadline.empty() ? std::numeric_limits<long>::max()
                            : std::strtol(deadline.c_str(), nullptr, 10);
  }

  void accept(const httplib::Request& req, httplib::Response& res, long seq, long deadline) {
    const std::string key = req.get_header_value("Idempotency-Key");
    if (key.empty()) {
      res.status = 400;
      res.set_content("Idempotency-Key is required\n", "text/plain");
      return;
    }
    const long dlq_retries =
        std::strtol(req.get_header_value("X-Relay-Dlq-Retries").c_str(), nullptr, 10);
    // Judged as the 2xx is decided: the answer leaves right after this.
    const bool late = absl::ToUnixMillis(absl::Now()) > deadline;
    std::lock_guard lock(mu_);
    KeyCount& count = delivered_per_key_[key];
    ++count.delivered;
    count.late += late ? 1 : 0;
    deliveries_.push_back({key, dlq_retries, seq, late});
    res.set_content("{\"ok\":true}\n", "application/json");
  }

  void fail(httplib::Response& res, int status) {
    {
      std::lock_guard lock(mu_);
      ++failed_;
    }
    res.status = status;
    res.set_content("unavailable\n", "text/plain");
  }

  std::atomic<long> requests_{0};
  std::mutex mu_;
  long max_concurrency_ = 0;
  std::multiset<long> waiting_;  // the deadline of every request being served
  std::string mode_ = "ok";
  long delay_ms_;
  long failure_percent_;
  const long hold_ms_;
  long failed_ = 0;
  std::mt19937_64 random_{std::random_device{}()};
  absl::flat_hash_map<std::string, KeyCount> delivered_per_key_;
  std::vector<Delivery> deliveries_;
  std::vector<long> outage_marks_;
};

}  // namespace

int main() {
  const long port = example::env_long("MOCK_LISTEN_PORT", 0, 0, 65535);
  const long threads = example::env_long("MOCK_THREADS", 64, 1, 1024);
  Downstream downstream(example::env_long("MOCK_DELAY_MS", 0, 0, 60'000),
                        example::env_long("MOCK_FAILURE_PERCENT", 0, 0, 100),
                        example::env_long("MOCK_TIMEOUT_HOLD_MS", 3'000, 0, 600'000));
  example::install_stop_handlers();

  httplib::Server server;
  server.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(threads));
  };
  // Keep-alive connections serve many requests, as a real API's do.
  server.set_keep_alive_max_count(1'000'000);
  server.set_tcp_nodelay(true);
  server.Post("/notify", [&](const httplib::Request& req, httplib::Response& res) {
    downstream.notify(req, res);
  });
  server.Post("/control", [&](const httplib::Request& req, httplib::Response& res) {
    downstream.control(req, res);
  });
  server.Get("/stats", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(downstream.stats().dump() + "\n", "application/json");
  });
  server.Get("/deliveries", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(downstream.deliveries().dump() + "\n", "application/json");
  });
  const int bound = bind_loopback(server, port);
  example::log("info", {{"msg", "listening"}, {"port", bound}});
  std::thread stopper([&] {
    while (!example::stop_requested) absl::SleepFor(absl::Milliseconds(50));
    server.stop();
  });
  server.listen_after_bind();
  stopper.join();
  example::log(
      "info",
      {{"msg", "stopped"}, {"stats", downstream.stats()}, {"usage", example::resource_usage()}});
  return 0;
}
