// Boost.Beast behind example::HttpCaller (http_client.hpp says what it
// guarantees); compiled once, into idemledger_example_http.

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>
// (a block of its own, so it stays first)

// Boost 1.74's Asio sees C++20 coroutines only in GCC; clang (with
// libstdc++'s <coroutine>) has them too.
#if defined(__clang__) && defined(__cpp_impl_coroutine) && !defined(BOOST_ASIO_HAS_CO_AWAIT)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <cstdint>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "http_client.hpp"

namespace example {

namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

// The client side of TLS for `url`: the peer's certificate verified against
// the system's CAs (untouched for http://).
boost::asio::ssl::context client_tls_context(const Url& url) {
  boost::asio::ssl::context tls(boost::asio::ssl::context::tls_client);
  if (url.tls) {
    tls.set_verify_mode(boost::asio::ssl::verify_peer);
    tls.set_default_verify_paths();  // honours $SSL_CERT_FILE / $SSL_CERT_DIR
  }
  return tls;
}

using Endpoints = std::vector<boost::asio::ip::tcp::endpoint>;

// A name lookup that a call can stop waiting for. getaddrinfo cannot be cut
// short, and Asio's resolver runs it on a thread that destroying the
// io_context joins; so each lookup here runs on a detached thread of its own,
// and a call waits for it only until its own deadline. Calls to one host and
// port share the lookup under way: a resolver that does not answer holds one
// thread per name, however many calls give up on it. Thread-safe.
class NameLookup {
 public:
  struct Answer {
    boost::system::error_code ec;
    Endpoints endpoints;
  };

  // The lookup of host:port under way, or a new one.
  static absl::StatusOr<std::shared_ptr<NameLookup>> of(const std::string& host,
                                                        const std::string& port) {
    Registry& r = registry();
    const std::string key = host + ":" + port;
    const std::lock_guard lock(r.mu);
    std::weak_ptr<NameLookup>& slot = r.under_way[key];
    if (std::shared_ptr<NameLookup> under_way = slot.lock()) return under_way;
    auto lookup = std::make_shared<NameLookup>();
    try {
      std::thread([lookup, host, port, key] { lookup->run(host, port, key); }).detach();
    } catch (const std::system_error& e) {
      r.under_way.erase(key);
      return absl::UnavailableError("cannot start a name lookup of " + host + ": " + e.what());
    }
    slot = lookup;
    return lookup;
  }

  // The answer, if the lookup has ended; if not, `wake` is cancelled (on its
  // executor) when it ends, until stop_waiting(wake).
  std::optional<Answer> answer_or_wake(boost::asio::steady_timer& wake) {
    const std::lock_guard lock(mu_);
    if (answer_) return answer_;
    if (std::find(waiting_.begin(), waiting_.end(), &wake) == waiting_.end()) {
      waiting_.push_back(&wake);
    }
    return std::nullopt;
  }

  // After this, the lookup does not touch `wake`.
  void stop_waiting(const boost::asio::steady_timer& wake) {
    const std::lock_guard lock(mu_);
    std::erase(waiting_, &wake);
  }

 private:
  struct Registry {
    std::mutex mu;
    std::unordered_map<std::string, std::weak_ptr<NameLookup>> under_way;
  };
  // Never destroyed: a lookup may outlive main().
  static Registry& registry() {
    static auto* r = new Registry;
    return *r;
  }

  void run(const std::string& host, const std::string& port, const std::string& key) {
    Answer answer;
    try {
      boost::asio::io_context io;  // a synchronous lookup: no thread of Asio's
      boost::asio::ip::tcp::resolver resolver(io);
      for (const auto& entry : resolver.resolve(host, port, answer.ec)) {
        answer.endpoints.push_back(entry.endpoint());
      }
    } catch (...) {  // an allocation's failure: the lookup failed
      answer.ec = boost::asio::error::no_memory;
      answer.endpoints.clear();
    }
    {
      // The entry is this lookup's: of() replaces only an expired one, and
      // this thread keeps this lookup alive. The next call looks again.
      Registry& r = registry();
      const std::lock_guard lock(r.mu);
      r.under_way.erase(key);
    }
    const std::lock_guard lock(mu_);
    answer_ = std::move(answer);
    for (boost::asio::steady_timer* wake : waiting_) {
      boost::asio::post(wake->get_executor(), [wake] { wake->cancel(); });
    }
    waiting_.clear();
  }

