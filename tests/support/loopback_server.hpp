// A TCP server on 127.0.0.1, in the test's own process, for tests of the
// outbound HTTP client against servers that misbehave on purpose. Either it
// accepts a fixed number of connections and serves them together (a server
// that answers only once every request is in), or it serves each connection
// on a thread of its own, as many as come. Either way it counts them.
//
// Its destructor ends the accepting at once, even when fewer connections came
// than were awaited (closing an acceptor does not wake a blocked accept(): a
// last connection of its own does), then waits for the serving to end: a
// serve function must end when its client goes, so destroy the server after
// its clients. port(), url() and connections() may be called from any thread.
#ifndef IDEMLEDGER_TESTS_SUPPORT_LOOPBACK_SERVER_HPP
#define IDEMLEDGER_TESTS_SUPPORT_LOOPBACK_SERVER_HPP

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>
// (a block of its own, so it stays first)

#include <atomic>
#include <boost/asio.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace idemledger::testing {

class LoopbackServer {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using ServeAll = std::function<void(std::vector<Socket>&)>;
  using ServeEach = std::function<void(Socket&)>;

  // Accepts `connections` connections, then serves them all with
  // `serve(sockets)` on its thread; accepts no more.
  LoopbackServer(int connections, ServeAll serve) : serve_all_(std::move(serve)) {
    thread_ = std::thread([this, connections] {
      std::vector<Socket> sockets;
      for (int i = 0; i < connections; ++i) {
        std::optional<Socket> s = accept();
        if (!s) return;
        sockets.push_back(std::move(*s));
      }
      serve_all_(sockets);
    });
  }

  // Serves each connection with `serve(socket)` on a thread of its own, until
  // destroyed.
  explicit LoopbackServer(ServeEach serve) : serve_each_(std::move(serve)) {
    thread_ = std::thread([this] {
      while (std::optional<Socket> s = accept()) {
        serving_.emplace_back([this, s = std::move(*s)]() mutable { serve_each_(s); });
      }
    });
  }

  ~LoopbackServer() {
    stopping_ = true;
    boost::system::error_code ignored;
    Socket wake(io_);
    wake.connect(acceptor_.local_endpoint(), ignored);
    thread_.join();
    for (std::thread& t : serving_) t.join();
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  int port() const { return acceptor_.local_endpoint().port(); }
  // http://<host>:<port()><target>; `host` must reach 127.0.0.1.
  std::string url(std::string_view target = "/", std::string_view host = "127.0.0.1") const {
    return "http://" + std::string(host) + ":" + std::to_string(port()) + std::string(target);
  }
  // The connections accepted so far (the destructor's own not counted).
  int connections() const { return connections_; }

 private:
  // The next connection, or none once the server is being destroyed.
  std::optional<Socket> accept() {
    Socket s(io_);
    boost::system::error_code ec;
    acceptor_.accept(s, ec);
    if (ec || stopping_) return std::nullopt;
    ++connections_;
    return s;
  }

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{
      io_, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)};
  const ServeAll serve_all_;
  const ServeEach serve_each_;
  std::atomic<int> connections_ = 0;
  std::atomic<bool> stopping_ = false;
  std::vector<std::thread> serving_;  // the accepting thread's alone until it ends
  std::thread thread_;
};

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_SUPPORT_LOOPBACK_SERVER_HPP
