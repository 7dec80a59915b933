// The CUDA backend at library load: finds the device (never failing, never
// printing above info level when there is none), registers its memory, its
// queues and its CUDA-graph hooks with the core (core/device_hooks.hpp).
//
// Environment: SOFTNEURO_CUDA=0 hides the device (the CUDA routines then say
// so); SOFTNEURO_CUDA_DEVICE=<n> picks device n (default 0);
// SOFTNEURO_CUDA_GRAPHS=0 turns CUDA-graph recording of whole runs off.
#include "routines/weight_checks.hpp"
#include "routines/cuda/cuda_backend.hpp"

#include "core/device_hooks.hpp"
#include "core/log.hpp"
#include "routines/cuda/cuda_stats.hpp"
#include "routines/cuda/kernels.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#ifndef SOFTNEURO_CUDA_MIN_ARCH
#define SOFTNEURO_CUDA_MIN_ARCH 80
#endif

namespace softneuro::cuda {
namespace {

struct DeviceState {
  bool found = false;
  std::string reason;  // why not
  int index = 0;
  int cc = 0;
  std::string name;
};

bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && (!std::strcmp(v, "0") || !std::strcmp(v, "off") || !std::strcmp(v, "OFF"));
}

DeviceState detect() {
  DeviceState s;
  if (env_off("SOFTNEURO_CUDA")) {
    s.reason = "disabled by SOFTNEURO_CUDA=0";
    return s;
  }
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    s.reason = cudaGetErrorString(err);
    cudaGetLastError();
    return s;
  }
  if (count <= 0) {
    s.reason = "no device found";
    return s;
  }
  if (const char* v = std::getenv("SOFTNEURO_CUDA_DEVICE")) s.index = std::atoi(v);
  if (s.index < 0 || s.index >= count) {
    s.reason = fmt::format("SOFTNEURO_CUDA_DEVICE={} but there are {} devices", s.index, count);
    return s;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, s.index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, s.index) != cudaSuccess) {
    s.reason = cudaGetErrorString(cudaGetLastError());
    return s;
  }
  s.cc = major * 10 + minor;
  if (s.cc < SOFTNEURO_CUDA_MIN_ARCH) {
    s.reason = fmt::format("device {} has compute capability {}.{}; this build's kernels need {}.{} or newer",
                           s.index, major, minor, SOFTNEURO_CUDA_MIN_ARCH / 10, SOFTNEURO_CUDA_MIN_ARCH % 10);
    return s;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, s.index) == cudaSuccess) s.name = prop.name;
  cudaGetLastError();
  s.found = true;
  return s;
}

const DeviceState& state() {
  static const DeviceState s = detect();
  return s;
}

std::atomic<int> g_captures{0}, g_launches{0}, g_failures{0};

// ---------------------------------------------------------------------------
// Device memory for the executor's per-device arena and the tuner.

void* device_allocate(std::size_t bytes) {
  try {
    use_device();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    // Zero-filled (the tuner times routines on such blobs), in queue order.
    if (cudaMemsetAsync(p, 0, bytes, stream()) != cudaSuccess || cudaStreamSynchronize(stream()) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(p);
      return nullptr;
    }
    return p;
  } catch (const std::exception&) {
    return nullptr;
  }
}
void device_release(void* p) {
  if (p) cudaFree(p);  // errors at exit (runtime unloading) are of no interest
}
void device_synchronize() { check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

// ---------------------------------------------------------------------------
// Queue and CUDA-graph hooks (core/device_hooks.hpp).

thread_local Queue* t_queue = nullptr;  // the bound queue (nullptr: the default one)

void* hook_create_queue() { return new Queue(); }
void hook_destroy_queue(void* q) { delete static_cast<Queue*>(q); }
void* hook_bind_queue(void* q) { return std::exchange(t_queue, static_cast<Queue*>(q)); }

void* hook_mark() {
  try {
    cudaEvent_t e = nullptr;
    use_device();
    if (cudaEventCreate(&e) != cudaSuccess) throw Error("cudaEventCreate");
    if (cudaEventRecord(e, stream()) != cudaSuccess) {
      cudaEventDestroy(e);
      throw Error("cudaEventRecord");
    }
    return e;
  } catch (const std::exception&) {
    cudaGetLastError();
    return nullptr;
  }
}
double hook_elapsed_ms(void* from, void* to) {
  float ms = 0;
  if (from && to && (cudaEventSynchronize(static_cast<cudaEvent_t>(to)) != cudaSuccess ||
                     cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)) != cudaSuccess))
    ms = 0;
  if (from) cudaEventDestroy(static_cast<cudaEvent_t>(from));
  if (to) cudaEventDestroy(static_cast<cudaEvent_t>(to));
  cudaGetLastError();
  return ms;
}