  std::mutex mu_;
  std::optional<Answer> answer_;
  std::vector<boost::asio::steady_timer*> waiting_;
};

// One kept-alive connection to one URL and its calls, on an executor the
// owner runs: HttpCaller's own io_context, or run_senders' shared one. A call
// (call()) is bounded by one deadline, and ends by one rule: a call out of time
// answers kDeadlineExceeded, and a failed call, or one whose answer did not
// allow keeping the connection, leaves none for the next call.
class Connection {
 public:
  Connection(boost::asio::any_io_executor ex, const Url& url, boost::asio::ssl::context& tls,
             std::size_t max_response)
      : ex_(std::move(ex)),
        url_(url),
        tls_context_(tls),
        max_response_(max_response),
        deadline_(ex_),
        wake_(ex_) {}
  ~Connection() {
    if (lookup_) lookup_->stop_waiting(wake_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void prepare(std::string body, const Headers& headers) {
    namespace http = boost::beast::http;
    request_ = http::request<http::string_body>(http::verb::post, url_.target, 11);
    request_.set(http::field::host, url_.host);
    request_.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) request_.set(name, value);
    request_.body() = std::move(body);
    request_.keep_alive(true);
    request_.prepare_payload();
  }

  // Sends the prepared request and reads its answer within `timeout` from
  // now, the name lookup and the connection included. At the deadline the
  // sockets are closed, a lookup under way is left to end on its own thread
  // (NameLookup), and the call ends with its operations cancelled. An
  // answer whole before then is kept, and so is one already waiting in the
  // socket when the deadline is seen (the loop was busy and woke late:
  // thrown away, a message the server accepted would be sent again). That
  // second part rests on Asio's reactor: in one wake-up it performs the reads
  // that are ready before it runs the timers that expired, and a read that
  // completed is not undone by closing its socket.
  // RunSenders.AnAnswerThatArrivedWhileTheLoopWasBusyIsTaken pins it.
  boost::asio::awaitable<absl::StatusOr<HttpAnswer>> call(std::chrono::milliseconds timeout) {
    const std::uint64_t id = ++calls_;
    expired_ = false;
    deadline_.expires_after(timeout);
    // The handler may run after this call ended (the deadline fired while the
    // answer's completion was queued): it reads only members and `id`.
    deadline_.async_wait([this, id](const boost::system::error_code& ec) {
      if (ec || id != calls_ || done_ == id) return;
      expired_ = true;
      close_sockets();
      wake_.cancel();  // a name lookup is waited for no longer
    });
    absl::StatusOr<HttpAnswer> result = absl::UnavailableError("call failed");
    std::exception_ptr failed;  // an allocation's failure: the call ends too
    try {
      result = co_await exchange();
    } catch (...) {
      failed = std::current_exception();
    }
    done_ = id;
    deadline_.cancel();
    if (expired_) {
      reuse_ = false;
      if (!result.ok()) {
        result = absl::DeadlineExceededError("no whole answer within " +
                                             std::to_string(timeout.count()) + " ms");
      }
    }
    if (!result.ok() || !reuse_) forget();
    if (failed) std::rethrow_exception(failed);
    co_return result;
  }

 private:
  using Tcp = boost::beast::tcp_stream;
  using Tls = boost::beast::ssl_stream<boost::beast::tcp_stream>;

  // Connects if need be, sends the prepared request, reads the answer.
  boost::asio::awaitable<absl::StatusOr<HttpAnswer>> exchange() {
    namespace asio = boost::asio;
    namespace http = boost::beast::http;
    boost::beast::error_code ec;
    const auto step = [&ec] { return asio::redirect_error(asio::use_awaitable, ec); };
    if (!tcp_ && !tls_) {
      absl::StatusOr<Endpoints> endpoints = co_await resolve();
      if (!endpoints.ok()) co_return endpoints.status();
      if (url_.tls) {
        tls_.emplace(ex_, tls_context_);
        co_await boost::beast::get_lowest_layer(*tls_).async_connect(*endpoints, step());
        if (ec) co_return connection_failed(ec);
        // The name the certificate must carry, and SNI for virtual hosts.
        tls_->set_verify_callback(asio::ssl::host_name_verification(url_.host));
        SSL_set_tlsext_host_name(tls_->native_handle(), url_.host.c_str());
        co_await tls_->async_handshake(asio::ssl::stream_base::client, step());
        if (ec)
          co_return absl::UnavailableError("TLS handshake with " + url_.host +
                                           " failed: " + ec.message());
      } else {
        tcp_.emplace(ex_);
        co_await tcp_->async_connect(*endpoints, step());
        if (ec) co_return connection_failed(ec);
        tcp_->socket().set_option(asio::ip::tcp::no_delay(true), ec);
      }
    }
    http::response_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(max_response_, 16384)));
    parser.body_limit(max_response_);
    // The header first, and its Content-Length checked here: Beast 1.74's
    // response parser drops its own body_limit error when the header and the
    // first body bytes arrive in one read (finish_header sets the body state
    // before it checks, and the eager loop clears the error). Chunked bodies
    // are held to body_limit as they arrive.
    const auto over = [this] {
      return absl::UnavailableError("answer over " + std::to_string(max_response_) + " bytes");
    };
    if (tls_) {
      co_await http::async_write(*tls_, request_, step());
      if (!ec) co_await http::async_read_header(*tls_, buffer_, parser, step());
    } else {
      co_await http::async_write(*tcp_, request_, step());
      if (!ec) co_await http::async_read_header(*tcp_, buffer_, parser, step());
    }
    if (!ec && parser.content_length().value_or(0) > max_response_) co_return over();
    if (!ec && !parser.is_done()) {
      if (tls_) {
        co_await http::async_read(*tls_, buffer_, parser, step());
      } else {
        co_await http::async_read(*tcp_, buffer_, parser, step());
      }
    }
    if (ec == http::error::body_limit || ec == http::error::header_limit) co_return over();
    if (ec) co_return absl::UnavailableError("no answer: " + ec.message());
    reuse_ = parser.get().keep_alive();
    co_return HttpAnswer{.status = static_cast<int>(parser.get().result_int()),
                         .body = std::move(parser.get().body())};
  }

