// Static memory planning: buffers whose lifetimes do not overlap share memory.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace softneuro::core {

/// A buffer alive from step `first` to step `last` (inclusive).
struct BufferRequest {
  std::size_t bytes = 0;
  int first = 0;
  int last = 0;
};

struct MemoryPlan {
  std::vector<std::size_t> offsets;  ///< per request, into one arena
  std::size_t arena_bytes = 0;
};

/// Greedy offset assignment, largest buffers first, each at the lowest aligned
/// offset that collides with no placed buffer alive at the same time.
/// O(n^2) in the number of buffers, which is the number of blobs of a net.
MemoryPlan plan_memory(std::span<const BufferRequest> requests, std::size_t alignment = 64);

}  // namespace softneuro::core
