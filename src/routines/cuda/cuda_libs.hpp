// cuBLAS, cuBLASLt and cuDNN, opened with dlopen on first use (so the library
// loads, fast, where they are not installed) with one handle each on the
// backend's stream. Call through the tables: cublas().api.cublasGemmEx(...).
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
  X(cudnnConvolutionForward)

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

/// A library with its handle on stream(); `error` is empty when usable.
struct Cublas {
  std::string error;
  CublasApi api;
  cublasHandle_t handle = nullptr;
};
struct CublasLt {
  std::string error;
  CublasLtApi api;
  cublasLtHandle_t handle = nullptr;
};
struct Cudnn {
  std::string error;
  CudnnApi api;
  cudnnHandle_t handle = nullptr;
};

/// Opened (and the handle created) on the first call; later calls are cheap.
/// Without a device they only say so in `error` and open nothing.
const Cublas& cublas();
const CublasLt& cublaslt();
const Cudnn& cudnn();

/// Support::yes() when the device and the library are usable.
Support cublas_support();
Support cublaslt_support();
Support cudnn_support();

/// Throw softneuro::Error("<library> error in <what>: <status text>") unless the call succeeded.
void check_cublas(cublasStatus_t st, const char* what);
void check_cublaslt(cublasStatus_t st, const char* what);
void check_cudnn(cudnnStatus_t st, const char* what);

}  // namespace softneuro::cuda
