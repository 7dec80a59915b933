// cuBLAS, cuBLASLt and cuDNN, opened with dlopen on first use (so the library
// loads, fast, where they are not installed), with one handle each per queue
// (cuda_backend.hpp: a session's stream), made on the queue's first use.
// Call through the tables: cublas().api.cublasGemmEx(cublas().handle, ...).
#pragma once

#include "routines/cuda/cuda_backend.hpp"

#include <cublasLt.h>
#include <cublas_api.h>
#include <cudnn.h>

#include <string>

namespace softneuro::cuda {

#define SOFTNEURO_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate_v2)                  \
  X(cublasDestroy_v2)                 \
  X(cublasSetStream_v2)               \
  X(cublasSetWorkspace_v2)            \
  X(cublasSetMathMode)                \
  X(cublasGemmEx)                     \
  X(cublasGemmStridedBatchedEx)       \
  X(cublasGetStatusString)

#define SOFTNEURO_CUBLASLT_FUNCTIONS(X)   \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmul)                       \
  X(cublasLtGetStatusString)

#define SOFTNEURO_CUDNN_FUNCTIONS(X)          \
  X(cudnnGetVersion)                          \
  X(cudnnGetErrorString)                      \
  X(cudnnCreate)                              \
  X(cudnnDestroy)                             \
  X(cudnnSetStream)                           \
  X(cudnnCreateTensorDescriptor)              \
  X(cudnnSetTensor4dDescriptor)               \
  X(cudnnDestroyTensorDescriptor)             \
  X(cudnnCreateFilterDescriptor)              \
  X(cudnnSetFilter4dDescriptor)               \
  X(cudnnDestroyFilterDescriptor)             \
  X(cudnnCreateConvolutionDescriptor)         \
  X(cudnnSetConvolution2dDescriptor)          \
  X(cudnnSetConvolutionGroupCount)            \
  X(cudnnSetConvolutionMathType)              \
  X(cudnnDestroyConvolutionDescriptor)        \
  X(cudnnGetConvolution2dForwardOutputDim)    \
  X(cudnnGetConvolutionForwardWorkspaceSize)  \
  X(cudnnGetConvolutionForwardAlgorithm_v7)   \
  X(cudnnConvolutionForward)                  \
  X(cudnnConvolutionBiasActivationForward)    \
  X(cudnnCreateActivationDescriptor)          \
  X(cudnnSetActivationDescriptor)             \
  X(cudnnDestroyActivationDescriptor)

// Function pointer types: decltype of the declaration, except for the two cuBLAS
// functions its header overloads in C++ (spelled out, and checked against it
// in an unevaluated context, so nothing links to cuBLAS).
#define SOFTNEURO_DECLARE_TYPE(f) using FunctionType_##f = decltype(&::f);
#define SOFTNEURO_CUBLAS_NOT_OVERLOADED(X) \
  X(cublasCreate_v2)                       \
  X(cublasDestroy_v2)                      \
  X(cublasSetStream_v2)                    \
  X(cublasSetWorkspace_v2)                 \
  X(cublasSetMathMode)                     \
  X(cublasGetStatusString)
SOFTNEURO_CUBLAS_NOT_OVERLOADED(SOFTNEURO_DECLARE_TYPE)
SOFTNEURO_CUBLASLT_FUNCTIONS(SOFTNEURO_DECLARE_TYPE)
SOFTNEURO_CUDNN_FUNCTIONS(SOFTNEURO_DECLARE_TYPE)
using FunctionType_cublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                     int, const void*, const void*, cudaDataType, int, const void*,
                                                     cudaDataType, int, const void*, void*, cudaDataType, int,
                                                     cublasComputeType_t, cublasGemmAlgo_t);
using FunctionType_cublasGemmStridedBatchedEx =
    cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                       cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
                       void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(sizeof(static_cast<FunctionType_cublasGemmEx>(&::cublasGemmEx)) > 0);
static_assert(sizeof(static_cast<FunctionType_cublasGemmStridedBatchedEx>(&::cublasGemmStridedBatchedEx)) > 0);

#define SOFTNEURO_DECLARE_POINTER(f) FunctionType_##f f = nullptr;

struct CublasApi {
  SOFTNEURO_CUBLAS_FUNCTIONS(SOFTNEURO_DECLARE_POINTER)
};
struct CublasLtApi {
  SOFTNEURO_CUBLASLT_FUNCTIONS(SOFTNEURO_DECLARE_POINTER)
};
struct CudnnApi {
  SOFTNEURO_CUDNN_FUNCTIONS(SOFTNEURO_DECLARE_POINTER)
};

/// A library's functions and the current queue's handle.
struct Cublas {
  const CublasApi& api;
  cublasHandle_t handle;
};
struct CublasLt {
  const CublasLtApi& api;
  cublasLtHandle_t handle;
};
struct Cudnn {
  const CudnnApi& api;
  cudnnHandle_t handle;
};

/// The library (opened on the first call of any queue) with the current
/// queue's handle (made on its first call, on its stream). Throws Error when
/// the device, the library or the handle is unusable; the *_support()
/// functions below say so without throwing.
Cublas cublas();
CublasLt cublaslt();
Cudnn cudnn();

/// The library's functions alone, for what needs no handle (descriptors, their
/// release in destructors). Throws Error when the library did not open.
const CublasApi& cublas_api();
const CublasLtApi& cublaslt_api();
const CudnnApi& cudnn_api();

/// Gives the current queue's cuBLAS handle this workspace, when it is not the one it has.
void set_cublas_workspace(void* workspace, std::size_t bytes);

/// Support::yes() when the device and the library are usable.
Support cublas_support();
Support cublaslt_support();
Support cudnn_support();

/// Throw softneuro::Error("<library> error in <what>: <status text>") unless the call succeeded.
void check_cublas(cublasStatus_t st, const char* what);
void check_cublaslt(cublasStatus_t st, const char* what);
void check_cudnn(cudnnStatus_t st, const char* what);

}  // namespace softneuro::cuda
