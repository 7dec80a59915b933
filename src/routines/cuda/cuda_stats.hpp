// What the CUDA backend did, for tests and verbose tools (no CUDA headers needed).
#pragma once

#include <string>

namespace softneuro::cuda {

struct GraphStats {
  int captures = 0;  ///< runs recorded into a CUDA graph
  int launches = 0;  ///< graph replays queued
  int failures = 0;  ///< recordings given up (the net then runs eagerly)
};
GraphStats graph_stats();

/// "" with a usable device, else why there is none (the text after "no CUDA device: ").
std::string device_unavailable_reason();
/// "NVIDIA H100 80GB HBM3, compute capability 9.0" (empty without a device).
std::string device_description();

}  // namespace softneuro::cuda
