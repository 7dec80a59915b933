#include "routines/cpu/f32_common.hpp"

namespace softneuro::cpu {

AlignedFloats AlignedFloats::view(std::shared_ptr<const void> owner, const float* p, std::size_t n) {
  AlignedFloats a;
  a.owner_ = new std::shared_ptr<const void>(std::move(owner));
  a.p_ = const_cast<float*>(p);
  a.n_ = n;
  return a;
}

void AlignedFloats::release_owner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

}  // namespace softneuro::cpu
