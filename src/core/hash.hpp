// XXH64 (Yann Collet's xxHash, 64-bit variant): fast enough that checking a
// .dnn file's checksum does not dominate load time (several GB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace softneuro::core {

uint64_t xxh64(const void* data, std::size_t size, uint64_t seed = 0) noexcept;

}  // namespace softneuro::core
