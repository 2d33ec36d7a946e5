// A small HTTP/1.1 server on Boost.Beast for a service's front door, built so
// that it holds by itself, with no proxy in front:
//
// - Every limit holds before a body is read: a POST must say how long it is
//   (Content-Length; chunked bodies are refused: 411), and no longer than
//   max_body (413); a compressed body is refused (Content-Encoding: 415);
//   request line + headers are capped in bytes and in count (431).
// - One deadline for the whole request, from the moment the connection
//   waits for it to its last body byte (408 if it had started; a connection
//   that sent nothing is just closed).
// - Connections are served by a few I/O threads, asynchronously: a slow or
//   idle client costs a socket and a small buffer, never a thread. At
//   max_connections the longest-idle connection is closed for a new one (if
//   none is idle, the new one is refused).
// - Handlers (which may block on the database) run on their own thread pool,
//   one request per connection at a time; an exception in one becomes a 500
//   with a generic body and is logged, its text never sent.
// - Or, for a front door that must not spend a thread per waiting request,
//   an AsyncHandler: called on the I/O thread that read the request, it must
//   not block; it answers now or later, from any thread, through the
//   Responder it is given (dropped unanswered, the Responder answers 500).
//
// Thread-safety: start() and stop() from one thread; the handler is called
// from several threads at once.
#ifndef IDEMLEDGER_EXAMPLES_COMMON_HTTP_SERVER_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_HTTP_SERVER_HPP

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>
// (a block of its own, so it stays first)

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "service.hpp"

