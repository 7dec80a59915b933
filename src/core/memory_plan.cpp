#include "core/memory_plan.hpp"

#include <algorithm>
#include <numeric>

namespace softneuro::core {

MemoryPlan plan_memory(std::span<const BufferRequest> req, std::size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(req.size(), 0);
  std::vector<std::size_t> order(req.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return req[a].bytes > req[b].bytes; });
  auto align = [&](std::size_t x) { return (x + alignment - 1) / alignment * alignment; };

  std::vector<std::size_t> placed;  // request indices, kept sorted by offset
  for (auto i : order) {
    const auto& r = req[i];
    std::size_t size = align(r.bytes);
    std::size_t offset = 0;
    if (size != 0) {
      for (auto j : placed) {
        const auto& p = req[j];
        if (p.last < r.first || r.last < p.first || p.bytes == 0) continue;  // not alive together
        std::size_t pb = plan.offsets[j], pe = pb + align(p.bytes);
        if (offset + size <= pb) break;  // fits in the gap before this one
        offset = std::max(offset, pe);
      }
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), offset,
                                   [&](std::size_t off, std::size_t j) { return off < plan.offsets[j]; }),
                  i);
  }
  return plan;
}

}  // namespace softneuro::core
