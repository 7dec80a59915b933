#include "routines/cuda/cuda_libs.hpp"

#include "core/log.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

#include <mutex>

#define SOFTNEURO_STR_INNER(x) #x
#define SOFTNEURO_STR(x) SOFTNEURO_STR_INNER(x)

namespace softneuro::cuda {
namespace {

/// dlopen by soname (the loader's search path), then from the toolkit folder found at build time.
void* open_library(const char* soname, std::string& error) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h) return h;
  error = dlerror();
#ifdef SOFTNEURO_CUDA_LIBDIR
  std::string path = fmt::format("{}/{}", SOFTNEURO_CUDA_LIBDIR, soname);
  h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h) {
    error.clear();
    return h;
  }
#endif
  return nullptr;
}

template <class Table>
bool resolve(void* lib, const char* name, Table& slot, std::string& error) {
  void* p = dlsym(lib, name);
  if (!p) {
    error = fmt::format("symbol {} not found", name);
    return false;
  }
  slot = reinterpret_cast<Table>(p);
  return true;
}

#define SOFTNEURO_RESOLVE(f) ok = ok && resolve(lib, #f, t.api.f, t.error);

/// A library's function table; `error` is empty when it opened.
template <class Api>
struct Loaded {
  std::string error;
  Api api;
};

/// The library's dlopen handle, or nullptr with t.error saying why.
template <class Api>
void* open_into(Loaded<Api>& t, const char* soname, const char* name) {
  if (Support d = device_support(); !d) {
    t.error = d.reason;
    return nullptr;
  }
  void* lib = open_library(soname, t.error);
  if (!lib) t.error = fmt::format("{} unavailable: {}", name, t.error);
  return lib;
}

Loaded<CublasApi> load_cublas() {
  Loaded<CublasApi> t;
  const char* soname = "libcublas.so." SOFTNEURO_STR(CUBLAS_VER_MAJOR);
  void* lib = open_into(t, soname, "cuBLAS");
  if (!lib) return t;
  bool ok = true;
  SOFTNEURO_CUBLAS_FUNCTIONS(SOFTNEURO_RESOLVE)
  if (!ok) t.error = fmt::format("cuBLAS unavailable: {}: {}", soname, t.error);
  return t;
}

Loaded<CublasLtApi> load_cublaslt() {
  Loaded<CublasLtApi> t;
  const char* soname = "libcublasLt.so." SOFTNEURO_STR(CUBLAS_VER_MAJOR);
  void* lib = open_into(t, soname, "cuBLASLt");
  if (!lib) return t;
  bool ok = true;
  SOFTNEURO_CUBLASLT_FUNCTIONS(SOFTNEURO_RESOLVE)
  if (!ok) t.error = fmt::format("cuBLASLt unavailable: {}: {}", soname, t.error);
  return t;
}

Loaded<CudnnApi> load_cudnn() {
  Loaded<CudnnApi> t;
  const char* soname = "libcudnn.so." SOFTNEURO_STR(CUDNN_MAJOR);
  void* lib = open_into(t, soname, "cuDNN");
  if (!lib) return t;
  bool ok = true;
  SOFTNEURO_CUDNN_FUNCTIONS(SOFTNEURO_RESOLVE)
  if (!ok) {
    t.error = fmt::format("cuDNN unavailable: {}: {}", soname, t.error);
  } else if (t.api.cudnnGetVersion() / 10000 != CUDNN_MAJOR) {
    t.error = fmt::format("cuDNN unavailable: version {} is loaded, this build needs {}.x", t.api.cudnnGetVersion(),
                          CUDNN_MAJOR);
  }
  return t;
}

// Opened once, never closed.
template <class Api, Loaded<Api> (*Load)()>
const Loaded<Api>& once() {
  static const Loaded<Api>* lib = [] {
    auto* t = new Loaded<Api>(Load());
    if (!t->error.empty()) core::info("CUDA backend: {}", t->error);
    return t;
  }();
  return *lib;
}
const Loaded<CublasApi>& cublas_lib() { return once<CublasApi, load_cublas>(); }
const Loaded<CublasLtApi>& cublaslt_lib() { return once<CublasLtApi, load_cublaslt>(); }
const Loaded<CudnnApi>& cudnn_lib() { return once<CudnnApi, load_cudnn>(); }

template <class Api>
const Api& api_of(const Loaded<Api>& lib) {
  if (!lib.error.empty()) throw Error(lib.error);
  return lib.api;
}

/// The queue's handle in `slot`, made by `make` on first use; `destroy` registered with the queue.
template <class Handle>
Handle handle_of(Queue& q, void*& slot, Handle (*make)(Queue&), void (*destroy)(void*)) {
  if (!slot) {
    slot = make(q);
    q.handles_to_release.emplace_back(destroy, slot);
  }
  return static_cast<Handle>(slot);
}