namespace example::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct Limits {
  std::size_t max_body = 64 * 1024;                   // Content-Length above: 413, nothing read
  std::size_t max_header_bytes = 8 * 1024;            // request line + headers: 431
  std::size_t max_header_count = 64;                  // header fields: 431
  std::chrono::milliseconds request_timeout{10'000};  // waiting + reading one request: 408
  std::chrono::milliseconds write_timeout{10'000};    // writing one answer
  std::size_t max_connections = 1024;                 // then the longest-idle one is closed
};

struct Request {
  std::string method;
  std::string target;
  std::string peer;  // the client's address
  std::string body;
  const bhttp::fields* headers = nullptr;  // valid during the handler call
  std::string header(std::string_view name) const {
    const auto it = headers->find(beast::string_view(name.data(), name.size()));
    return it == headers->end() ? std::string() : std::string(it->value());
  }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

using Handler = std::function<Response(const Request&)>;

// Sends one request's answer, once, from any thread. Destroyed without
// having answered (a handler that forgot, or threw), it answers 500: no
// client waits for an answer nobody will give.
class Responder {
 public:
  using Send = std::function<void(Response)>;
  explicit Responder(Send send) : send_(std::move(send)) {}
  Responder(Responder&& other) noexcept : send_(std::exchange(other.send_, nullptr)) {}
  Responder& operator=(Responder&&) = delete;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder() {
    if (send_) send_(Response{.status = 500, .body = R"({"error":"internal error"})"});
  }
  void operator()(Response response) {
    if (Send send = std::exchange(send_, nullptr)) send(std::move(response));
  }

 private:
  Send send_;
};

// The request is the handler's to keep (its `headers` are valid during the
// call only); the Responder answers it.
using AsyncHandler = std::function<void(Request, Responder)>;

// Answers given on this thread while an AnswerBatch lives go to the servers'
// I/O threads together when it ends: one hand-off (one wake-up of an I/O
// thread) per server, instead of one per answer. For a thread that answers
// many requests at once, as a group commit does; each answer is still
// written on its own connection's strand, in the order given. Without a
// batch, an answer is handed over at once. Batches nest: each sends its own.
class AnswerBatch {
 public:
  AnswerBatch() : outer_(std::exchange(current_, this)) {}
  ~AnswerBatch() {
    current_ = outer_;
    for (Group& group : groups_) {
      std::shared_ptr<std::vector<std::function<void()>>> sends;
      try {
        sends = std::make_shared<std::vector<std::function<void()>>>(std::move(group.sends));
        asio::post(*group.io, [sends] {
          for (const std::function<void()>& send : *sends) send();
        });
      } catch (...) {  // (out of memory) handed over one by one instead
        for (const std::function<void()>& send : sends ? *sends : group.sends) send();
      }
    }
  }
  AnswerBatch(const AnswerBatch&) = delete;
  AnswerBatch& operator=(const AnswerBatch&) = delete;

  // `send` hands one answer to `io`'s threads: now, or with this thread's batch.
  static void send_or_join(asio::io_context& io, std::function<void()> send) {
    if (current_ == nullptr) return send();
    std::vector<Group>& groups = current_->groups_;
    auto group =
        std::find_if(groups.begin(), groups.end(), [&io](const Group& g) { return g.io == &io; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{.io = &io});
    group->sends.push_back(std::move(send));
  }

 private:
  struct Group {  // one server's answers, in the order given: one post
    asio::io_context* io;
    std::vector<std::function<void()>> sends;
  };
  static inline thread_local AnswerBatch* current_ = nullptr;
  AnswerBatch* const outer_;
  std::vector<Group> groups_;
};

// What a request's header alone decides, before any of its body is read:
// nullopt to go on and read the body, else the refusal to answer with.
// Pure, so it is fuzzed on its own (tests/fuzz).
inline std::optional<Response> check_header(const bhttp::request_parser<bhttp::string_body>& p,
                                            const Limits& limits) {
  const auto refuse = [](int status, const char* why) {
    return Response{.status = status, .body = std::string(R"({"error":")") + why + "\"}"};
  };
  const bhttp::request_header<>& h = p.get();
  std::size_t fields = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (++fields > limits.max_header_count) return refuse(431, "too many header fields");
  }
  if (h.find(bhttp::field::content_encoding) != h.end()) {
    return refuse(415, "Content-Encoding is not accepted; send the body as it was signed");
  }
  if (p.chunked()) return refuse(411, "chunked bodies are not accepted; send Content-Length");
  if (h.method() == bhttp::verb::post) {
    if (!p.content_length()) return refuse(411, "Content-Length is required");
    if (*p.content_length() > limits.max_body) return refuse(413, "body too large");
  } else if (p.content_length().value_or(0) > 0) {
    return refuse(413, "this method takes no body");
  }
  return std::nullopt;
}

class Server {
 public:
  Server(std::string name, Limits limits, std::size_t handler_threads, Handler handler)
      : name_(std::move(name)),
        limits_(limits),
        handler_(std::move(handler)),
        handlers_(std::make_unique<asio::thread_pool>(handler_threads)) {}
  Server(std::string name, Limits limits, AsyncHandler handler)
      : name_(std::move(name)), limits_(limits), async_handler_(std::move(handler)) {}
  ~Server() { stop(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds `host`:`port` (0: any free port) and serves on `io_threads`
  // threads; returns the bound port. A port that cannot be had exits 2.
  int start(const std::string& host, long port, int io_threads) {
    beast::error_code ec;
    const tcp::endpoint at(asio::ip::make_address(host, ec), static_cast<unsigned short>(port));
    if (ec) config_error(name_ + ": bad listen address " + host);
    acceptor_.open(at.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) config_error(name_ + ": cannot listen on " + host + ":" + std::to_string(port));
    accept();
    for (int i = 0; i < io_threads; ++i) io_threads_.emplace_back([this] { io_.run(); });
    return acceptor_.local_endpoint().port();
  }

  // Stops accepting, lets the requests in hand finish (up to `grace`), then
  // stops. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5'000)) {
    if (stopped_.exchange(true)) return;
    asio::post(acceptor_.get_executor(), [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    close_idle();
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (busy_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (handlers_) handlers_->join();
    io_.stop();
    for (std::thread& t : io_threads_) t.join();
    io_threads_.clear();
  }

 private:
  class Session;
  using Registry = std::list<std::weak_ptr<Session>>;

  class Session : public std::enable_shared_from_this<Session> {
   public:
    Session(Server& server, tcp::socket socket)
        : server_(server),
          socket_(std::move(socket)),
          timer_(socket_.get_executor()),
          buffer_(server.limits_.max_header_bytes + server.limits_.max_body) {
      beast::error_code ec;
      const tcp::endpoint remote = socket_.remote_endpoint(ec);
      peer_ = ec ? std::string("unknown") : remote.address().to_string();
    }

    void start(Registry::iterator place) {
      place_ = place;
      read_next();
    }

    bool idle() const { return idle_.load(); }

    // From any thread: closes the connection on its own executor (and is no
    // longer idle, so it is not chosen to make room twice).
    void close_soon() {
      idle_ = false;
      asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close(); });
    }

   private:
    void read_next() {
      idle_ = true;
      timed_out_ = false;
      parser_.emplace();
      parser_->header_limit(static_cast<std::uint32_t>(server_.limits_.max_header_bytes));
      parser_->body_limit(server_.limits_.max_body);
      arm(server_.limits_.request_timeout);
      bhttp::async_read_header(
          socket_, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
    }

    void arm(std::chrono::milliseconds after) {
      timer_.expires_after(after);
      timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (ec) return;  // cancelled: the operation finished in time
        self->timed_out_ = true;
        beast::error_code ignored;
        self->socket_.cancel(ignored);
      });
    }

    bool started() const { return parser_ && (parser_->got_some() || buffer_.size() > 0); }

    void on_header(beast::error_code ec) {
      idle_ = false;
      if (ec) return on_read_error(ec);
      if (std::optional<Response> refused = check_header(*parser_, server_.limits_)) {
        return write(*std::move(refused), /*close_after=*/true);
      }
      if (parser_->is_done()) return dispatch();
      bhttp::async_read(socket_, buffer_, *parser_,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) return self->on_read_error(ec);
                          self->dispatch();
                        });
    }

    void on_read_error(beast::error_code ec) {
      if (timed_out_) {
        if (started()) return write(generic(408, "request not received in time"), true);
        return close();  // an idle connection: nothing to answer
      }
      if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
        return close();
      }
      if (ec == bhttp::error::header_limit) return write(generic(431, "headers too large"), true);
      if (ec == bhttp::error::body_limit) return write(generic(413, "body too large"), true);
      return write(generic(400, "malformed HTTP request"), true);
    }

    void dispatch() {
      timer_.cancel();
      ++server_.busy_;
      auto request = std::make_shared<bhttp::request<bhttp::string_body>>(parser_->release());
      if (server_.async_handler_) return dispatch_async(*request);
      asio::post(*server_.handlers_, [self = shared_from_this(), request] {
        Response response;
        try {
          response = self->server_.handler_(self->request_of(*request));
        } catch (const std::exception& e) {
          log("error",
              {{"msg", "handler failed"}, {"server", self->server_.name_}, {"error", e.what()}});
          response = generic(500, "internal error");
        } catch (...) {
          log("error", {{"msg", "handler failed"}, {"server", self->server_.name_}});
          response = generic(500, "internal error");
        }
        const bool close_after = !request->keep_alive();
        asio::post(self->socket_.get_executor(),
                   [self, response = std::move(response), close_after]() mutable {
                     self->write(std::move(response), close_after, /*answers_dispatched=*/true);
                   });
      });
    }

    // What a handler sees of `request` (its body moved out; its headers
    // borrowed, valid while `request` lives).
    Request request_of(bhttp::request<bhttp::string_body>& request) const {
      return Request{.method = std::string(request.method_string()),
                     .target = std::string(request.target()),
                     .peer = peer_,
                     .body = std::move(request.body()),
                     .headers = &request.base()};
    }

    // On this session's executor: the handler takes the request here, and
    // its answer comes back here from whichever thread gives it.
    void dispatch_async(bhttp::request<bhttp::string_body>& request) {
      const bool close_after = !request.keep_alive();
      Responder respond([self = shared_from_this(), close_after](Response response) {
        AnswerBatch::send_or_join(self->server_.io_,
                                  [self, response = std::move(response), close_after]() mutable {
                                    self->write_on_strand(std::move(response), close_after);
                                  });
      });
      try {
        server_.async_handler_(request_of(request), std::move(respond));
      } catch (const std::exception& e) {  // `respond`, if still here, answers 500
        log("error", {{"msg", "handler failed"}, {"server", server_.name_}, {"error", e.what()}});
      } catch (...) {
        log("error", {{"msg", "handler failed"}, {"server", server_.name_}});
      }
    }

    // From any thread: writes a dispatched request's answer on this
    // connection's strand (at once if called there).
    void write_on_strand(Response response, bool close_after) {
      asio::dispatch(
          socket_.get_executor(),
          [self = shared_from_this(), response = std::move(response), close_after]() mutable {
            self->write(std::move(response), close_after, /*answers_dispatched=*/true);
          });
    }

    static Response generic(int status, const char* why) {
      return Response{.status = status, .body = std::string(R"({"error":")") + why + "\"}"};
    }

    void write(Response r, bool close_after, bool answers_dispatched = false) {
      idle_ = false;
      if (server_.stopped_) close_after = true;
      auto out = std::make_shared<bhttp::response<bhttp::string_body>>(
          static_cast<bhttp::status>(r.status), 11);
      out->set(bhttp::field::content_type, r.content_type);
      for (const auto& [name, value] : r.headers) out->set(name, value);
      out->body() = std::move(r.body);
      out->keep_alive(!close_after);
      out->prepare_payload();
      timed_out_ = false;
      arm(server_.limits_.write_timeout);
      bhttp::async_write(socket_, *out,
                         [self = shared_from_this(), out, close_after, answers_dispatched](
                             beast::error_code ec, std::size_t) {
                           self->timer_.cancel();
                           if (answers_dispatched) --self->server_.busy_;
                           if (ec) return self->close();
                           if (close_after) return self->linger_then_close();
                           self->server_.touch(self->place_);
                           self->read_next();
                         });
    }

    void close() {
      beast::error_code ignored;
      timer_.cancel();
      socket_.shutdown(tcp::socket::shutdown_both, ignored);
      socket_.close(ignored);
    }

    // After an answer that ends the connection: stop sending, then read and
    // drop what the client still sends for a moment (at most 1 s, 1 MiB), so
    // a client mid-upload reads the answer instead of a reset.
    void linger_then_close() {
      beast::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      timed_out_ = false;
      arm(std::chrono::milliseconds(1000));
      discard();
    }
    void discard() {
      socket_.async_read_some(asio::buffer(drain_),
                              [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                                self->drained_ += n;
                                if (ec || self->drained_ > (std::size_t{1} << 20))
                                  return self->close();
                                self->discard();
                              });
    }

    Server& server_;
    tcp::socket socket_;
    asio::steady_timer timer_;
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    std::string peer_;
    Registry::iterator place_;
    std::atomic<bool> idle_{true};
    bool timed_out_ = false;
    std::array<char, 4096> drain_{};
    std::size_t drained_ = 0;
  };

  void accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || stopped_) return;
      if (!ec) {
        admit(std::move(s));
        return accept();
      }
      // Out of descriptors (or another failure): pause instead of spinning.
      accept_pause_.expires_after(std::chrono::milliseconds(50));
      accept_pause_.async_wait([this](beast::error_code) { accept(); });
    });
  }

  void admit(tcp::socket socket) {
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::shared_ptr<Session> session, victim;
    Registry::iterator place;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Entries of closed connections go here, under the lock. (A Session
      // never takes the lock as it dies: its last owner may be a loop below,
      // holding it.)
      sessions_.remove_if([](const std::weak_ptr<Session>& w) { return w.expired(); });
      if (sessions_.size() >= limits_.max_connections) {
        // The longest-idle connection makes room (the registry is ordered by
        // last activity); if every one is mid-request, the newcomer waits
        // for nobody: it is refused.
        for (const std::weak_ptr<Session>& w : sessions_) {
          if (std::shared_ptr<Session> s = w.lock(); s && s->idle()) {
            victim = std::move(s);
            break;
          }
        }
        if (!victim) {
          socket.close(ignored);
          return;
        }
        victim->close_soon();
      }
      session = std::make_shared<Session>(*this, std::move(socket));
      place = sessions_.insert(sessions_.end(), session);
    }
    session->start(place);
  }

  // A connection that answered moves to the back: the front is the longest idle.
  void touch(Registry::iterator place) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.splice(sessions_.end(), sessions_, place);
  }

  // Closes every connection waiting for a request (at stop).
  void close_idle() {
    std::vector<std::shared_ptr<Session>> idle;  // released after the lock
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::weak_ptr<Session>& w : sessions_) {
      if (std::shared_ptr<Session> s = w.lock(); s && s->idle()) idle.push_back(std::move(s));
    }
    for (const std::shared_ptr<Session>& s : idle) s->close_soon();
  }

  // Every connection, by last activity (front: the longest idle); an entry
  // outlives its Session until admit() prunes it.
  std::mutex mu_;
  Registry sessions_;
  std::atomic<int> busy_{0};  // requests taken and not yet answered
  std::atomic<bool> stopped_{false};
  const std::string name_;
  const Limits limits_;
  const Handler handler_;
  const AsyncHandler async_handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_{asio::make_strand(io_)};
  asio::steady_timer accept_pause_{acceptor_.get_executor()};
  std::unique_ptr<asio::thread_pool> handlers_;  // for a Handler; none for an AsyncHandler
  std::vector<std::thread> io_threads_;
};

}  // namespace example::http

#endif  // IDEMLEDGER_EXAMPLES_COMMON_HTTP_SERVER_HPP
