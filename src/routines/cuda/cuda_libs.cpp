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

Cublas load_cublas() {
  Cublas t;
  if (Support d = device_support(); !d) {
    t.error = d.reason;
    return t;
  }
  const char* soname = "libcublas.so." SOFTNEURO_STR(CUBLAS_VER_MAJOR);
  void* lib = open_library(soname, t.error);
  if (!lib) {
    t.error = fmt::format("cuBLAS unavailable: {}", t.error);
    return t;
  }
  bool ok = true;
  SOFTNEURO_CUBLAS_FUNCTIONS(SOFTNEURO_RESOLVE)
  if (!ok) {
    t.error = fmt::format("cuBLAS unavailable: {}: {}", soname, t.error);
    return t;
  }
  try {
    cublasStatus_t st = t.api.cublasCreate_v2(&t.handle);
    if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cublasCreate: {}", t.api.cublasGetStatusString(st)));
    st = t.api.cublasSetStream_v2(t.handle, stream());
    if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cublasSetStream: {}", t.api.cublasGetStatusString(st)));
    // float32 stays float32: no TF32 tensor-op math unless a routine asks for it.
    t.api.cublasSetMathMode(t.handle, CUBLAS_DEFAULT_MATH);
  } catch (const std::exception& e) {
    t.error = fmt::format("cuBLAS unavailable: {}", e.what());
    t.handle = nullptr;
  }
  return t;
}

CublasLt load_cublaslt() {
  CublasLt t;
  if (Support d = device_support(); !d) {
    t.error = d.reason;
    return t;
  }
  const char* soname = "libcublasLt.so." SOFTNEURO_STR(CUBLAS_VER_MAJOR);
  void* lib = open_library(soname, t.error);
  if (!lib) {
    t.error = fmt::format("cuBLASLt unavailable: {}", t.error);
    return t;
  }
  bool ok = true;
  SOFTNEURO_CUBLASLT_FUNCTIONS(SOFTNEURO_RESOLVE)
  if (!ok) {
    t.error = fmt::format("cuBLASLt unavailable: {}: {}", soname, t.error);
    return t;
  }
  try {
    use_device();
    cublasStatus_t st = t.api.cublasLtCreate(&t.handle);
    if (st != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cublasLtCreate: {}", t.api.cublasLtGetStatusString(st)));
  } catch (const std::exception& e) {
    t.error = fmt::format("cuBLASLt unavailable: {}", e.what());
    t.handle = nullptr;
  }
  return t;
}

Cudnn load_cudnn() {
  Cudnn t;
  if (Support d = device_support(); !d) {
    t.error = d.reason;
    return t;
  }
  const char* soname = "libcudnn.so." SOFTNEURO_STR(CUDNN_MAJOR);
  void* lib = open_library(soname, t.error);
  if (!lib) {
    t.error = fmt::format("cuDNN unavailable: {}", t.error);
    return t;
  }
  bool ok = true;
  SOFTNEURO_CUDNN_FUNCTIONS(SOFTNEURO_RESOLVE)
  if (!ok) {
    t.error = fmt::format("cuDNN unavailable: {}: {}", soname, t.error);
    return t;
  }
  if (t.api.cudnnGetVersion() / 10000 != CUDNN_MAJOR)
    {
    t.error = fmt::format("cuDNN unavailable: version {} is loaded, this build needs {}.x",
                                 t.api.cudnnGetVersion(), CUDNN_MAJOR);
    return t;
  }
  try {
    use_device();
    cudnnStatus_t st = t.api.cudnnCreate(&t.handle);
    if (st != CUDNN_STATUS_SUCCESS) throw Error(fmt::format("cudnnCreate: {}", t.api.cudnnGetErrorString(st)));
    st = t.api.cudnnSetStream(t.handle, stream());
    if (st != CUDNN_STATUS_SUCCESS) throw Error(fmt::format("cudnnSetStream: {}", t.api.cudnnGetErrorString(st)));
  } catch (const std::exception& e) {
    t.error = fmt::format("cuDNN unavailable: {}", e.what());
    t.handle = nullptr;
  }
  return t;
}

// Opened once, never closed: handles live as long as the process (destroying
// them at exit, after the driver may be gone, gains nothing).
template <class T, T (*Load)()>
const T& once() {
  static const T* lib = [] {
    T* t = new T(Load());
    if (!t->error.empty()) core::info("CUDA backend: {}", t->error);
    return t;
  }();
  return *lib;
}

}  // namespace

const Cublas& cublas() { return once<Cublas, load_cublas>(); }
const CublasLt& cublaslt() { return once<CublasLt, load_cublaslt>(); }
const Cudnn& cudnn() { return once<Cudnn, load_cudnn>(); }

namespace {
Support lib_support(const std::string& error) { return error.empty() ? Support::yes() : Support::no(error); }
}  // namespace

Support cublas_support() {
  if (Support d = device_support(); !d) return d;
  return lib_support(cublas().error);
}
Support cublaslt_support() {
  if (Support d = device_support(); !d) return d;
  return lib_support(cublaslt().error);
}
Support cudnn_support() {
  if (Support d = device_support(); !d) return d;
  return lib_support(cudnn().error);
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const char* text = cublas().api.cublasGetStatusString ? cublas().api.cublasGetStatusString(st) : "unknown status";
  throw Error(fmt::format("cuBLAS error in {}: {} ({})", what, text, static_cast<int>(st)));
}

void check_cublaslt(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const char* text = cublaslt().api.cublasLtGetStatusString ? cublaslt().api.cublasLtGetStatusString(st) : "unknown status";
  throw Error(fmt::format("cuBLASLt error in {}: {} ({})", what, text, static_cast<int>(st)));
}

void check_cudnn(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  const char* text = cudnn().api.cudnnGetErrorString ? cudnn().api.cudnnGetErrorString(st) : "unknown status";
  throw Error(fmt::format("cuDNN error in {}: {} ({})", what, text, static_cast<int>(st)));
}

}  // namespace softneuro::cuda