  // The URL's host as addresses: at once for an address, else by a lookup
  // waited for until it ends or the deadline passes, whichever is first (so
  // no connection is begun after the deadline either).
  boost::asio::awaitable<absl::StatusOr<Endpoints>> resolve() {
    boost::system::error_code ec;
    const boost::asio::ip::address address = boost::asio::ip::make_address(url_.host, ec);
    std::uint16_t port = 0;
    const char* end = url_.port.data() + url_.port.size();
    const auto [parsed_to, port_error] = std::from_chars(url_.port.data(), end, port);
    if (!ec && port_error == std::errc() && parsed_to == end) {
      co_return Endpoints{{address, port}};
    }
    absl::StatusOr<std::shared_ptr<NameLookup>> lookup = NameLookup::of(url_.host, url_.port);
    if (!lookup.ok()) co_return lookup.status();
    lookup_ = *std::move(lookup);
    std::optional<NameLookup::Answer> answer;
    while (!(answer = lookup_->answer_or_wake(wake_)) && !expired_) {
      wake_.expires_at(boost::asio::steady_timer::time_point::max());
      co_await wake_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    lookup_->stop_waiting(wake_);
    lookup_.reset();
    if (expired_) co_return absl::DeadlineExceededError("the name lookup of " + url_.host);
    if (answer->ec) {
      co_return absl::UnavailableError("cannot resolve " + url_.host + ": " + answer->ec.message());
    }
    co_return std::move(answer->endpoints);
  }

  void close_sockets() {
    boost::beast::error_code ignored;
    if (tcp_) tcp_->socket().close(ignored);
    if (tls_) boost::beast::get_lowest_layer(*tls_).socket().close(ignored);
  }

  // The next call connects anew.
  void forget() {
    close_sockets();
    tcp_.reset();
    tls_.reset();
    buffer_.clear();
    reuse_ = false;
  }

  static absl::Status connection_failed(const boost::beast::error_code& ec) {
    return absl::UnavailableError("connection failed: " + ec.message());
  }

  boost::asio::any_io_executor ex_;
  const Url& url_;
  boost::asio::ssl::context& tls_context_;
  const std::size_t max_response_;
  std::optional<Tcp> tcp_;
  std::optional<Tls> tls_;
  boost::beast::flat_buffer buffer_;
  boost::beast::http::request<boost::beast::http::string_body> request_;
  bool reuse_ = false;  // the last answer allowed keeping the connection
  // The deadline: the calls made, the last one that ended, and whether the
  // one in flight ran out of time.
  boost::asio::steady_timer deadline_;
  std::uint64_t calls_ = 0;
  std::uint64_t done_ = 0;
  bool expired_ = false;
  // The name lookup a call waits for, and what its end (or the deadline) cancels.
  std::shared_ptr<NameLookup> lookup_;
  boost::asio::steady_timer wake_;
};

}  // namespace

class HttpCaller::Impl {
 public:
  Impl(Url url, std::chrono::milliseconds timeout, std::size_t max_response)
      : url_(std::move(url)),
        timeout_(timeout),
        connection_(io_.get_executor(), url_, tls_context_, max_response) {}

