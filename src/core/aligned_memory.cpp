#include "core/aligned_memory.hpp"

#include <cstdlib>

#include <unistd.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace softneuro::core {

void* allocate_aligned(std::size_t bytes) {
  if (bytes == 0) bytes = 64;
  const bool huge = bytes >= kHugePageBytes;
  void* p = nullptr;
  // posix_memalign: no size rounding (aligned_alloc wants a multiple of the
  // alignment); the tail past the last 2 MiB boundary keeps small pages.
  if (posix_memalign(&p, huge ? kHugePageBytes : 64, bytes) != 0) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: a kernel without THP refuses it, and the buffer works as is.
  if (huge) (void)madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  return p;
}

std::size_t default_memory_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) / 4 * 3 * static_cast<std::size_t>(page) : 0;
}

}  // namespace softneuro::core