bool hook_hold(double ms) {
  try {
    use_device();
    if (kern::hold(ms, stream()) == cudaSuccess) return true;
  } catch (const std::exception&) {
  }
  cudaGetLastError();
  return false;
}

bool hook_capturable(const PreparedRoutine* r) {
  auto* p = dynamic_cast<const Prepared*>(r);
  return p && p->capturable();
}
bool hook_begin() {
  if (env_off("SOFTNEURO_CUDA_GRAPHS")) return false;
  try {
    if (cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal) == cudaSuccess) return true;
  } catch (const std::exception&) {
  }
  core::info("CUDA: cannot record a graph: {}", cudaGetErrorString(cudaGetLastError()));
  ++g_failures;
  return false;
}
void* hook_end() {
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream(), &graph);
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess && graph) err = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (err != cudaSuccess || !exec) {
    core::info("CUDA: recording a graph failed ({}); the net runs eagerly",
               cudaGetErrorString(err != cudaSuccess ? err : cudaErrorUnknown));
    cudaGetLastError();
    ++g_failures;
    return nullptr;
  }
  ++g_captures;
  return exec;
}
bool hook_launch(void* g) {
  if (cudaGraphLaunch(static_cast<cudaGraphExec_t>(g), stream()) != cudaSuccess) {
    core::info("CUDA: a graph launch failed ({}); the net runs eagerly", cudaGetErrorString(cudaGetLastError()));
    ++g_failures;
    return false;
  }
  ++g_launches;
  return true;
}
void hook_destroy(void* g) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g)); }

void register_with_core() {
  register_device_memory(Device::cuda, DeviceMemory{device_allocate, device_release, device_synchronize});
  core::register_device_hooks(Device::cuda, core::DeviceHooks{.create_queue = hook_create_queue,
                                                              .destroy_queue = hook_destroy_queue,
                                                              .bind_queue = hook_bind_queue,
                                                              .mark = hook_mark,
                                                              .elapsed_ms = hook_elapsed_ms,
                                                              .hold = hook_hold,
                                                              .capturable = hook_capturable,
                                                              .begin_capture = hook_begin,
                                                              .end_capture = hook_end,
                                                              .launch = hook_launch,
                                                              .destroy = hook_destroy});
}

// At library load: find the device; register it when usable. Never throws, and
// says why there is none only at info level (SOFTNEURO_LOG=info).
struct LoadTimeInit {
  LoadTimeInit() {
    try {
      const DeviceState& s = state();
      if (!s.found) {
        core::info("CUDA backend: no CUDA device: {}", s.reason);
        return;
      }
      register_with_core();
      core::info("CUDA backend: device {} ({}, compute capability {}.{})", s.index, s.name, s.cc / 10, s.cc % 10);
    } catch (const std::exception& e) {
      core::info("CUDA backend: not available: {}", e.what());
    }
  }
};
const LoadTimeInit g_load_time_init;

}  // namespace

bool device_found() { return state().found; }

Support device_support() {
  const DeviceState& s = state();
  if (!s.found) return Support::no("no CUDA device: " + s.reason);
  // Belt and braces: registered at load, but re-registered if the core's table
  // was (re)initialised after this file's load-time initialiser ran.
  static std::once_flag checked;
  std::call_once(checked, [] {
    if (!device_memory(Device::cuda)) register_with_core();
  });
  return Support::yes();
}

int compute_capability() { return state().cc; }

std::string device_unavailable_reason() { return state().found ? std::string() : state().reason; }
std::string device_description() {
  const DeviceState& s = state();
  return s.found ? fmt::format("{}, compute capability {}.{}", s.name, s.cc / 10, s.cc % 10) : std::string();
}
GraphStats graph_stats() { return GraphStats{g_captures.load(), g_launches.load(), g_failures.load()}; }

