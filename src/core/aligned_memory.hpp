#pragma once
// One way to allocate the library's CPU buffers: packed weights, blobs, a
// net's arena, workspaces, a .dnn file read from memory. (The ONNX importer,
// a library of its own, allocates its transient tensors itself.)
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
/// (ResNet50 tuned, 2 threads: 31.4 -> 30.0 ms, medians of 4 rounds).
void* allocate_aligned(std::size_t bytes);

/// Three quarters of this machine's physical memory (0 where unknown): the
/// default bound of a session's memory and of what a sample archive inflates to.
std::size_t default_memory_limit();

}  // namespace softneuro::core