  absl::StatusOr<HttpAnswer> post(std::string body, const Headers& headers) {
    connection_.prepare(std::move(body), headers);
    std::optional<absl::StatusOr<HttpAnswer>> result;
    boost::asio::co_spawn(io_, connection_.call(timeout_),
                          [&](const std::exception_ptr& failed, absl::StatusOr<HttpAnswer> answer) {
                            result =
                                failed ? absl::UnavailableError("call failed") : std::move(answer);
                          });
    io_.restart();
    io_.run();  // the call's deadline bounds it
    return std::move(result).value_or(absl::UnavailableError("call did not end"));
  }

 private:
  const Url url_;
  const std::chrono::milliseconds timeout_;
  boost::asio::io_context io_;
  boost::asio::ssl::context tls_context_ = client_tls_context(url_);
  Connection connection_;
};

void run_senders(const Url& url, int senders, std::chrono::milliseconds timeout,
                 const NextRequest& next) {
  boost::asio::io_context io(1);
  boost::asio::ssl::context tls = client_tls_context(url);
  std::vector<std::unique_ptr<Connection>> connections;
  connections.reserve(static_cast<std::size_t>(senders));
  for (int i = 0; i < senders; ++i) {
    connections.push_back(
        std::make_unique<Connection>(io.get_executor(), url, tls, kMaxResponseBytes));
  }
  const auto sender = [&](int id) -> boost::asio::awaitable<void> {
    Connection& c = *connections[static_cast<std::size_t>(id)];
    boost::asio::steady_timer pause(io);
    Request request;
    std::optional<absl::StatusOr<HttpAnswer>> last;
    while (next(id, last ? &*last : nullptr, request)) {
      if (request.delay > absl::ZeroDuration()) {
        pause.expires_after(absl::ToChronoNanoseconds(request.delay));
        boost::system::error_code ignored;
        co_await pause.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ignored));
      }
      c.prepare(request.body, request.headers);
      last = co_await c.call(timeout);
    }
  };
  for (int i = 0; i < senders; ++i) {
    // What a sender throws (its callback's, or an allocation's) leaves run().
    boost::asio::co_spawn(io, sender(i), [](const std::exception_ptr& failed) {
      if (failed) std::rethrow_exception(failed);
    });
  }
  io.run();
}

HttpCaller::HttpCaller(Url url, std::chrono::milliseconds timeout, std::size_t max_response)
    : impl_(std::make_unique<Impl>(std::move(url), timeout, max_response)) {}

HttpCaller::~HttpCaller() = default;

absl::StatusOr<HttpAnswer> HttpCaller::post(
    std::string body, const std::vector<std::pair<std::string, std::string>>& headers) {
  return impl_->post(std::move(body), headers);
}

absl::Status HttpRelayTransport::operator()(const idemledger::RelayMessage& m) const {
  // One caller per thread, kept between calls for keep-alive.
  thread_local std::unique_ptr<HttpCaller> caller;
  thread_local const HttpRelayTransport* owner = nullptr;
  if (!caller || owner != this) {
    caller = std::make_unique<HttpCaller>(url_, std::chrono::milliseconds(timeout_ms_));
    owner = this;
  }
  std::string body =
      R"({"topic":)" + nlohmann::json(m.topic).dump() + R"(,"message":)" + m.payload + "}";
  // The downstream should not act on this call after the caller stops
  // waiting, nor after the relay's claim ends (a process paused past it).
  const int64_t deadline_ms =
      std::min(absl::ToUnixMillis(absl::Now()) + timeout_ms_, absl::ToUnixMillis(m.claimed_until));
  return classify_http(
      caller->post(std::move(body), {{"Idempotency-Key", "outbox-" + std::to_string(m.outbox_id)},
                                     {"X-Relay-Topic", m.topic},
                                     {"X-Relay-Dlq-Retries", std::to_string(m.dlq_retries)},
                                     {"X-Relay-Deadline", std::to_string(deadline_ms)}}));
}

idemledger::JsonRpcTransport json_rpc_over_http(const std::string& url, long timeout_ms) {
  return [url = Url(url), timeout_ms](std::string_view body) -> absl::StatusOr<std::string> {
    HttpCaller caller(url, std::chrono::milliseconds(timeout_ms));  // rare calls: no keep-alive
    absl::StatusOr<HttpAnswer> res = caller.post(std::string(body), {});
    if (absl::Status s = classify_http(res); !s.ok()) {
      return absl::IsInvalidArgument(s) ? absl::UnavailableError(s.message()) : s;
    }
    return std::move(res->body);
  };
}

}  // namespace example
