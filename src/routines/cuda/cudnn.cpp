// conv2 through cuDNN's convolution API (the legacy one, still in cuDNN 9
// beside its graph API): "cuda[:float16][:nhwc]/cudnn".
//
// Routine parameters:
//  - "algo": every cudnnConvolutionFwdAlgo_t (0..7), so the profiler measures
//    every algorithm cuDNN offers for the shape instead of trusting its
//    heuristic; prepare() rejects an algorithm cuDNN refuses for the shape
//    (CUDNN_STATUS_NOT_SUPPORTED from the workspace query or from a trial run
//    on scratch buffers, or a workspace that cannot be allocated), and reports
//    the algorithm's workspace through workspace_bytes() (device memory,
//    planned by the executor). Without "algo" (the untuned default) cuDNN's
//    heuristic picks.
//  - "fused" (layers whose activation cuDNN can apply: none, relu, clip from
//    0): 1 = one call of cudnnConvolutionBiasActivationForward (convolution,
//    bias and activation in cuDNN's launch), 0 = the convolution, then bias and
//    activation in one pass of our kernel (two launches). The tuner measures
//    both; cuDNN computes no activation (identity) only with
//    IMPLICIT_PRECOMP_GEMM, and prepare() rejects the other pairs. Untuned:
//    fused for relu and clip, where cuDNN accepts it.
//
// float32 uses FMA math (no TF32: float32 stays float32); float16 uses tensor
// cores with float32 accumulation. Pads must be symmetric.
#include "core/layer_types.hpp"
#include "routines/cuda/common.hpp"
#include "routines/cuda/cuda_libs.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <memory>
#include <string_view>
#include <vector>

namespace softneuro::cuda {
namespace {

constexpr const char* kAlgoNames[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",     "DIRECT",
                                      "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED"};
static_assert(sizeof(kAlgoNames) / sizeof(kAlgoNames[0]) == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);

std::string algo_name(int a) {
  return a >= 0 && a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? fmt::format("{} ({})", a, kAlgoNames[a]) : std::to_string(a);
}

/// The four descriptors of one convolution, destroyed together.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    const CudnnApi& f = cudnn_api();
    if (x) f.cudnnDestroyTensorDescriptor(x);
    if (y) f.cudnnDestroyTensorDescriptor(y);
    if (w) f.cudnnDestroyFilterDescriptor(w);
    if (conv) f.cudnnDestroyConvolutionDescriptor(conv);
  }
};

