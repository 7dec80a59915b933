// What identifies the device a net is tuned on.
#pragma once

#include <string>

namespace softneuro::core {

/// "CPU model name | ISA extensions that routines dispatch on | logical CPUs",
/// e.g. "AMD EPYC 7B13 64-Core Processor | avx2 fma f16c | 2 cpus".
/// Profiles and tuned routine paths are only trusted on an equal fingerprint.
const std::string& device_fingerprint();

}  // namespace softneuro::core
