// An example service binary as a real child process, for the HTTP tests.
#ifndef IDEMLEDGER_TESTS_INTEGRATION_SERVICE_PROCESS_HPP
#define IDEMLEDGER_TESTS_INTEGRATION_SERVICE_PROCESS_HPP

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/integration/test_db.hpp"

namespace idemledger::testing {

// Starts an example service binary against `schema` with `env` added, and
// waits for its "<listening_msg>" log line (reading "port" from it, if any);
// stops it with SIGTERM.
class ServiceProcess {
 public:
  ServiceProcess(const char* binary, const std::string& schema,
                 const std::vector<std::pair<std::string, std::string>>& env,
                 const std::string& listening_msg) {
    int out[2];
    if (pipe(out) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      setenv("IDEMLEDGER_DSN", test_dsn().c_str(), 1);
      setenv("IDEMLEDGER_SCHEMA", schema.c_str(), 1);
      if (via_pgbouncer()) setenv("IDEMLEDGER_PREPARED_STATEMENTS", "0", 1);
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      execl(binary, binary, nullptr);
      _exit(127);
    }
    close(out[1]);
    FILE* logs = fdopen(out[0], "r");
    char line[4096];
    bool ready = false;
    while (!ready && std::fgets(line, sizeof line, logs) != nullptr) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      ready = !j.is_discarded() && j.value("msg", "") == listening_msg;
      if (ready) port_ = j.value("port", 0);
    }
    // Keep draining its logs so it never blocks on a full pipe.
    drain_ = std::thread([logs] {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, logs) != nullptr) {
      }
      std::fclose(logs);
    });
  }
  ~ServiceProcess() {
    if (pid_ > 0 && exit_code_ < 0) (void)stop();
    drain_.join();
  }
  int port() const { return port_; }
  // SIGTERM, then the exit code (0 = drained and stopped cleanly).
  int stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
  std::thread drain_;
};

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_INTEGRATION_SERVICE_PROCESS_HPP