void describe(Descriptors& d, const core::Window2d& g, const Schema& s) {
  const CudnnApi& f = cudnn_api();
  const cudnnDataType_t t = s.dtype == DType::float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  const cudnnTensorFormat_t fmt = s.layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  auto i = [](int64_t v) { return static_cast<int>(v); };
  check_cudnn(f.cudnnCreateTensorDescriptor(&d.x), "cudnnCreateTensorDescriptor");
  check_cudnn(f.cudnnCreateTensorDescriptor(&d.y), "cudnnCreateTensorDescriptor");
  check_cudnn(f.cudnnCreateFilterDescriptor(&d.w), "cudnnCreateFilterDescriptor");
  check_cudnn(f.cudnnCreateConvolutionDescriptor(&d.conv), "cudnnCreateConvolutionDescriptor");
  check_cudnn(f.cudnnSetTensor4dDescriptor(d.x, fmt, t, i(g.n), i(g.c), i(g.h), i(g.w)), "cudnnSetTensor4dDescriptor (input)");
  check_cudnn(f.cudnnSetTensor4dDescriptor(d.y, fmt, t, i(g.n), i(g.oc), i(g.oh), i(g.ow)),
              "cudnnSetTensor4dDescriptor (output)");
  check_cudnn(f.cudnnSetFilter4dDescriptor(d.w, t, fmt, i(g.oc), i(g.c / g.group), i(g.kh), i(g.kw)),
              "cudnnSetFilter4dDescriptor");
  check_cudnn(f.cudnnSetConvolution2dDescriptor(d.conv, i(g.pt), i(g.pl), i(g.sh), i(g.sw), i(g.dh), i(g.dw),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor");
  check_cudnn(f.cudnnSetConvolutionGroupCount(d.conv, i(g.group)), "cudnnSetConvolutionGroupCount");
  check_cudnn(f.cudnnSetConvolutionMathType(d.conv, s.dtype == DType::float16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
              "cudnnSetConvolutionMathType");
  int n = 0, c = 0, h = 0, w = 0;
  check_cudnn(f.cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &c, &h, &w),
              "cudnnGetConvolution2dForwardOutputDim");
  if (n != g.n || c != g.oc || h != g.oh || w != g.ow)
    throw Error(fmt::format("cuDNN computes output [{},{},{},{}], the layer [{},{},{},{}]", n, c, h, w, g.n, g.oc,
                            g.oh, g.ow));
}

/// The cudnnActivationMode_t of a conv2's activation where cuDNN's fused call
/// can apply it (none, relu, clip from 0 without an affine after it), with its
/// ceiling for a clip; none otherwise.
struct FusedActivation {
  bool ok = false;
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_IDENTITY;
  double ceiling = 0;
};
FusedActivation fused_activation(const kern::ActParams& a) {
  FusedActivation f;
  if (a.affine) return f;
  switch (a.kind) {
    case kern::Act::none: f.ok = true, f.mode = CUDNN_ACTIVATION_IDENTITY; break;
    case kern::Act::relu: f.ok = true, f.mode = CUDNN_ACTIVATION_RELU; break;
    case kern::Act::clip:
      if (a.a == 0.0f && a.b > 0.0f) f.ok = true, f.mode = CUDNN_ACTIVATION_CLIPPED_RELU, f.ceiling = a.b;
      break;
    default: break;
  }
  return f;
}

/// An activation descriptor, destroyed with it.
struct ActivationDescriptor {
  cudnnActivationDescriptor_t d = nullptr;
  ActivationDescriptor() = default;
  ActivationDescriptor(const ActivationDescriptor&) = delete;
  ActivationDescriptor& operator=(const ActivationDescriptor&) = delete;
  ~ActivationDescriptor() {
    if (d) cudnn_api().cudnnDestroyActivationDescriptor(d);
  }
};

class PreparedConv final : public Prepared {
 public:
  PreparedConv(const LayerInfo& info, const Schema& s, int algo_param, int fused_param)
      : g_(core::conv2_window(*info.layer, info.input_shapes[0])),
        act_(act_params(core::fused_activation(*info.layer, /*with_affine=*/true))),
        schema_(s) {
    const Cudnn lib = cudnn();
    describe(d_, g_, s);
    const std::string& name = info.layer->name;

    // Weights [O, C/g, KH, KW] (nhwc: [O, KH, KW, C/g]) in the schema's dtype.
    std::vector<float> w = weight_values(info.layer->weight("weight"));
    if (s.layout == Layout::nhwc) {
      const int64_t icg = g_.c / g_.group, khw = g_.kh * g_.kw;
      std::vector<float> r(w.size());
      for (int64_t o = 0; o < g_.oc; ++o)
        for (int64_t c = 0; c < icg; ++c)
          for (int64_t k = 0; k < khw; ++k)
            r[static_cast<std::size_t>((o * khw + k) * icg + c)] = w[static_cast<std::size_t>((o * icg + c) * khw + k)];
      w.swap(r);
    }
    w_ = upload_floats(w, s.dtype);
    if (const Blob* b = info.layer->find_weight("bias")) bias_values_ = weight_values(*b);

    const FusedActivation fa = fused_activation(act_);
    if (fused_param == 1 && !fa.ok)
      throw Error("cuDNN's fused call applies no activation but none, relu and clip from 0 (without an affine after it)",
                  {}, name, "fused");
    if (fa.ok) {
      check_cudnn(lib.api.cudnnCreateActivationDescriptor(&act_desc_.d), "cudnnCreateActivationDescriptor");
      // NaN propagates, as the unfused kernel's activations keep it.
      check_cudnn(lib.api.cudnnSetActivationDescriptor(act_desc_.d, fa.mode, CUDNN_PROPAGATE_NAN, fa.ceiling),
                  "cudnnSetActivationDescriptor");
      check_cudnn(lib.api.cudnnCreateTensorDescriptor(&bias_desc_), "cudnnCreateTensorDescriptor (bias)");
      check_cudnn(lib.api.cudnnSetTensor4dDescriptor(bias_desc_,
                                                     s.layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                     s.dtype == DType::float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, 1,
                                                     static_cast<int>(g_.oc), 1, 1),
                  "cudnnSetTensor4dDescriptor (bias)");
    }
    identity_ = fa.ok && fa.mode == CUDNN_ACTIVATION_IDENTITY;
    // Untuned: fused where it computes an activation (relu, clip); a fused
    // identity needs IMPLICIT_PRECOMP_GEMM, which the heuristic may not pick.
    set_fused(fused_param < 0 ? fa.ok && !identity_ : fused_param == 1);

    if (algo_param >= 0) {
      if (algo_param >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
        throw Error(fmt::format("cuDNN has no convolution algorithm {}", algo_param), {}, name, "algo");
      std::string why = try_algorithm(static_cast<cudnnConvolutionFwdAlgo_t>(algo_param));
      if (!why.empty()) throw Error(why, {}, name, fused_ ? "fused" : "algo");
      return;
    }
    // No "algo" (the untuned default): cuDNN's heuristic order, the first that
    // works (fused where asked; untuned, unfused when no algorithm runs fused).
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    check_cudnn(lib.api.cudnnGetConvolutionForwardAlgorithm_v7(lib.handle, d_.x, d_.w, d_.conv, d_.y,
                                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf),
                "cudnnGetConvolutionForwardAlgorithm_v7");
    std::string tried;
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < returned; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        std::string why;
        try {
          why = try_algorithm(perf[i].algo);
        } catch (const Error& e) {
          why = e.what();
        }
        if (why.empty()) return;
        tried += "; " + why;
      }
      if (!fused_ || fused_param >= 0) break;
      set_fused(false);
    }
    throw Error("cuDNN's heuristic offers no algorithm that runs this convolution" + tried, {}, name, "algo");
  }
  ~PreparedConv() override {
    if (bias_desc_) cudnn_api().cudnnDestroyTensorDescriptor(bias_desc_);
  }
  PreparedConv(const PreparedConv&) = delete;
  PreparedConv& operator=(const PreparedConv&) = delete;

  std::size_t workspace_bytes() const override { return ws_; }

  void run(const RunArgs& a) override {
    void* y = a.outputs[0]->data();
    if (fused_) {
      check_cudnn(forward(a.inputs[0]->data(), y, a.workspace), "cudnnConvolutionBiasActivationForward");
      return;
    }
    check_cudnn(forward(a.inputs[0]->data(), y, a.workspace), "cudnnConvolutionForward");
    if (bias_ || act_.kind != kern::Act::none || act_.affine)
      check(kern::channel_affine(elem(schema_.dtype), y, y, nullptr, bias_.as<float>(), g_.n, g_.oc, g_.oh * g_.ow,
                                 schema_.layout == Layout::nhwc, act_, stream()),
            "bias/activation kernel");
  }

 private:
  /// Makes `algo` the algorithm when cuDNN accepts it for this convolution
  /// (workspace query, then a trial run on scratch buffers: some algorithms
  /// pass the query and still refuse the shape when run); else says why not.
  std::string try_algorithm(cudnnConvolutionFwdAlgo_t algo) {
    const Cudnn lib = cudnn();
    const int a = static_cast<int>(algo);
    if (fused_ && identity_ && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
      return fmt::format("cuDNN's fused call computes no activation (identity) only with algorithm {}, not {}",
                         algo_name(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM), algo_name(a));
    std::size_t ws = 0;
    cudnnStatus_t st = lib.api.cudnnGetConvolutionForwardWorkspaceSize(lib.handle, d_.x, d_.w, d_.conv, d_.y, algo, &ws);
    if (st == CUDNN_STATUS_NOT_SUPPORTED)
      return fmt::format("cuDNN algorithm {} does not support this convolution", algo_name(a));
    check_cudnn(st, "cudnnGetConvolutionForwardWorkspaceSize");
    algo_ = algo;
    ws_ = ws;
    const std::size_t es = elem_bytes(schema_.dtype);
    DeviceBuffer x(static_cast<std::size_t>(g_.n * g_.c * g_.h * g_.w) * es);
    DeviceBuffer y(static_cast<std::size_t>(g_.n * g_.oc * g_.oh * g_.ow) * es);
    DeviceBuffer scratch(ws_);  // throws "out of CUDA memory" for a workspace that cannot be had
    st = forward(x.get(), y.get(), scratch.get());
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (cuDNN trial run)");
    if (st == CUDNN_STATUS_NOT_SUPPORTED)
      return fmt::format("cuDNN algorithm {} does not support this convolution{} (trial run)", algo_name(a),
                         fused_ ? " with bias and activation fused" : "");
    check_cudnn(st, fused_ ? "cudnnConvolutionBiasActivationForward (trial run)" : "cudnnConvolutionForward (trial run)");
    return {};
  }

  cudnnStatus_t forward(const void* x, void* y, void* ws) const {
    const float one = 1.0f, zero = 0.0f;
    const Cudnn lib = cudnn();
    if (fused_)  // z is y with weight 0 (no residual); cuDNN wants a valid z all the same
      return lib.api.cudnnConvolutionBiasActivationForward(lib.handle, &one, d_.x, x, d_.w, w_.get(), d_.conv, algo_,
                                                           ws_ ? ws : nullptr, ws_, &zero, d_.y, y, bias_desc_,
                                                           bias_.get(), act_desc_.d, d_.y, y);
    return lib.api.cudnnConvolutionForward(lib.handle, &one, d_.x, x, d_.w, w_.get(), d_.conv, algo_,
                                           ws_ ? ws : nullptr, ws_, &zero, d_.y, y);
  }

  /// Fused or not, with the bias uploaded as that path reads it: the fused
  /// call in the schema's dtype (zeros where the layer has none), our kernel in
  /// float32 (none where the layer has none).
  void set_fused(bool fused) {
    fused_ = fused;
    bias_ = DeviceBuffer();
    if (fused_)
      bias_ = upload_floats(bias_values_.empty() ? std::vector<float>(static_cast<std::size_t>(g_.oc), 0.0f) : bias_values_,
                            schema_.dtype);
    else if (!bias_values_.empty())
      bias_ = upload_floats(bias_values_, DType::float32);
  }

  core::Window2d g_;
  kern::ActParams act_;
  Schema schema_;
  Descriptors d_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  std::size_t ws_ = 0;
  DeviceBuffer w_, bias_;
  std::vector<float> bias_values_;
  ActivationDescriptor act_desc_;
  cudnnTensorDescriptor_t bias_desc_ = nullptr;
  bool fused_ = false, identity_ = false;
};

class CudnnConv2 final : public Routine {
 public:
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "cudnn"; }
  std::vector<Schema> schemas() const override {
    std::vector<Schema> out;
    for (DType t : {DType::float32, DType::float16})
      for (Layout l : {Layout::nchw, Layout::nhwc}) out.push_back(Schema{Device::cuda, t, l});
    return out;
  }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = schema_support(schema, true); !s) return s;
    if (Support s = cudnn_support(); !s) return s;
    if (!info.layer) return Support::no("no layer");
    if (info.input_shapes.at(0).rank() != 4) return Support::no("input is not [N,C,H,W]");
    core::Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (g.pt != g.pb || g.pl != g.pr)
      return Support::no(fmt::format("cuDNN pads symmetrically; pads are [{},{},{},{}]", g.pt, g.pl, g.pb, g.pr));
    const int64_t limit = int64_t{1} << 31;
    if (g.n * g.c * g.h * g.w >= limit || g.n * g.oc * g.oh * g.ow >= limit)
      return Support::no("tensor has 2^31 elements or more");
    return float_weights(*info.layer, {"weight", "bias"});
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema&) const override {
    RoutineParamSpec algo{"algo", {}};
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) algo.choices.push_back(a);
    if (!info.layer || !fused_activation(act_params(core::fused_activation(*info.layer, /*with_affine=*/true))).ok)
      return {algo};
    return {algo, RoutineParamSpec{"fused", {0, 1}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema,
                                           const RoutineParams& params) const override {
    if (Support s = supports(info, schema); !s)
      throw Error(fmt::format("{} cannot run this layer: {}", make_descriptor(schema, "cudnn"), s.reason), {},
                  info.layer ? info.layer->name : std::string(), "routine");
    return std::make_unique<PreparedConv>(info, schema, static_cast<int>(routine_param(params, "algo", -1)),
                                          static_cast<int>(routine_param(params, "fused", -1)));
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(CudnnConv2);

}  // namespace softneuro::cuda
