// The library's outbound HTTP calls, which the host provides, on Boost.Beast:
// the relay's delivery (idemledger::DeliveryTransport, used by
// notification_relay and the relay benchmark) and the finality oracle's
// JSON-RPC POST (idemledger::JsonRpcTransport, used by outbox_worker); and
// the provider simulator's closed-loop senders on one thread (run_senders).
//
// Every call is bounded as a whole, not per read:
// - one deadline from the first byte of the name lookup to the last byte of
//   the answer (a server that drips one byte every 0.4 s cannot stretch a
//   500 ms call to 8 s, and so cannot outlive the caller's lease); an answer
//   already whole in the socket when the deadline is seen is taken, not
//   thrown away (the caller's thread woke late; a message the server accepted
//   would be sent again). A name lookup that does not end by the deadline is
//   not waited for: getaddrinfo cannot be cut short, so it runs on a thread
//   of its own that nothing joins, and calls to one host and port share the
//   one under way (a resolver that does not answer holds one thread per name
//   for its own timeout, not the calls). No connection is begun after the
//   deadline. An address in the URL is not looked up;
// - the answer's header and body are capped in bytes while they are read
//   (kMaxResponseBytes; a 300 MB answer costs at most that much);
// - https:// with the peer's certificate verified against the system's CAs
//   (or $SSL_CERT_FILE) and its name checked against the URL's host.
//
// Both transports map an answer the same way: 2xx OK; 408, 429, 5xx, a
// refused connection, an oversized answer kUnavailable; no whole answer in
// time kDeadlineExceeded (retryable); any other 4xx kInvalidArgument (a
// refusal); a certificate that does not verify kUnavailable, naming it.
#ifndef IDEMLEDGER_EXAMPLES_COMMON_HTTP_CLIENT_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_HTTP_CLIENT_HPP

// Boost.Beast lives in http_client.cpp alone (library idemledger_example_http),
// compiled once rather than in every program that makes a call.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/eth/finality.hpp"
#include "idemledger/relay/relay.hpp"
#include "service.hpp"

namespace example {

// The most an answer may be, header and body together.
inline constexpr std::size_t kMaxResponseBytes = 1 << 20;

// "http[s]://host[:port]/path"; a malformed URL is a configuration error.
struct Url {
  bool tls = false;
  std::string host;
  std::string port;
  std::string target;

  explicit Url(const std::string& url) {
    const std::size_t scheme = url.find("://");
    const std::string s = scheme == std::string::npos ? "" : url.substr(0, scheme);
    const std::size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if ((s != "http" && s != "https") || slash == std::string::npos) {
      config_error("a URL must look like http[s]://host[:port]/path, got \"" + url + "\"");
    }
    tls = s == "https";
    const std::string authority = url.substr(scheme + 3, slash - scheme - 3);
    const std::size_t colon = authority.rfind(':');
    host = colon == std::string::npos ? authority : authority.substr(0, colon);
    port = colon == std::string::npos ? (tls ? "443" : "80") : authority.substr(colon + 1);
    target = url.substr(slash);
    if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
      config_error("a URL must look like http[s]://host[:port]/path, got \"" + url + "\"");
    }
  }
};

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// The answer as the transports' contract wants it (see the top of the file).
inline absl::Status classify_http(const absl::StatusOr<HttpAnswer>& res) {
  if (!res.ok()) return res.status();
  const int status = res->status;
  if (status >= 200 && status < 300) return absl::OkStatus();
  const std::string what = "HTTP " + std::to_string(status);
  if (status == 408 || status == 429 || status >= 500) return absl::UnavailableError(what);
  return absl::InvalidArgumentError(what);
}

// POSTs to one URL, over one kept-alive connection (re-opened after any
// failure). Not thread-safe: one per thread.
class HttpCaller {
 public:
  HttpCaller(Url url, std::chrono::milliseconds timeout,
             std::size_t max_response = kMaxResponseBytes);
  ~HttpCaller();
  HttpCaller(const HttpCaller&) = delete;
  HttpCaller& operator=(const HttpCaller&) = delete;

  absl::StatusOr<HttpAnswer> post(std::string body,
                                  const std::vector<std::pair<std::string, std::string>>& headers);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// A request one of run_senders' senders sends next, after `delay`.
struct Request {
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  absl::Duration delay = absl::ZeroDuration();
};

// Called with a sender's index, the answer to its last request (nullptr
// before its first), and that request: sets the next one (or leaves it, to
// send it again), and returns false when the sender has no more to send.
using NextRequest =
    std::function<bool(int sender, const absl::StatusOr<HttpAnswer>* last, Request& request)>;

// Closed-loop load on the calling thread: `senders` kept-alive connections to
// `url`, each sending its next request as soon as its last one was answered
// (or after the delay the request asks for). One thread and one event loop
// for all of them, not a thread (and a wake-up of its own) per sender: a
// load generator that shares the cores it measures costs them less. Each
// exchange is bounded as HttpCaller's are (one deadline for the whole call,
// the answer capped at kMaxResponseBytes). `next` runs on this thread; what
// it throws leaves run_senders.
void run_senders(const Url& url, int senders, std::chrono::milliseconds timeout,
                 const NextRequest& next);

// POSTs {"topic": ..., "message": <the outbox row's JSON, unchanged>} with
// Idempotency-Key (outbox-<id>), X-Relay-Topic, X-Relay-Dlq-Retries and
// X-Relay-Deadline: the Unix time in milliseconds at which this attempt stops
// waiting for its answer, or the relay's claim on the message ends if that
// is sooner (RelayMessage::claimed_until: only a process paused past its
// lease gets that close to it). Past it the relay counts the call failed, or
// another replica may hold the message, and it is sent again later, so an
// API that acts on a request it dequeues after that moment delivers it twice;
// it may refuse such a request unacted (504), or act on it and let the
// Idempotency-Key tell the two apart.
class HttpRelayTransport {
 public:
  HttpRelayTransport(const std::string& url, long timeout_ms)
      : url_text_(url), url_(url), timeout_ms_(timeout_ms) {}

  absl::Status operator()(const idemledger::RelayMessage& m) const;

  const std::string& url() const { return url_text_; }
  // The longest one delivery can take: the whole-call deadline.
  long worst_case_ms() const { return timeout_ms_; }

 private:
  std::string url_text_;
  Url url_;
  long timeout_ms_;
};

// A JSON-RPC POST for EthFinalityOracle: the request body in, the response
// body out; a refusal is reported as the node being unusable (kUnavailable).
idemledger::JsonRpcTransport json_rpc_over_http(const std::string& url, long timeout_ms);

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_HTTP_CLIENT_HPP
