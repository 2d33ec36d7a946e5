// A random generator safe across fork(): a child that inherited its parent's
// generator state would draw the very same numbers (identical "random" ids,
// retry jitter in lockstep), so the generator reseeds when the pid changes.
#ifndef IDEMLEDGER_SRC_CORE_INTERNAL_RANDOM_HPP
#define IDEMLEDGER_SRC_CORE_INTERNAL_RANDOM_HPP

#include "absl/random/random.h"

namespace idemledger::internal {

// This thread's generator, seeded from OS entropy (not from abseil's pool,
// which fork() duplicates) in this process.
absl::BitGen& process_local_bitgen();

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_CORE_INTERNAL_RANDOM_HPP