void use_device() {
  thread_local bool selected = false;
  if (selected) return;
  const DeviceState& s = state();
  if (!s.found) throw Error("no CUDA device: " + s.reason);
  check(cudaSetDevice(s.index), "cudaSetDevice");
  selected = true;
}

cudaStream_t Queue::stream() {
  std::call_once(created_, [this] {
    try {
      use_device();
      cudaError_t err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
      if (err != cudaSuccess) {
        error_ = fmt::format("cannot create a CUDA stream: {}", cudaGetErrorString(err));
        cudaGetLastError();
        stream_ = nullptr;
      }
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
  if (!stream_) throw Error(error_);
  use_device();
  return stream_;
}

Queue::~Queue() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (const auto& [destroy, handle] : handles_to_release) destroy(handle);
  if (stream_) cudaStreamDestroy(stream_);
  cudaGetLastError();  // nothing to report from a destructor
}

Queue& queue() {
  if (t_queue) return *t_queue;
  static Queue* const default_queue = new Queue();  // never destroyed: the driver may be gone at exit
  return *default_queue;
}

cudaStream_t stream() { return queue().stream(); }

bool capturing() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream(), &st) == cudaSuccess && st == cudaStreamCaptureStatusActive;
}

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
  throw Error(fmt::format("CUDA error in {}: {}", what, cudaGetErrorString(err)));
}

// ---------------------------------------------------------------------------
// Buffers

DeviceBuffer::DeviceBuffer(std::size_t bytes) : n_(bytes) {
  if (!bytes) return;
  use_device();
  if (cudaMalloc(&p_, bytes) != cudaSuccess) {
    cudaError_t err = cudaGetLastError();
    p_ = nullptr;
    throw Error(fmt::format("out of CUDA memory: {} bytes ({})", bytes, cudaGetErrorString(err)));
  }
  cudaError_t err = cudaMemsetAsync(p_, 0, bytes, stream());
  if (err != cudaSuccess) {
    cudaFree(p_);
    p_ = nullptr;
    check(err, "cudaMemsetAsync");
  }
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) : n_(bytes) {
  if (!bytes) return;
  use_device();
  if (cudaMallocHost(&p_, bytes) != cudaSuccess) {
    cudaError_t err = cudaGetLastError();
    p_ = nullptr;
    throw Error(fmt::format("out of page-locked host memory: {} bytes ({})", bytes, cudaGetErrorString(err)));
  }
  std::memset(p_, 0, bytes);
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFreeHost(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

Event::Event() {
  use_device();
  check(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreate");
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

DeviceBuffer upload(const void* host, std::size_t bytes) {
  DeviceBuffer b(bytes);
  if (bytes) {
    check(cudaMemcpyAsync(b.get(), host, bytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (weights)");
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (weights)");
  }
  return b;
}

uint16_t to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 2^16: infinity
  if (ax < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24
    float a;
    std::memcpy(&a, &ax, 4);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

DeviceBuffer upload_floats(const float* values, std::size_t count, DType dtype) {
  if (dtype == DType::float16) {
    std::vector<uint16_t> h(count);
    for (std::size_t i = 0; i < count; ++i) h[i] = to_half_bits(values[i]);
    return upload(h.data(), count * 2);
  }
  return upload(values, count * 4);
}

std::vector<float> weight_values(const Blob& w) {
  const float* p = w.data_as<float>();
  return std::vector<float>(p, p + w.numel());
}

// ---------------------------------------------------------------------------
// Shared support checks

Support schema_support(const Schema& s, bool nhwc_ok) {
  if (Support d = device_support(); !d) return d;
  if (s.device != Device::cuda) return Support::no(fmt::format("computes on the CUDA device, not in {}", s.to_string()));
  if (s.dtype != DType::float32 && s.dtype != DType::float16)
    return Support::no(fmt::format("computes in float32 or float16, not {}", to_string(s.dtype)));
  if (s.layout != Layout::nchw && !(nhwc_ok && s.layout == Layout::nhwc))
    return Support::no(fmt::format("does not compute in layout {}", to_string(s.layout)));
  return Support::yes();
}

Support float_weights(const Layer& l, std::initializer_list<const char*> keys) {
  return routines::float_weights(l, keys, "the CUDA upload");
}

}  // namespace softneuro::cuda
