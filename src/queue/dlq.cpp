#include "idemledger/queue/dlq.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "absl/random/random.h"
#include "idemledger/core/connection.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/random.hpp"
#include "src/ledger/internal/sqlstates.hpp"

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
          {"user_id", l.user_id}, {"asset", l.asset},       {"amount", l.amount},
          {"reason", l.reason},   {"error", l.error},       {"trace_id", l.trace_id}};
}

// 128 random bits; the generator is fork-safe, so processes sharing a spool
// never mint the same id.
std::string new_spool_id() {
  absl::BitGen& gen = internal::process_local_bitgen();
  return fmt::format("{:016x}{:016x}", absl::Uniform<std::uint64_t>(gen),
                     absl::Uniform<std::uint64_t>(gen));
}

}  // namespace

DeadLetterQueue::DeadLetterQueue(DeadLetterQueueOptions options) : options_(std::move(options)) {}

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
  const absl::Status in_table = append_dead_letter(conn, options_.schema, letter);
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
                       .asset = j.value("asset", ""),
                       .amount = j.value("amount", ""),
                       .reason = j.value("reason", ""),
                       .error = j.value("error", ""),
                       .trace_id = j.value("trace_id", "")};
    if (absl::Status s = append_dead_letter(conn, options_.schema, l, j.value("spool_id", ""));
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
  if (absl::Status s = check_decision(reason, actor); !s.ok()) return s;
  absl::StatusOr<Transaction> tx = Transaction::begin(conn);
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify("SELECT * FROM {schema}.replay_dead_letter($1::bigint, $2, $3)"),
      Params(id, reason, actor));
  if (!r.ok()) return internal::interpret_ledger_error(r.status());
  absl::StatusOr<Row> row = r->single_row("replay_dead_letter");
  if (!row.ok()) return row.status();
  absl::StatusOr<std::string> action = row->get<std::string>(0);
  absl::StatusOr<std::string> event_id = row->get<std::string>(1);
  absl::StatusOr<std::int64_t> audit_id = row->get<std::int64_t>(5);
  for (const absl::Status& s : {action.status(), event_id.status(), audit_id.status()}) {
    if (!s.ok()) return s;
  }
  ReplayResult result{.event_id = *event_id, .audit_id = *audit_id};
  if (*action == "direct") {
    absl::StatusOr<EventType> type = row->get<EventType>(2);
    absl::StatusOr<std::int64_t> user = row->get<std::int64_t>(3);
    absl::StatusOr<Amount> amount = row->get<Amount>(4);
    absl::StatusOr<std::string> asset = row->get<std::string>(6);
    absl::StatusOr<AssetCode> code = asset.ok() ? AssetCode::create(*asset) : asset.status();
    if (!type.ok() || !user.ok() || !amount.ok() || !code.ok() || amount->is_negative() ||
        amount->is_zero()) {
      return absl::FailedPreconditionError(fmt::format(
          "dead letter {} has no queued event and no readable type, user, asset or amount to "
          "apply",
          id));
    }
    const PaymentEvent event{.event_id = result.event_id,
                             .type = *type,
                             .user_id = *user,
                             .amount = *amount,
                             .asset = *code};
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

namespace {

constexpr std::string_view kRecordColumns =
    "d.id, d.event_id, d.event_type, d.user_id, d.amount, d.reason, d.error, d.trace_id, "
    "d.attempt, d.created_at, d.resolution, e.status, e.retry_count, e.recovery_count, d.asset "
    "FROM {schema}.dead_letter_queue d "
    "LEFT JOIN {schema}.payment_events e ON e.event_id = d.event_id ";

absl::StatusOr<DeadLetterQueue::Record> read_record(const Row& row) {
  DeadLetterQueue::Record r;
  auto read = row.read<std::int64_t, std::string, std::string, std::int64_t, std::optional<Amount>,
                       std::string, std::string, std::optional<std::string>, int, absl::Time,
                       std::optional<std::string>, std::optional<EventStatus>, std::optional<int>,
                       std::optional<int>, std::string>();
  if (!read.ok()) return read.status();
  auto& [id, event_id, event_type, user, amount, reason, error, trace, attempt, created, resolution,
         status, retries, recoveries, asset] = *read;
  r.id = id;
  r.letter = {.event_id = std::move(event_id),
              .event_type = std::move(event_type),
              .user_id = user,
              .asset = std::move(asset),
              .amount = amount ? amount->to_string() : std::string(),
              .reason = std::move(reason),
              .error = std::move(error),
              .trace_id = trace.value_or("")};
  r.attempt = attempt;
  r.created_at = created;
  r.resolution = std::move(resolution);
  r.event_status = status;
  r.retry_count = retries.value_or(0);
  r.recovery_count = recoveries.value_or(0);
  return r;
}

}  // namespace

absl::StatusOr<std::vector<DeadLetterQueue::Record>> DeadLetterQueue::list(Connection& conn,
                                                                           int limit) const {
  absl::StatusOr<Result> r =
      conn.execute(options_.schema.qualify(fmt::format("SELECT {} WHERE d.resolved_at IS NULL "
                                                       "ORDER BY d.id DESC LIMIT $1::bigint",
                                                       kRecordColumns)),
                   Params(limit));
  if (!r.ok()) return r.status();
  std::vector<Record> records;
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    absl::StatusOr<Record> record = read_record(r->row(i));
    if (!record.ok()) return record.status();
    records.push_back(*std::move(record));
  }
  return records;
}

absl::StatusOr<DeadLetterQueue::Record> DeadLetterQueue::show(Connection& conn,
                                                              std::int64_t id) const {
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify(fmt::format("SELECT {} WHERE d.id = $1::bigint", kRecordColumns)),
      Params(id));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::NotFoundError(fmt::format("no dead letter {}", id));
  return read_record(r->row(0));
}

absl::StatusOr<std::int64_t> DeadLetterQueue::discard(Connection& conn, std::int64_t id,
                                                      std::string_view reason,
                                                      std::string_view actor) const {
  if (absl::Status s = check_decision(reason, actor); !s.ok()) return s;
  absl::StatusOr<Result> r =
      conn.execute(options_.schema.qualify(
                       "WITH closed AS (UPDATE {schema}.dead_letter_queue SET resolved_at = now(), "
                       "resolution = 'discarded: ' || $2 "
                       "WHERE id = $1::bigint AND resolved_at IS NULL RETURNING id) "
                       "INSERT INTO {schema}.operator_actions (action, target, reason, actor) "
                       "SELECT 'dlq_discard', id::text, $2, $3 FROM closed RETURNING id"),
                   Params(id, reason, actor));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::NotFoundError(fmt::format("no open dead letter {}", id));
  return read_single<std::int64_t>(*r, "discard");
}

}  // namespace idemledger
