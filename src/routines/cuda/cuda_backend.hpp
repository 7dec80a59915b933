// The CUDA backend's shared pieces: the device found at library load, the
// queues CUDA routines run on, error checks, device and pinned buffers for
// prepare(), and the base class of prepared CUDA routines.
//
// Threading: each session owns a Queue (a stream and its own cuBLAS,
// cuBLASLt and cuDNN handles), bound to the thread that prepares and runs its
// executors (core/device_hooks.hpp); work outside a session (unit profiling,
// tests) runs on the default queue. A queue runs its work in order; like a
// Session, it is used from one thread at a time.
#pragma once

#include <softneuro/routine.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace softneuro::cuda {

/// Whether a usable CUDA device was found at library load (its memory is then
/// registered for Device::cuda and device_memory(Device::cuda) is non-null).
bool device_found();
/// Support::yes() with a usable device, else Support::no("no CUDA device: <why>").
Support device_support();
/// Compute capability of the device as 10 * major + minor (0 without one).
int compute_capability();

/// A stream and the library handles on it, made on first use (cuda_libs.cpp
/// makes the handles and registers their release in `handles_to_release`).
struct Queue {
  Queue() = default;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;
  /// Waits for its work, releases its handles, destroys the stream.
  ~Queue();
  /// The stream (created on first use; it never waits for the legacy default
  /// stream). Throws Error when the device is unusable.
  cudaStream_t stream();

  void* cublas = nullptr;    ///< cublasHandle_t on stream()
  void* cublaslt = nullptr;  ///< cublasLtHandle_t (streams are given per call)
  void* cudnn = nullptr;     ///< cudnnHandle_t on stream()
  /// The workspace the cuBLAS handle was last given (set again only when it changes).
  void* cublas_workspace = nullptr;
  std::size_t cublas_workspace_bytes = 0;
  /// Each handle with its destroyer, run by ~Queue.
  std::vector<std::pair<void (*)(void*), void*>> handles_to_release;

 private:
  std::once_flag created_;  // (the default queue is reached from any thread)
  cudaStream_t stream_ = nullptr;
  std::string error_;
};

/// The calling thread's current queue: its session's while the session's
/// executor prepares or runs, else the default queue (never destroyed).
Queue& queue();
/// queue().stream(): the stream every CUDA routine queues its work on.
cudaStream_t stream();
/// Whether stream() is being recorded into a CUDA graph right now.
bool capturing();
/// Selects the backend's device for the calling thread (cheap after the first call).
void use_device();

/// Throws softneuro::Error("CUDA error in <what>: <reason>") unless `err` is cudaSuccess.
void check(cudaError_t err, const char* what);

/// Device memory owned by a prepared routine (weights); freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` (zero-filled); throws Error naming the size when out of memory.
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* get() const noexcept { return p_; }
  template <class T> T* as() const noexcept { return static_cast<T*>(p_); }
  std::size_t size() const noexcept { return n_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

/// Page-locked host memory (staging for asynchronous transfers).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  void* get() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

/// A CUDA event for ordering host work after queued device work.
class Event {
 public:
  Event();
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  cudaEvent_t get() const noexcept { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

/// Copies `bytes` of host memory into a new device buffer (prepare time: waits for the copy).
DeviceBuffer upload(const void* host, std::size_t bytes);
/// Float values as `dtype` (float32 or float16) in a new device buffer.
DeviceBuffer upload_floats(const float* values, std::size_t count, DType dtype);
inline DeviceBuffer upload_floats(const std::vector<float>& v, DType dtype) {
  return upload_floats(v.data(), v.size(), dtype);
}
/// A float32 CPU weight's values (Support checked by float_weights) as a vector.
std::vector<float> weight_values(const Blob& weight);

/// IEEE binary16 bits of a float, round to nearest even (host side).
uint16_t to_half_bits(float f);

/// Checks shared by every CUDA routine: a usable device and a schema on it in
/// float32 or float16, in nchw (or nhwc when `nhwc_ok`).
Support schema_support(const Schema& schema, bool nhwc_ok);
/// Weights the routine uploads must be float32 CPU blobs with data.
Support float_weights(const Layer& layer, std::initializer_list<const char*> keys);
/// Bytes per element of a CUDA schema's dtype (4 or 2).
inline std::size_t elem_bytes(DType t) { return t == DType::float16 ? 2 : 4; }

/// Base of every prepared CUDA routine: its workspace is device memory, and it
/// says whether its run() may be recorded into a CUDA graph (it only queues
/// work on stream() and keeps its pointers; see core/device_graph.hpp).
class Prepared : public PreparedRoutine {
 public:
  Device workspace_device() const override { return Device::cuda; }
  virtual bool capturable() const { return true; }
};

}  // namespace softneuro::cuda
