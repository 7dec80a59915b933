// dense and matmul through cuBLAS and cuBLASLt, in cuda:float32 and cuda:float16:
//   dense  "cuda[:float16]/cublas"    cublasGemmEx, then bias + activation in our kernel
//   dense  "cuda[:float16]/cublaslt"  cublasLtMatmul with the bias (and relu) fused as an
//                                     epilogue; routine parameter "heuristic" = which of
//                                     cuBLASLt's top algorithms for the shape (0..3), each
//                                     measured by the profiler; other activations in our kernel
//   matmul "cuda[:float16]/cublas"    cublasGemmStridedBatchedEx (batch dims broadcast
//                                     when each operand's are all equal to the output's or all 1)
// Accumulation is float32 for both dtypes; float32 never uses TF32. The
// workspace (device, planned by the executor) is handed to the library each run.
#include "core/layer_types.hpp"
#include "routines/cuda/common.hpp"
#include "routines/cuda/cuda_libs.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace softneuro::cuda {
namespace {

constexpr std::size_t kAlign = 256;  // cuBLAS wants its workspace 256-byte aligned; the arena gives 64

std::size_t library_workspace() { return compute_capability() >= 90 ? (32u << 20) : (4u << 20); }
void* aligned(void* p) {
  auto v = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<void*>((v + kAlign - 1) / kAlign * kAlign);
}

cudaDataType_t data_type(DType t) { return t == DType::float16 ? CUDA_R_16F : CUDA_R_32F; }

int64_t prod(const Shape& s, int begin, int end) {
  int64_t p = 1;
  for (int d = begin; d < end; ++d) p *= s[d];
  return p;
}

Support fits_int(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > INT_MAX) return Support::no(fmt::format("dimension {} is beyond cuBLAS's int range", d));
  return Support::yes();
}

/// dense geometry: x [rows, K] row-major, W [O, K], y [rows, O].
struct DenseShape {
  int64_t rows, k, o;
  explicit DenseShape(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    rows = prod(s, 0, s.rank() - 1);
    k = s[s.rank() - 1];
    o = info.layer->weight("weight").shape()[0];
  }
};

Support dense_support(const LayerInfo& info, const Schema& schema, Support lib) {
  if (Support s = schema_support(schema, false); !s) return s;
  if (!lib) return lib;
  if (!info.layer) return Support::no("no layer");
  if (Support s = float_weights(*info.layer, {"weight", "bias"}); !s) return s;
  DenseShape d(info);
  return fits_int({d.rows, d.k, d.o, d.rows * d.o, d.o * d.k, d.rows * d.k});
}

// ---------------------------------------------------------------------------
// dense, cuBLAS: y^T (O x rows, column-major) = W^T(col-major K x O, transposed) * x^T (K x rows).

class PreparedGemm final : public Prepared {
 public:
  PreparedGemm(const LayerInfo& info, const Schema& s)
      : d_(info), t_(s.dtype), act_(act_params(core::fused_activation(*info.layer, /*with_affine=*/true, /*with_gelu=*/true))) {
    w_ = upload_floats(weight_values(info.layer->weight("weight")), t_);
    if (const Blob* b = info.layer->find_weight("bias")) bias_ = upload_floats(weight_values(*b), DType::float32);
  }
  std::size_t workspace_bytes() const override { return library_workspace() + kAlign; }
  void run(const RunArgs& a) override {
    const Cublas lib = cublas();
    set_cublas_workspace(aligned(a.workspace), library_workspace());
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t dt = data_type(t_);
    void* y = a.outputs[0]->data();
    check_cublas(lib.api.cublasGemmEx(lib.handle, CUBLAS_OP_T, CUBLAS_OP_N, int(d_.o), int(d_.rows), int(d_.k), &one,
                                      w_.get(), dt, int(d_.k), a.inputs[0]->data(), dt, int(d_.k), &zero, y, dt,
                                      int(d_.o), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
    if (bias_ || act_.kind != kern::Act::none || act_.affine)
      check(kern::channel_affine(elem(t_), y, y, nullptr, bias_.as<float>(), d_.rows, d_.o, 1, false, act_, stream()),
            "bias/activation kernel");
  }

 private:
  DenseShape d_;
  DType t_;
  kern::ActParams act_;
  DeviceBuffer w_, bias_;
};

class CublasDense final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "cublas"; }
  std::vector<Schema> schemas() const override {
    return {Schema{Device::cuda, DType::float32, Layout::nchw}, Schema{Device::cuda, DType::float16, Layout::nchw}};
  }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    return dense_support(info, schema, cublas_support());
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema,
                                           const RoutineParams&) const override {
    if (Support s = supports(info, schema); !s)
      throw Error(fmt::format("{} cannot run this layer: {}", make_descriptor(schema, "cublas"), s.reason), {},
                  info.layer ? info.layer->name : std::string(), "routine");
    return std::make_unique<PreparedGemm>(info, schema);
  }
};

