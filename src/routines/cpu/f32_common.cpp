#include "routines/cpu/f32_common.hpp"

#include "core/prepared_weights.hpp"

namespace softneuro::cpu {

AlignedFloats AlignedFloats::view(std::shared_ptr<const void> owner, const float* p, std::size_t n) {
  AlignedFloats a;
  a.owner_ = new std::shared_ptr<const void>(std::move(owner));
  a.p_ = const_cast<float*>(p);
  a.n_ = n;
  return a;
}

void AlignedFloats::release_owner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

Blob save_floats(const AlignedFloats& a) { return core::pack_arrays({core::array_bytes(a.data(), a.size())}); }

std::optional<AlignedFloats> load_floats(const Blob& bytes, std::size_t floats) {
  auto arrays = core::unpack_arrays(bytes, {floats * sizeof(float)});
  if (!arrays) return std::nullopt;
  return AlignedFloats::view(core::owner_of(bytes), reinterpret_cast<const float*>((*arrays)[0]), floats);
}

}  // namespace softneuro::cpu
