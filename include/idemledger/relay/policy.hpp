// idemledger/relay/policy.hpp — what the delivery relay does with a topic's
// messages that could not be delivered.
//
//   options.policies["credited"] =
//       idemledger::RelayPolicy::deadline(absl::Hours(1), idemledger::ledger_relevance(schema));
//   options.policies["debited"] = idemledger::RelayPolicy::retries(5);
//
// A dead letter (relay_dead_letters) is judged before every resend: under a
// retry budget it is dropped once dlq_retries exceeds it (max_retries_exceeded);
// under a deadline it is dropped past first_dlq_at + deadline
// (deadline_exceeded) without asking, and otherwise a source of truth is asked:
// MATCH resend, MISMATCH drop (event_obsolete), EXPIRED drop (expired),
// QUERY_FAILED back to the DLQ without a call. A message whose topic has no
// policy, whose payload is not a JSON object, or that the topic's validator
// refuses cannot be decoded and goes to quarantine.
//
// The types here are values; RelevanceCheck and MessageValidator must be
// thread-safe (delivery threads call them concurrently).
#ifndef IDEMLEDGER_RELAY_POLICY_HPP
#define IDEMLEDGER_RELAY_POLICY_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

// One message on its way out. From the outbox, or from the DLQ with its
// envelope fields set.
struct RelayMessage {
  std::int64_t outbox_id = 0;
  std::string topic;
  std::string payload;              // the outbox row's JSON, exactly as stored; never rewritten
  std::int64_t dead_letter_id = 0;  // 0: straight from the outbox
  int dlq_retries = 0;
  absl::Duration since_first_dlq;  // measured by the server at claim time
  std::string reason;              // why it was dead-lettered last
  // When this process's claim on it ends, by this process's clock: the time
  // taken just before the claim was sent, plus the lease, so never after the
  // lease the server granted. The relay starts no call past it (a process
  // paused that long must not send what another replica may be delivering),
  // and a transport should tell the downstream not to act on a call after it
  // (the example transport's X-Relay-Deadline). Infinite for a message this
  // process did not claim.
  absl::Time claimed_until = absl::InfiniteFuture();
  // The same end by the monotonic clock. The relay checks both and stops at
  // the sooner, so a wall clock stepped back (NTP, an operator) while the
  // process was paused cannot lengthen its claim. max() when not claimed.
  std::chrono::steady_clock::time_point claim_ends = std::chrono::steady_clock::time_point::max();

  [[nodiscard]] bool from_dead_letters() const { return dead_letter_id != 0; }
};

// Is a dead letter still worth sending? Asked of a source of truth.
enum class Relevance {
  kMatch,        // still true: resend
  kMismatch,     // the world moved on: drop as obsolete
  kExpired,      // no longer wanted whatever its state: drop
  kQueryFailed,  // the source of truth did not answer: back to the DLQ
};
inline constexpr EnumNames<Relevance, 4> kRelevanceNames{{{
    {Relevance::kMatch, "match"},
    {Relevance::kMismatch, "mismatch"},
    {Relevance::kExpired, "expired"},
    {Relevance::kQueryFailed, "query_failed"},
}}};
constexpr const auto& enum_names(Relevance) { return kRelevanceNames; }

// Asked with a session the relay holds, before a dead letter is resent.
using RelevanceCheck = std::function<Relevance(Connection& conn, const RelayMessage& message)>;

// OK if the relay can send `message`; otherwise it goes to quarantine with
// the status message as reason.
using MessageValidator = std::function<absl::Status(const RelayMessage& message)>;

struct RelayPolicy {
  // A retry budget: once dlq_retries exceeds it, dropped (max_retries_exceeded).
  [[nodiscard]] static RelayPolicy retries(int max_retries, MessageValidator validate = nullptr);
  // A deadline from first_dlq_at, and a relevance check before every resend.
  [[nodiscard]] static RelayPolicy deadline(absl::Duration deadline, RelevanceCheck relevance,
                                            MessageValidator validate = nullptr);

  std::optional<int> max_retries;  // set: the retry-budget policy
  absl::Duration deadline_after = absl::InfiniteDuration();
  RelevanceCheck relevance;   // set: the deadline policy
  MessageValidator validate;  // nullptr: any JSON object decodes

  // OK if exactly one of the two policies is configured, with sane values.
  [[nodiscard]] absl::Status check(std::string_view topic) const;
};

// Why a dead letter is not resent (drop reasons kept in relay_dead_letters).
inline constexpr std::string_view kDropDeadlineExceeded = "deadline_exceeded";
inline constexpr std::string_view kDropObsolete = "event_obsolete";
inline constexpr std::string_view kDropExpired = "expired";
inline constexpr std::string_view kDropMaxRetries = "max_retries_exceeded";
// Why a dead letter went back to the DLQ without a call.
inline constexpr std::string_view kRequeueQueryFailed = "relevance_query_failed";

// What a policy decides about one dead letter before a resend.
struct Verdict {
  std::optional<std::string> drop_reason;  // set: drop it with this reason
  bool requeue = false;                    // back to the DLQ, no call (QUERY_FAILED)
  [[nodiscard]] bool send() const { return !drop_reason && !requeue; }
};

// judge()
//
// The verdict of `policy` on `message` (a dead letter): the deadline first
// (without asking), then the relevance check. A budget policy always sends:
// its budget was applied when the letter was written.
[[nodiscard]] Verdict judge(Connection& conn, const RelayMessage& message,
                            const RelayPolicy& policy);

// decode()
//
// OK if `message` can be sent under `policy` (nullptr: its topic has none):
// the payload is a JSON object and the policy's validator accepts it.
[[nodiscard]] absl::Status decode(const RelayMessage& message, const RelayPolicy* policy);

// ledger_relevance()
//
// A RelevanceCheck for the Ledger's own notifications, with its tables as
// the source of truth: "credited"/"debited" MATCH while the event is
// confirmed and no reorg compensation reversed it, else MISMATCH;
// "insufficient_funds" MATCH while the event is failed (a hold: rejected);
// "held", "posted", "voided", "expired" MATCH while the hold is in that
// state; a topic that is not the ledger's
// EXPIRED (the ledger cannot vouch for it); a query error QUERY_FAILED.
[[nodiscard]] RelevanceCheck ledger_relevance(const Schema& schema = kDefaultSchema);

}  // namespace idemledger

#endif  // IDEMLEDGER_RELAY_POLICY_HPP