// ---------------------------------------------------------------------------
// dense, cuBLASLt with a fused epilogue.

class PreparedLt final : public Prepared {
 public:
  PreparedLt(const LayerInfo& info, const Schema& s, int heuristic) : d_(info), t_(s.dtype) {
    const CublasLt lib = cublaslt();
    const CublasLtApi& f = lib.api;
    core::Activation act = core::fused_activation(*info.layer, /*with_affine=*/true, /*with_gelu=*/true);
    const Blob* b = info.layer->find_weight("bias");
    w_ = upload_floats(weight_values(info.layer->weight("weight")), t_);
    if (b) bias_ = upload_floats(weight_values(*b), t_);  // the epilogue reads bias in the output's type

    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    // relu in the epilogue unless an affine follows it: then the kernel after applies both.
    const bool relu_epilogue = act.kind == core::Activation::relu && !act.affine();
    if (relu_epilogue) epi = b ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (b) epi = CUBLASLT_EPILOGUE_BIAS;
    if (!relu_epilogue && (act.kind != core::Activation::none || act.affine())) rest_ = act_params(act);

    const cudaDataType_t dt = data_type(t_);
    check_cublaslt(f.cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check_cublaslt(f.cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
    check_cublaslt(f.cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
    check_cublaslt(f.cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "EPILOGUE");
    if (b) {
      const void* bp = bias_.get();
      check_cublaslt(f.cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                     "BIAS_POINTER");
    }
    const auto K = static_cast<uint64_t>(d_.k), O = static_cast<uint64_t>(d_.o), R = static_cast<uint64_t>(d_.rows);
    check_cublaslt(f.cublasLtMatrixLayoutCreate(&a_, dt, K, O, int64_t(K)), "cublasLtMatrixLayoutCreate (W)");
    check_cublaslt(f.cublasLtMatrixLayoutCreate(&b_, dt, K, R, int64_t(K)), "cublasLtMatrixLayoutCreate (x)");
    check_cublaslt(f.cublasLtMatrixLayoutCreate(&c_, dt, O, R, int64_t(O)), "cublasLtMatrixLayoutCreate (y)");

    cublasLtMatmulPreference_t pref = nullptr;
    check_cublaslt(f.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = library_workspace();
    const uint32_t align = 64;  // the arena's alignment of x and y
    f.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    f.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align);
    f.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    f.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t results[8] = {};
    int returned = 0;
    cublasStatus_t st = f.cublasLtMatmulAlgoGetHeuristic(lib.handle, op_, a_, b_, c_, c_, pref, 8, results, &returned);
    f.cublasLtMatmulPreferenceDestroy(pref);
    check_cublaslt(st, "cublasLtMatmulAlgoGetHeuristic");
    if (heuristic < 0 || heuristic >= returned)
      throw Error(fmt::format("cuBLASLt offers {} algorithms for this shape; #{} was asked for", returned, heuristic),
                  {}, info.layer->name, "heuristic");
    algo_ = results[heuristic].algo;
  }
  ~PreparedLt() override {
    const CublasLtApi& f = cublaslt_api();
    if (a_) f.cublasLtMatrixLayoutDestroy(a_);
    if (b_) f.cublasLtMatrixLayoutDestroy(b_);
    if (c_) f.cublasLtMatrixLayoutDestroy(c_);
    if (op_) f.cublasLtMatmulDescDestroy(op_);
  }
  std::size_t workspace_bytes() const override { return library_workspace() + kAlign; }
  void run(const RunArgs& a) override {
    const CublasLt lib = cublaslt();
    const float one = 1.0f, zero = 0.0f;
    void* y = a.outputs[0]->data();
    check_cublaslt(lib.api.cublasLtMatmul(lib.handle, op_, &one, w_.get(), a_, a.inputs[0]->data(), b_, &zero, y, c_, y,
                                          c_, &algo_, aligned(a.workspace), library_workspace(), stream()),
                   "cublasLtMatmul");
    if (rest_.kind != kern::Act::none || rest_.affine)
      check(kern::unary(elem(t_), rest_, y, y, d_.rows * d_.o, stream()), "activation kernel");
  }

 private:
  DenseShape d_;
  DType t_;
  kern::ActParams rest_;  // the activation no epilogue covers
  DeviceBuffer w_, bias_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

class CublasLtDense final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "cublaslt"; }
  std::vector<Schema> schemas() const override {
    return {Schema{Device::cuda, DType::float32, Layout::nchw}, Schema{Device::cuda, DType::float16, Layout::nchw}};
  }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    return dense_support(info, schema, cublaslt_support());
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {RoutineParamSpec{"heuristic", {0, 1, 2, 3}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema,
                                           const RoutineParams& params) const override {
    if (Support s = supports(info, schema); !s)
      throw Error(fmt::format("{} cannot run this layer: {}", make_descriptor(schema, "cublaslt"), s.reason), {},
                  info.layer ? info.layer->name : std::string(), "routine");
    return std::make_unique<PreparedLt>(info, schema, static_cast<int>(routine_param(params, "heuristic", 0)));
  }
};

// ---------------------------------------------------------------------------
// matmul (NumPy semantics), cuBLAS strided batched. Row-major C[m,n] = A[m,k] B[k,n]
// is column-major C^T (n x m) = B^T (n x k) * A^T (k x m).

struct MatmulShape {
  int64_t m = 1, k = 1, n = 1, batches = 1, stride_a = 0, stride_b = 0;
  bool ok = true;
  std::string why;
  explicit MatmulShape(const LayerInfo& info) {
    Shape a = info.input_shapes[0], b = info.input_shapes[1];
    if (a.rank() == 1) a = Shape{1, a[0]};
    if (b.rank() == 1) b = Shape{b[0], 1};
    m = a[a.rank() - 2];
    k = a[a.rank() - 1];
    n = b[b.rank() - 1];
    const int64_t ba = prod(a, 0, a.rank() - 2), bb = prod(b, 0, b.rank() - 2);
    batches = std::max(ba, bb);
    // Each operand's batch dims must be all of the output's (contiguous) or broadcast whole.
    Shape ab, bbs;
    for (int i = 0; i < a.rank() - 2; ++i) ab.push_back(a[i]);
    for (int i = 0; i < b.rank() - 2; ++i) bbs.push_back(b[i]);
    const int rank = std::max(ab.rank(), bbs.rank());
    auto dim = [](const Shape& s, int i, int rank) { int j = i - (rank - s.rank()); return j >= 0 ? s[j] : int64_t{1}; };
    for (int i = 0; i < rank; ++i) {
      const int64_t da = dim(ab, i, rank), db = dim(bbs, i, rank), o = da == 1 ? db : da;
      if ((ba != 1 && da != o) || (bb != 1 && db != o)) {
        ok = false;
        why = fmt::format("batch dims {} and {} broadcast partially", ab.to_string(), bbs.to_string());
      }
    }
    if (ok) batches = ba == 1 ? bb : ba;
    stride_a = ba == 1 ? 0 : m * k;
    stride_b = bb == 1 ? 0 : k * n;
  }
};

class PreparedMatmul final : public Prepared {
 public:
  PreparedMatmul(const LayerInfo& info, const Schema& s) : g_(info), t_(s.dtype) {}
  std::size_t workspace_bytes() const override { return library_workspace() + kAlign; }
  void run(const RunArgs& a) override {
    const Cublas lib = cublas();
    set_cublas_workspace(aligned(a.workspace), library_workspace());
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t dt = data_type(t_);
    check_cublas(lib.api.cublasGemmStridedBatchedEx(
                     lib.handle, CUBLAS_OP_N, CUBLAS_OP_N, int(g_.n), int(g_.m), int(g_.k), &one, a.inputs[1]->data(),
                     dt, int(g_.n), g_.stride_b, a.inputs[0]->data(), dt, int(g_.k), g_.stride_a, &zero,
                     a.outputs[0]->data(), dt, int(g_.n), g_.m * g_.n, int(g_.batches), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }

 private:
  MatmulShape g_;
  DType t_;
};

class CublasMatmul final : public Routine {
 public:
  std::string_view layer_type() const override { return "matmul"; }
  std::string_view algorithm() const override { return "cublas"; }
  std::vector<Schema> schemas() const override {
    return {Schema{Device::cuda, DType::float32, Layout::nchw}, Schema{Device::cuda, DType::float16, Layout::nchw}};
  }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = schema_support(schema, false); !s) return s;
    if (Support s = cublas_support(); !s) return s;
    MatmulShape g(info);
    if (!g.ok) return Support::no(g.why);
    return fits_int({g.m, g.n, g.k, g.batches, g.m * g.n});
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema,
                                           const RoutineParams&) const override {
    if (Support s = supports(info, schema); !s)
      throw Error(fmt::format("{} cannot run this layer: {}", make_descriptor(schema, "cublas"), s.reason), {},
                  info.layer ? info.layer->name : std::string(), "routine");
    return std::make_unique<PreparedMatmul>(info, schema);
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(CublasDense);
SOFTNEURO_REGISTER_ROUTINE(CublasLtDense);
SOFTNEURO_REGISTER_ROUTINE(CublasMatmul);

}  // namespace softneuro::cuda
