#include "idemledger/queue/dlq.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/random/random.h"
#include "idemledger/core/connection.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"
#include "src/core/internal/random.hpp"
#include "src/core/internal/text.hpp"
#include "src/ledger/internal/sqlstates.hpp"
#include "src/queue/internal/hmac.hpp"

namespace idemledger {
namespace {

// Why a spool or quarantine file may not be used, or "" if it may: only a
// regular file, not a link, owned by this process's user, with no other
// name (hard link) and mode 0600 — anything else could be someone's bait.
std::string refusal(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "cannot stat it";
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (st.st_uid != ::geteuid()) return fmt::format("it is owned by uid {}, not us", st.st_uid);
  if (st.st_nlink != 1) return fmt::format("it has {} names (hard links)", st.st_nlink);
  if ((st.st_mode & 07777) != 0600)
    return fmt::format("its mode is {:04o}, not 0600", st.st_mode & 07777);
  return "";
}

// A spool or quarantine file, opened without following a link, checked, and
// holding an exclusive flock for the object's lifetime.
class LockedFile {
 public:
  explicit LockedFile(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (fd_ < 0) {
      error_ = errno == ELOOP ? "it is a symbolic link" : fmt::format("open: errno {}", errno);
      return;
    }
    error_ = refusal(fd_);
    if (error_.empty() && ::flock(fd_, LOCK_EX) != 0) error_ = "flock failed";
    if (!error_.empty()) {
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
  // Why it could not be opened ("" if it was).
  const std::string& error() const { return error_; }

  std::int64_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<std::int64_t>(st.st_size) : -1;
  }

  // Appends `lines` and fsyncs. A line torn by a crash before it ends the
  // file as it is; a newline first keeps it apart from the new lines.
  bool append_durably(std::string lines) {
    const std::int64_t end = size();
    if (end < 0) return false;
    char last = '\n';
    if (end > 0 && ::pread(fd_, &last, 1, end - 1) != 1) return false;
    if (last != '\n') lines.insert(lines.begin(), '\n');
    for (std::size_t done = 0; done < lines.size();) {
      const ssize_t n = ::write(fd_, lines.data() + done, lines.size() - done);
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
  std::string error_;
};

constexpr std::size_t kSealLength = 64;  // hex HMAC-SHA256, then one space

// A letter as one JSON object, without a newline. The JSON writer never
// throws (invalid UTF-8 is replaced), so spooling cannot fail on text.
std::string letter_json(const DeadLetter& l, std::string_view spool_id) {
  std::string json = internal::JsonLine()
                         .add("spool_id", spool_id)
                         .add("event_id", l.event_id)
                         .add("event_type", l.event_type)
                         .add("user_id", l.user_id)
                         .add("asset", l.asset)
                         .add("amount", l.amount)
                         .add("reason", l.reason)
                         .add("error", l.error)
                         .add("trace_id", l.trace_id)
                         .finish();
  json.pop_back();
  return json;
}

// One spool line: "<hex HMAC-SHA256 of the JSON> <JSON>\n".
std::string sealed_line(const DeadLetter& l, std::string_view spool_id, std::string_view key) {
  const std::string json = letter_json(l, spool_id);
  return internal::to_hex(internal::hmac_sha256(key, {json})) + " " + json + "\n";
}

struct Unsealed {
  DeadLetter letter;
  std::string spool_id;
};

// A line back into its letter, or why it may not become one: its seal must
// be this key's over its JSON, and every field must be there with its type.
absl::StatusOr<Unsealed> unseal(std::string_view line, std::string_view key) {
  if (line.size() > kMaxSpoolLineLength) return absl::DataLossError("line too long");
  if (line.size() < kSealLength + 3 || line[kSealLength] != ' ') {
    return absl::DataLossError("no seal (torn or foreign line)");
  }
  const std::string_view json = line.substr(kSealLength + 1);
  const std::optional<internal::Digest> seal =
      internal::parse_hex_digest(line.substr(0, kSealLength));
  if (!seal || !internal::digests_equal(*seal, internal::hmac_sha256(key, {json}))) {
    return absl::DataLossError("seal does not match (forged, altered or another key's)");
  }
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::DataLossError("not a JSON object");
  Unsealed out;
  const auto text = [&](const char* name, std::string& into) {
    const auto it = j.find(name);
    if (it == j.end() || !it->is_string()) return false;
    into = it->get_ref<const std::string&>();
    return true;
  };
  const auto user = j.find("user_id");
  if (!text("spool_id", out.spool_id) || out.spool_id.empty() ||
      !text("event_id", out.letter.event_id) || !text("event_type", out.letter.event_type) ||
      !text("asset", out.letter.asset) || !text("amount", out.letter.amount) ||
      !text("reason", out.letter.reason) || !text("error", out.letter.error) ||
      !text("trace_id", out.letter.trace_id) || user == j.end() || !user->is_number_integer()) {
    return absl::DataLossError("a field is missing or has the wrong type");
  }
  out.letter.user_id = user->get<std::int64_t>();
  return out;
}

// 128 random bits; the generator is fork-safe, so processes sharing a spool
// never mint the same id.
std::string new_spool_id() {
  absl::BitGen& gen = internal::process_local_bitgen();
  return fmt::format("{:016x}{:016x}", absl::Uniform<std::uint64_t>(gen),
                     absl::Uniform<std::uint64_t>(gen));
}

}  // namespace

DeadLetterQueue::DeadLetterQueue(DeadLetterQueueOptions options) : options_(std::move(options)) {
  if (options_.quarantine_path.empty() && !options_.spool_path.empty()) {
    options_.quarantine_path = options_.spool_path + ".quarantine";
  }
}

absl::Status DeadLetterQueue::check_options() const {
  if (options_.spool_path.empty()) return absl::OkStatus();
  if (options_.spool_key.size() < kMinSpoolKeyLength) {
    return absl::FailedPreconditionError(
        fmt::format("dead-letter spool {}: spool_key must be at least {} bytes, got {}",
                    options_.spool_path, kMinSpoolKeyLength, options_.spool_key.size()));
  }
  return absl::OkStatus();
}

void DeadLetterQueue::refuse_file(std::string_view path, std::string_view why) const {
  alert_sink_or_default(options_.alerts)
      .alert({.severity = AlertSeverity::kCritical,
              .key = fmt::format("dead_letter_spool_refused:{}", path),
              .message = fmt::format("dead-letter spool file {} refused: {}; nothing read from "
                                     "or written to it",
                                     internal::quoted_for_humans(path, 512), why)});
}

bool DeadLetterQueue::spool(const DeadLetter& letter) const {
  if (options_.spool_path.empty() || !check_options().ok()) return false;
  LockedFile file(options_.spool_path);
  if (!file.ok()) {
    refuse_file(options_.spool_path, file.error());
    return false;
  }
  if (!file.append_durably(sealed_line(letter, new_spool_id(), options_.spool_key))) return false;
  emit_log(options_.log, LogLevel::kWarning, "dead letter spooled; the database did not take it",
           letter.trace_id, letter.event_id,
           {{"reason", letter.reason}, {"spool", options_.spool_path}});
  return true;
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
                  options_.spool_path, letter_json(letter, ""));
  const std::string key = "dead_letter_unwritable:" + letter.event_id;
  sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
  return Destination::kAlertOnly;
}

absl::StatusOr<int> DeadLetterQueue::drain_spool(Connection& conn) const {
  if (options_.spool_path.empty()) return 0;
  if (absl::Status s = check_options(); !s.ok()) return s;
  LockedFile file(options_.spool_path);
  if (!file.ok()) {
    refuse_file(options_.spool_path, file.error());
    return absl::FailedPreconditionError(
        fmt::format("dead-letter spool {} refused: {}", options_.spool_path, file.error()));
  }
  if (const std::int64_t size = file.size(); size < 0 || size > options_.max_spool_bytes) {
    const std::string why =
        fmt::format("it is {} bytes, above the {}-byte limit", size, options_.max_spool_bytes);
    refuse_file(options_.spool_path, why);
    return absl::ResourceExhaustedError(
        fmt::format("dead-letter spool {} not read: {}", options_.spool_path, why));
  }
  std::string content;
  if (!file.read_all(content)) {
    return absl::UnavailableError(
        fmt::format("cannot read the dead-letter spool {}", options_.spool_path));
  }
  if (content.empty()) return 0;
  // Every line is either a letter (sealed by our key, well-typed) or goes to
  // the quarantine file; one bad line never holds back the others.
  std::vector<Unsealed> letters;
  std::string quarantined;
  int quarantined_lines = 0;
  std::string first_reason;
  for (std::size_t start = 0, end; start < content.size(); start = end + 1) {
    end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();  // torn by a crash mid-append
    const std::string_view line = std::string_view(content).substr(start, end - start);
    if (line.empty()) continue;
    absl::StatusOr<Unsealed> u = unseal(line, options_.spool_key);
    if (u.ok()) {
      letters.push_back(*std::move(u));
      continue;
    }
    if (first_reason.empty()) first_reason = std::string(u.status().message());
    ++quarantined_lines;
    quarantined += internal::JsonLine()
                       .add("quarantined_at", absl::FormatTime(absl::Now()))
                       .add("spool", options_.spool_path)
                       .add("reason", std::string(u.status().message()))
                       .add("line", line)
                       .finish();
  }
  if (quarantined_lines > 0) {
    LockedFile quarantine(options_.quarantine_path);
    if (!quarantine.ok()) refuse_file(options_.quarantine_path, quarantine.error());
    if (!quarantine.ok() || !quarantine.append_durably(std::move(quarantined))) {
      return absl::UnavailableError(fmt::format(
          "dead-letter spool {}: {} line(s) failed their check and the quarantine file {} "
          "cannot take them; nothing drained",
          options_.spool_path, quarantined_lines, options_.quarantine_path));
    }
  }
  if (!letters.empty()) {
    absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedTransaction);
    if (!tx.ok()) return tx.status();
    for (const Unsealed& u : letters) {
      if (absl::Status s = append_dead_letter(conn, options_.schema, u.letter, u.spool_id);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = tx->commit(); !s.ok()) return s;
  }
  // Committed: a crash before this truncation only means the next drain finds
  // the same spool ids and inserts nothing (and quarantines the same lines
  // again: the quarantine is for reading, not counting).
  if (!file.truncate_durably()) {
    return absl::UnavailableError(
        fmt::format("drained {} but could not truncate {}", letters.size(), options_.spool_path));
  }
  if (quarantined_lines > 0) {
    alert_sink_or_default(options_.alerts)
        .alert({.severity = AlertSeverity::kCritical,
                .key = fmt::format("dead_letter_spool_quarantined:{}", options_.spool_path),
                .message = fmt::format(
                    "{} dead-letter spool line(s) failed their check ({}{}) and were moved to "
                    "{}, not to the table; {} other(s) drained. Read them before trusting them.",
                    quarantined_lines, first_reason, quarantined_lines > 1 ? ", ..." : "",
                    options_.quarantine_path, letters.size())});
  }
  const int moved = static_cast<int>(letters.size());
  emit_log(options_.log, LogLevel::kInfo, "dead-letter spool drained into the table", "", "",
           {{"records", std::int64_t{moved}},
            {"quarantined", std::int64_t{quarantined_lines}},
            {"spool", options_.spool_path}});
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
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedTransaction);
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
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      options_.schema.qualify(fmt::format("SELECT {} WHERE d.resolved_at IS NULL "
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
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
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
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      options_.schema.qualify(
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
