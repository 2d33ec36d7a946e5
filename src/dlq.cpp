#include "idemledger/dlq.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/dead_letter.hpp"
#include "src/internal/random.hpp"
#include "src/internal/schema_name.hpp"
#include "src/internal/sqlstates.hpp"

namespace idemledger {
namespace {

// An open spool file holding an exclusive flock for the object's lifetime.
class LockedFile {
 public:
  explicit LockedFile(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~LockedFile() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  bool ok() const { return fd_ >= 0; }

  bool append_durably(std::string_view line) {
    for (std::size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return ::fsync(fd_) == 0;
  }

  bool read_all(std::string& out) {
    if (::lseek(fd_, 0, SEEK_SET) < 0) return false;
    char buffer[8192];
    for (ssize_t n; (n = ::read(fd_, buffer, sizeof buffer)) != 0;) {
      if (n < 0) return false;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return true;
  }

  bool truncate_durably() { return ::ftruncate(fd_, 0) == 0 && ::fsync(fd_) == 0; }

 private:
  int fd_;
};

nlohmann::json to_json(const DeadLetter& l, std::string_view spool_id) {
  return {{"spool_id", spool_id}, {"event_id", l.event_id}, {"event_type", l.event_type},
          {"user_id", l.user_id}, {"amount", l.amount},     {"reason", l.reason},
          {"error", l.error},     {"trace_id", l.trace_id}};
}

// 128 random bits; the generator is fork-safe, so processes sharing a spool
// never mint the same id.
std::string new_spool_id() {
  absl::BitGen& gen = internal::process_local_bitgen();
  return fmt::format("{:016x}{:016x}", absl::Uniform<std::uint64_t>(gen),
                     absl::Uniform<std::uint64_t>(gen));
}

}  // namespace

namespace internal {

absl::Status insert_dead_letter(Connection& conn, std::string_view schema, const DeadLetter& l,
                                std::string_view spool_id) {
  const std::string user = std::to_string(l.user_id);
  return conn
      .execute(
          internal::with_schema(
              "INSERT INTO {schema}.dead_letter_queue "
              "(event_id, event_type, user_id, amount, error, reason, trace_id, spool_id, attempt) "
              "SELECT $1, $2, $3::bigint, $4::numeric, $5, $6, $7, $8, 1 + count(*) "
              "FROM {schema}.dead_letter_queue WHERE event_id = $1 "
              "ON CONFLICT (spool_id) WHERE spool_id IS NOT NULL DO NOTHING",
              schema),
          {Param(l.event_id), Param(l.event_type), Param(user), Param(l.amount), Param(l.error),
           Param(l.reason), l.trace_id.empty() ? Param() : Param(l.trace_id),
           spool_id.empty() ? Param() : Param(spool_id)})
      .status();
}

}  // namespace internal

DeadLetterQueue::DeadLetterQueue(DeadLetterQueueOptions options)
    : options_(std::move(options)),
      schema_status_(internal::validate_identifier("schema", options_.schema)) {}

bool DeadLetterQueue::spool(const DeadLetter& letter) const {
  if (options_.spool_path.empty()) return false;
  LockedFile file(options_.spool_path);
  const bool spooled =
      file.ok() && file.append_durably(to_json(letter, new_spool_id()).dump() + "\n");
  if (spooled) {
    emit_log(options_.log, LogLevel::kWarning, "dead letter spooled; the database did not take it",
             letter.trace_id, letter.event_id,
             {{"reason", letter.reason}, {"spool", options_.spool_path}});
  }
  return spooled;
}

DeadLetterQueue::Destination DeadLetterQueue::record(Connection& conn,
                                                     const DeadLetter& letter) const {
  const absl::Status in_table =
      schema_status_.ok() ? internal::insert_dead_letter(conn, options_.schema, letter, "")
                          : schema_status_;
  if (in_table.ok()) return Destination::kTable;
  if (spool(letter)) return Destination::kSpool;
  // Last resort: the whole record in a line an operator can restore from.
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  const std::string message =
      fmt::format("dead letter lost by table ({}) and spool {}: {}", in_table.message(),
                  options_.spool_path, to_json(letter, "").dump());
  const std::string key = "dead_letter_unwritable:" + letter.event_id;
  sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
  return Destination::kAlertOnly;
}

absl::StatusOr<int> DeadLetterQueue::drain_spool(Connection& conn) const {
  if (!schema_status_.ok()) return schema_status_;
  if (options_.spool_path.empty()) return 0;
  LockedFile file(options_.spool_path);
  std::string content;
  if (!file.ok() || !file.read_all(content)) {
    return absl::UnavailableError(
        fmt::format("cannot read the dead-letter spool {}", options_.spool_path));
  }
  if (content.empty()) return 0;
  absl::StatusOr<Transaction> tx = Transaction::begin(conn);
  if (!tx.ok()) return tx.status();
  int moved = 0;
  for (std::size_t start = 0, end; start < content.size(); start = end + 1) {
    end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();  // a torn last line: keep what parses
    const nlohmann::json j =
        nlohmann::json::parse(content.substr(start, end - start), nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    const DeadLetter l{.event_id = j.value("event_id", ""),
                       .event_type = j.value("event_type", ""),
                       .user_id = j.value("user_id", std::int64_t{0}),
                       .amount = j.value("amount", "0"),
                       .reason = j.value("reason", ""),
                       .error = j.value("error", ""),
                       .trace_id = j.value("trace_id", "")};
    if (absl::Status s =
            internal::insert_dead_letter(conn, options_.schema, l, j.value("spool_id", ""));
        !s.ok()) {
      return s;
    }
    ++moved;
  }
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  // Committed: a crash before this truncation only means the next drain finds
  // the same spool ids and inserts nothing.
  if (!file.truncate_durably()) {
    return absl::UnavailableError(
        fmt::format("drained {} but could not truncate {}", moved, options_.spool_path));
  }
  emit_log(options_.log, LogLevel::kInfo, "dead-letter spool drained into the table", "", "",
           {{"records", std::int64_t{moved}}, {"spool", options_.spool_path}});
  return moved;
}

namespace {

absl::Status check_decision(std::string_view reason, std::string_view actor) {
  if (reason.empty()) return absl::InvalidArgumentError("an operator action requires a reason");
  if (actor.empty()) return absl::InvalidArgumentError("an operator action requires an actor");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeadLetterQueue::ReplayResult> DeadLetterQueue::replay(
    Connection& conn, const Ledger& ledger, std::int64_t id, std::string_view reason,
    std::string_view actor) const {
  if (!schema_status_.ok()) return schema_status_;
  if (absl::Status s = check_decision(reason, actor); !s.ok()) return s;
  absl::StatusOr<Transaction> tx = Transaction::begin(conn);
  if (!tx.ok()) return tx.status();
  const std::string id_text = std::to_string(id);
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema("SELECT * FROM {schema}.replay_dead_letter($1::bigint, $2, $3)",
                            options_.schema),
      {Param(id_text), Param(reason), Param(actor)});
  if (!r.ok()) return internal::interpret_ledger_error(r.status());
  ReplayResult result{.event_id = r->at(0, 1).value_or("")};
  (void)absl::SimpleAtoi(r->at(0, 5).value_or("0"), &result.audit_id);
  if (r->at(0, 0) == "direct") {
    PaymentEvent event{.event_id = result.event_id};
    std::optional<EventType> type = parse_event_type(r->at(0, 2).value_or(""));
    absl::StatusOr<Amount> amount = Amount::parse(r->at(0, 4).value_or(""));
    if (!type || !amount.ok() || !absl::SimpleAtoi(r->at(0, 3).value_or(""), &event.user_id)) {
      return absl::FailedPreconditionError(fmt::format(
          "dead letter {} has no queued event and no readable type, user or amount to apply", id));
    }
    event.type = *type;
    event.amount = *amount;
    absl::StatusOr<Outcome> outcome = ledger.process_event(conn, event);
    if (!outcome.ok()) {
      return absl::Status(outcome.status().code(),
                          fmt::format("replay of dead letter {}: {}; it stays open", id,
                                      outcome.status().message()));
    }
    result.applied_now = *outcome;
  }
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  return result;
}

absl::StatusOr<std::int64_t> DeadLetterQueue::discard(Connection& conn, std::int64_t id,
                                                      std::string_view reason,
                                                      std::string_view actor) const {
  if (!schema_status_.ok()) return schema_status_;
  if (absl::Status s = check_decision(reason, actor); !s.ok()) return s;
  const std::string id_text = std::to_string(id);
  absl::StatusOr<Result> r =
      conn.execute(internal::with_schema(
                       "WITH closed AS (UPDATE {schema}.dead_letter_queue SET resolved_at = now(), "
                       "resolution = 'discarded: ' || $2 "
                       "WHERE id = $1::bigint AND resolved_at IS NULL RETURNING id) "
                       "INSERT INTO {schema}.operator_actions (action, target, reason, actor) "
                       "SELECT 'dlq_discard', id::text, $2, $3 FROM closed RETURNING id",
                       options_.schema),
                   {Param(id_text), Param(reason), Param(actor)});
  if (!r.ok()) return r.status();
  std::int64_t audit_id = 0;
  if (r->rows.empty() || !absl::SimpleAtoi(r->at(0, 0).value_or(""), &audit_id)) {
    return absl::NotFoundError(fmt::format("no open dead letter {}", id));
  }
  return audit_id;
}

}  // namespace idemledger