cublasHandle_t make_cublas(Queue& q) {
  const CublasApi& f = api_of(cublas_lib());
  cublasHandle_t h = nullptr;
  cublasStatus_t st = f.cublasCreate_v2(&h);
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cuBLAS: cublasCreate: {}", f.cublasGetStatusString(st)));
  st = f.cublasSetStream_v2(h, q.stream());
  // float32 stays float32: no TF32 tensor-op math unless a routine asks for it.
  if (st == CUBLAS_STATUS_SUCCESS) st = f.cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) {
    f.cublasDestroy_v2(h);
    throw Error(fmt::format("cuBLAS: cublasSetStream: {}", f.cublasGetStatusString(st)));
  }
  return h;
}
void destroy_cublas(void* h) { cublas_lib().api.cublasDestroy_v2(static_cast<cublasHandle_t>(h)); }

cublasLtHandle_t make_cublaslt(Queue&) {
  const CublasLtApi& f = api_of(cublaslt_lib());
  use_device();
  cublasLtHandle_t h = nullptr;
  cublasStatus_t st = f.cublasLtCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cuBLASLt: cublasLtCreate: {}", f.cublasLtGetStatusString(st)));
  return h;
}
void destroy_cublaslt(void* h) { cublaslt_lib().api.cublasLtDestroy(static_cast<cublasLtHandle_t>(h)); }

cudnnHandle_t make_cudnn(Queue& q) {
  const CudnnApi& f = api_of(cudnn_lib());
  use_device();
  cudnnHandle_t h = nullptr;
  cudnnStatus_t st = f.cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS) throw Error(fmt::format("cuDNN: cudnnCreate: {}", f.cudnnGetErrorString(st)));
  st = f.cudnnSetStream(h, q.stream());
  if (st != CUDNN_STATUS_SUCCESS) {
    f.cudnnDestroy(h);
    throw Error(fmt::format("cuDNN: cudnnSetStream: {}", f.cudnnGetErrorString(st)));
  }
  return h;
}
void destroy_cudnn(void* h) { cudnn_lib().api.cudnnDestroy(static_cast<cudnnHandle_t>(h)); }

Support support_of(const std::string& lib_error, void (*make_handle)()) {
  if (Support d = device_support(); !d) return d;
  if (!lib_error.empty()) return Support::no(lib_error);
  try {
    make_handle();
  } catch (const std::exception& e) {
    return Support::no(e.what());
  }
  return Support::yes();
}

}  // namespace

Cublas cublas() {
  const CublasApi& f = api_of(cublas_lib());
  Queue& q = queue();
  return Cublas{f, handle_of<cublasHandle_t>(q, q.cublas, make_cublas, destroy_cublas)};
}
CublasLt cublaslt() {
  const CublasLtApi& f = api_of(cublaslt_lib());
  Queue& q = queue();
  return CublasLt{f, handle_of<cublasLtHandle_t>(q, q.cublaslt, make_cublaslt, destroy_cublaslt)};
}
Cudnn cudnn() {
  const CudnnApi& f = api_of(cudnn_lib());
  Queue& q = queue();
  return Cudnn{f, handle_of<cudnnHandle_t>(q, q.cudnn, make_cudnn, destroy_cudnn)};
}

const CublasApi& cublas_api() { return api_of(cublas_lib()); }
const CublasLtApi& cublaslt_api() { return api_of(cublaslt_lib()); }
const CudnnApi& cudnn_api() { return api_of(cudnn_lib()); }

void set_cublas_workspace(void* workspace, std::size_t bytes) {
  const Cublas lib = cublas();
  Queue& q = queue();
  if (q.cublas_workspace == workspace && q.cublas_workspace_bytes == bytes) return;
  check_cublas(lib.api.cublasSetWorkspace_v2(lib.handle, workspace, bytes), "cublasSetWorkspace");
  q.cublas_workspace = workspace;
  q.cublas_workspace_bytes = bytes;
}

Support cublas_support() { return support_of(cublas_lib().error, [] { cublas(); }); }
Support cublaslt_support() { return support_of(cublaslt_lib().error, [] { cublaslt(); }); }
Support cudnn_support() { return support_of(cudnn_lib().error, [] { cudnn(); }); }

void check_cublas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const char* text = cublas_lib().api.cublasGetStatusString ? cublas_lib().api.cublasGetStatusString(st) : "unknown status";
  throw Error(fmt::format("cuBLAS error in {}: {} ({})", what, text, static_cast<int>(st)));
}

void check_cublaslt(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const char* text = cublaslt_lib().api.cublasLtGetStatusString ? cublaslt_lib().api.cublasLtGetStatusString(st) : "unknown status";
  throw Error(fmt::format("cuBLASLt error in {}: {} ({})", what, text, static_cast<int>(st)));
}

void check_cudnn(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  const char* text = cudnn_lib().api.cudnnGetErrorString ? cudnn_lib().api.cudnnGetErrorString(st) : "unknown status";
  throw Error(fmt::format("cuDNN error in {}: {} ({})", what, text, static_cast<int>(st)));
}

}  // namespace softneuro::cuda
