// An example service binary as a real child process, for the HTTP tests.
#ifndef IDEMLEDGER_TESTS_INTEGRATION_SERVICE_PROCESS_HPP
#define IDEMLEDGER_TESTS_INTEGRATION_SERVICE_PROCESS_HPP

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/test_db.hpp"

namespace idemledger::testing {

// Starts an example service binary against `schema` with `env` added, and
// waits for its "<listening_msg>" log line (reading "port" from it, if any);
// stops it with SIGTERM.
class ServiceProcess {
 public:
  ServiceProcess(const char* binary, const Schema& schema,
                 const std::vector<std::pair<std::string, std::string>>& env,
                 const std::string& listening_msg) {
    // Everything the child needs is built before fork(): other threads run
    // here (earlier services' log drains), and a lock one of them held at
    // fork time stays held in the child, so until exec it may only make
    // async-signal-safe calls — no setenv, no malloc.
    std::vector<std::pair<std::string, std::string>> overrides = {
        {"IDEMLEDGER_DSN", test_dsn()}, {"IDEMLEDGER_SCHEMA", std::string(schema.name())}};
    if (via_pgbouncer()) overrides.emplace_back("IDEMLEDGER_PREPARED_STATEMENTS", "0");
    overrides.insert(overrides.end(), env.begin(), env.end());
    std::vector<std::string> variables;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view variable(*e);
      const std::string_view name = variable.substr(0, variable.find('='));
      if (std::none_of(overrides.begin(), overrides.end(),
                       [&](const auto& o) { return o.first == name; })) {
        variables.emplace_back(variable);
      }
    }
    for (const auto& [name, value] : overrides) variables.push_back(name + "=" + value);
    std::vector<char*> envp;
    envp.reserve(variables.size() + 1);
    for (std::string& v : variables) envp.push_back(v.data());
    envp.push_back(nullptr);
    char* const argv[] = {const_cast<char*>(binary), nullptr};

    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) std::abort();  // later children must not hold it open
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);  // the duplicate survives exec
      execve(binary, argv, envp.data());
      _exit(127);
    }
    close(out[1]);
    FILE* logs = fdopen(out[0], "r");
    char line[4096];
    bool ready = false;
    while (!ready && std::fgets(line, sizeof line, logs) != nullptr) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      ready = !j.is_discarded() && j.value("msg", "") == listening_msg;
      if (ready) ready_line_ = j;
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
  int port() const { return ready_line_.value("port", 0); }
  // The admin listener's port, if the service logged one ("admin_port").
  int admin_port() const { return ready_line_.value("admin_port", 0); }
  // The "<listening_msg>" line itself (what the service said it started with).
  const nlohmann::json& ready_line() const { return ready_line_; }
  pid_t pid() const { return pid_; }
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
  int exit_code_ = -1;
  nlohmann::json ready_line_;
  std::thread drain_;
};

// A service binary run until it exits, as `env` (shell words, NAME='value'
// ..., quoted by the caller) plus the test DSN configure it, bounded at 20 s:
// its exit code (-1 if it did not exit by itself) and what it printed on
// stdout and stderr. For configurations a service must refuse to start with.
struct Finished {
  int exit_code;
  std::string output;
};
inline Finished run_to_exit(const char* binary, const std::string& env) {
  const std::string command =
      env + " IDEMLEDGER_DSN='" + test_dsn() + "' timeout 20 " + binary + " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  Finished f{-1, ""};
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, p) != nullptr) f.output += buffer;
  const int status = ::pclose(p);
  if (WIFEXITED(status)) f.exit_code = WEXITSTATUS(status);
  return f;
}

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_INTEGRATION_SERVICE_PROCESS_HPP
