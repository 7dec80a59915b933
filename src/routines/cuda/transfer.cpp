// Adapt routines between the CPU and the CUDA device, and on the device:
//   "cuda[:float16][:nhwc]/transfer"  host -> device: from cpu float32/float16, nchw/nhwc
//   "cpu[:float16][:nhwc]/transfer"   device -> host: from cuda float32/float16, nchw/nhwc
//   "cuda[:float16][:nhwc]/convert"   on the device: float32 <-> float16 and/or nchw <-> nhwc
// A transfer that also changes dtype or layout converts on the device (the
// host side only copies), through device workspace planned by the executor.
//
// Transfers go through page-locked staging buffers allocated in prepare(), with
// cudaMemcpyAsync on the backend's stream:
//  - host -> device copies the host blob into staging (after the previous copy
//    out of it is done: an event) and queues the upload; nothing waits for it.
//  - device -> host queues the download and waits for it, since the consumer
//    is CPU code that runs next; then copies staging into the host blob.
// The upload checks the values for NaN and inf as it copies them into staging
// (PreparedRoutine::checks_non_finite): the session then scans no net input
// that only uploads read, and asks after the run.
// While the stream is recorded into a CUDA graph (core/device_graph.hpp) the
// host-side copies become host nodes of the graph (cudaLaunchHostFunc) that
// read the blob's memory when the graph is replayed: the executor re-points
// net inputs and outputs at the caller's memory on every run.
#include "core/narrow_types.hpp"
#include "routines/cuda/common.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace softneuro::cuda {
namespace {

bool movable_dtype(DType t) { return t == DType::float32 || t == DType::float16; }
bool movable_layout(Layout l) { return l == Layout::nchw || l == Layout::nhwc; }

std::vector<Schema> schemas_on(Device d) {
  std::vector<Schema> out;
  for (DType t : {DType::float32, DType::float16})
    for (Layout l : {Layout::nchw, Layout::nhwc}) out.push_back(Schema{d, t, l});
  return out;
}

Support movable(const Schema& from, const Schema& to, Device from_device) {
  if (Support d = device_support(); !d) return d;
  if (from.device != from_device)
    return Support::no(fmt::format("converts from {} blobs, not from {}", to_string(from_device), from.to_string()));
  if (!movable_dtype(from.dtype) || !movable_dtype(to.dtype))
    return Support::no(fmt::format("moves float32/float16 only, not {} -> {}", from.to_string(), to.to_string()));
  if (!movable_layout(from.layout) || !movable_layout(to.layout))
    return Support::no(fmt::format("moves nchw/nhwc only, not {} -> {}", from.to_string(), to.to_string()));
  if (from == to) return Support::no("nothing to convert");
  return Support::yes();
}

/// The on-device conversion between two schemas of a blob (none when equal up to device).
struct Conversion {
  bool needed = false;
  kern::Elem from_t{}, to_t{};
  bool from_nhwc = false, to_nhwc = false;
  NCS v;
  Conversion(const Shape& shape, const Schema& from, const Schema& to)
      : needed(from.dtype != to.dtype || from.layout != to.layout),
        from_t(elem(from.dtype)),
        to_t(elem(to.dtype)),
        from_nhwc(from.layout == Layout::nhwc),
        to_nhwc(to.layout == Layout::nhwc),
        v(ncs_of(shape)) {}
  void run(const void* x, void* y) const {
    check(kern::convert(from_t, from_nhwc, to_t, to_nhwc, x, y, v.n, v.c, v.s, stream()), "convert kernel");
  }
};

/// Copies `bytes` of floating-point values of `dtype` (float32 or float16) and
/// says whether any is NaN or inf, in one pass: each piece is checked while it
/// is still in cache after its copy.
bool copy_checking_finite(void* dst, const void* src, std::size_t bytes, DType dtype) {
  constexpr std::size_t kPiece = 16384;
  const std::size_t width = elem_bytes(dtype);
  bool found = false;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (std::size_t at = 0; at < bytes; at += kPiece) {
    const std::size_t n = std::min(kPiece, bytes - at);
    std::memcpy(d + at, s + at, n);
    found = core::holds_non_finite(d + at, n / width, dtype) || found;
  }
  return found;
}

// ---------------------------------------------------------------------------

class HostToDevice final : public Prepared {
 public:
  HostToDevice(const Shape& shape, const Schema& from, const Schema& to)
      : conv_(shape, from, to), dtype_(from.dtype), bytes_(storage_bytes(shape, from.dtype, from.layout)), staging_(bytes_) {}
  std::size_t workspace_bytes() const override { return conv_.needed ? bytes_ : 0; }
  bool checks_non_finite() const override { return true; }
  bool saw_non_finite() const override { return non_finite_.load(std::memory_order_relaxed); }
  void run(const RunArgs& a) override {
    if (!bytes_) return;
    const bool recording = capturing();
    void* dst = conv_.needed ? a.workspace : a.outputs[0]->data();
    if (recording) {
      source_ = a.inputs[0];
      check(cudaLaunchHostFunc(stream(), &HostToDevice::fill, this), "cudaLaunchHostFunc");
    } else {
      check(cudaEventSynchronize(done_.get()), "cudaEventSynchronize");  // staging is free again
      non_finite_.store(copy_checking_finite(staging_.get(), a.inputs[0]->data(), bytes_, dtype_),
                        std::memory_order_relaxed);
    }
    check(cudaMemcpyAsync(dst, staging_.get(), bytes_, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (upload)");
    if (!recording) check(cudaEventRecord(done_.get(), stream()), "cudaEventRecord");
    if (conv_.needed) conv_.run(a.workspace, a.outputs[0]->data());
  }

 private:
  static void CUDART_CB fill(void* self) {
    auto* p = static_cast<HostToDevice*>(self);
    p->non_finite_.store(copy_checking_finite(p->staging_.get(), p->source_->data(), p->bytes_, p->dtype_),
                         std::memory_order_relaxed);
  }
  Conversion conv_;
  DType dtype_;
  std::size_t bytes_;
  PinnedBuffer staging_;
  Event done_;
  const Blob* source_ = nullptr;  // read by fill() when a recorded graph replays
  std::atomic<bool> non_finite_{false};  // written by run() or fill(), read after the run
};

class DeviceToHost final : public Prepared {
 public:
  DeviceToHost(const Shape& shape, const Schema& from, const Schema& to)
      : conv_(shape, from, to), bytes_(storage_bytes(shape, to.dtype, to.layout)), staging_(bytes_) {}
  std::size_t workspace_bytes() const override { return conv_.needed ? bytes_ : 0; }
  void run(const RunArgs& a) override {
    if (!bytes_) return;
    const void* src = a.inputs[0]->data();
    if (conv_.needed) {
      conv_.run(src, a.workspace);
      src = a.workspace;
    }
    check(cudaMemcpyAsync(staging_.get(), src, bytes_, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync (download)");
    if (capturing()) {
      target_ = a.outputs[0];
      check(cudaLaunchHostFunc(stream(), &DeviceToHost::drain, this), "cudaLaunchHostFunc");
      return;
    }
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (download)");
    std::memcpy(a.outputs[0]->data(), staging_.get(), bytes_);
  }

 private:
  static void CUDART_CB drain(void* self) {
    auto* p = static_cast<DeviceToHost*>(self);
    std::memcpy(p->target_->data(), p->staging_.get(), p->bytes_);
  }
  Conversion conv_;
  std::size_t bytes_;
  PinnedBuffer staging_;
  Blob* target_ = nullptr;  // written by drain() when a recorded graph replays
};

class OnDevice final : public Prepared {
 public:
  OnDevice(const Shape& shape, const Schema& from, const Schema& to) : conv_(shape, from, to) {}
  void run(const RunArgs& a) override { conv_.run(a.inputs[0]->data(), a.outputs[0]->data()); }

 private:
  Conversion conv_;
};

// ---------------------------------------------------------------------------

template <class P, Device To, Device From>
class CudaAdapt final : public Routine {
 public:
  explicit CudaAdapt(std::string_view algorithm) : algorithm_(algorithm) {}
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override { return algorithm_; }
  std::vector<Schema> schemas() const override { return schemas_on(To); }
  Support supports(const LayerInfo& info, const Schema& to) const override {
    if (!info.layer) return Support::no("no layer");
    return movable(Schema::parse(info.layer->get_string("from")), to, From);
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams&) const override {
    const Schema from = Schema::parse(info.layer->get_string("from"));
    if (Support s = movable(from, to, From); !s)
      throw Error(fmt::format("{} cannot convert {} to {}: {}", make_descriptor(to, algorithm_), from.to_string(),
                              to.to_string(), s.reason));
    return std::make_unique<P>(info.input_shapes.at(0), from, to);
  }

 private:
  std::string_view algorithm_;
};

using Upload = CudaAdapt<HostToDevice, Device::cuda, Device::cpu>;
using Download = CudaAdapt<DeviceToHost, Device::cpu, Device::cuda>;
using Convert = CudaAdapt<OnDevice, Device::cuda, Device::cuda>;

struct Registration {
  Registration() {
    register_routine(std::make_unique<Upload>("transfer"));
    register_routine(std::make_unique<Download>("transfer"));
    register_routine(std::make_unique<Convert>("convert"));
  }
};
const Registration g_registration;

}  // namespace
}  // namespace softneuro::cuda
