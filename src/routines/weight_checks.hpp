// The check every routine family makes of the weights it reads (CPU and CUDA):
// one definition, each family naming itself in the reason.
#pragma once

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <initializer_list>
#include <string_view>

namespace softneuro::routines {

/// The weights of `keys` the layer holds must be plain float32 CPU blobs with
/// memory; `who` (a descriptor, "cpu/onednn") is named in the reason when not.
inline Support float_weights(const Layer& l, std::initializer_list<const char*> keys, std::string_view who) {
  for (const char* k : keys) {
    const Blob* b = l.find_weight(k);
    if (!b) continue;
    if (b->dtype() != DType::float32)
      return Support::no(fmt::format("weight '{}' is {}, {} reads float32", k, to_string(b->dtype()), who));
    if (b->device() != Device::cpu) return Support::no(fmt::format("weight '{}' is not on the CPU", k));
    if (b->layout() != Layout::nchw)
      return Support::no(fmt::format("weight '{}' has layout {}, {} reads plain", k, to_string(b->layout()), who));
    if (b->numel() > 0 && b->data() == nullptr) return Support::no(fmt::format("weight '{}' has no data", k));
  }
  return Support::yes();
}

}  // namespace softneuro::routines
