#include "src/core/internal/random.hpp"

#include <unistd.h>

#include <optional>
#include <random>

namespace idemledger::internal {

absl::BitGen& process_local_bitgen() {
  thread_local pid_t seeded_in = 0;
  thread_local std::optional<absl::BitGen> gen;
  if (!gen || seeded_in != getpid()) {
    // Straight from the OS: abseil's default seed comes from a process-wide
    // entropy pool that fork() duplicates too.
    std::random_device os;
    std::seed_seq seed{os(), os(), os(), os(), static_cast<unsigned>(getpid())};
    gen.emplace(seed);
    seeded_in = getpid();
  }
  return *gen;
}

}  // namespace idemledger::internal
