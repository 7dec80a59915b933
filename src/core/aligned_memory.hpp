#pragma once
// One way to allocate the library's long-lived CPU buffers: packed weights,
// blobs, a net's arena.
#include <cstddef>

namespace softneuro::core {

/// Buffers from this size up are 2 MiB aligned and advised as huge pages.
constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

/// `bytes` (0: one cache line) of 64-byte aligned memory, or null when out of
/// memory; release it with std::free. From kHugePageBytes up the buffer starts
/// on a 2 MiB boundary and is advised to Linux as transparent huge pages (where
/// the kernel allows them: THP "madvise" or "always"): a layer's weights are
/// read once per inference, from DRAM, and with 4 KiB pages every 4 KiB of
/// them also costs a page walk whose own entries left the caches too
/// (ResNet50, 2 threads: ~1 ms of 30; measured in the commit that added this).
void* allocate_aligned(std::size_t bytes);

}  // namespace softneuro::core
