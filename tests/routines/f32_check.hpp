// Shared by the tests of our float32 CPU routines (test_direct.cpp,
// test_im2col.cpp, test_depthwise.cpp, test_eigen.cpp): run one routine in its
// schema (inputs converted from nchw, outputs back, pre-filled with NaN) with
// given routine parameters, and compare with cpu/ref.
// Tolerance: max |got - ref| <= 1e-4 * max |ref| (+1e-5 absolute).
#pragma once

#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/layout_convert.hpp"
#include "support/run_layer.hpp"

#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace softneuro::test::f32 {

inline Blob random_blob(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Blob b = Blob::allocate(shape);
  for (int64_t i = 0; i < shape.numel(); ++i) b.data_as<float>()[i] = u(rng);
  return b;
}

inline int pick(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

/// x rounded to bfloat16 (nearest even), as a float: a cast to bfloat16 keeps it exactly.
inline float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

/// Result of one routine on one case: support, and plain outputs.
struct Outcome {
  Support support;
  std::vector<Blob> outputs;
  bool padding_zero = true;
};

inline Outcome run_in_schema(const Layer& layer, const std::vector<Blob>& plain_inputs, const std::string& descriptor,
                             const RoutineParams& params = {}) {
  LayerInfo info;
  info.layer = &layer;
  for (const Blob& b : plain_inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  Schema schema;
  const Routine* routine = core::RoutineRegistry::instance().find(layer.type, descriptor, &schema);
  REQUIRE(routine);
  Outcome out;
  out.support = routine->supports(info, schema);
  if (!out.support) return out;
  std::vector<Blob> inputs, outputs;
  for (const Blob& b : plain_inputs) inputs.push_back(schema.layout == Layout::nchw ? b : to_layout(b, schema.layout));
  auto prepared = routine->prepare(info, schema, params);
  for (const Shape& s : info.output_shapes) {
    outputs.push_back(Blob::allocate(s, DType::float32, schema.layout));
    fill_bytes(outputs.back(), std::numeric_limits<float>::quiet_NaN());
  }
  const std::size_t ws = prepared->workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(ws ? std::aligned_alloc(64, (ws + 63) / 64 * 64) : nullptr,
                                                   std::free);
  if (ws) std::memset(workspace.get(), 0x7f, ws);  // garbage, not zeros
  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : inputs) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outputs) out_ptrs.push_back(&b);
  RunArgs args{in_ptrs, out_ptrs, workspace.get(), &core::global_pool()};
  prepared->run(args);
  prepared->run(args);
  for (const Blob& b : outputs) {
    out.padding_zero = out.padding_zero && padding_is_zero(b);
    out.outputs.push_back(schema.layout == Layout::nchw ? b : to_plain(b));
  }
  return out;
}

inline void check_close(const Blob& got, const Blob& want) {
  REQUIRE(got.shape() == want.shape());
  double max_ref = 0, max_err = 0;
  bool bad = false;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data_as<float>()[i], g = got.data_as<float>()[i];
    if (!std::isfinite(g)) bad = true;
    if (std::isfinite(w)) max_ref = std::max(max_ref, std::abs(w));
    if (std::isfinite(w) && std::isfinite(g)) max_err = std::max(max_err, std::abs(g - w));
  }
  INFO("max |ref| = " << max_ref << ", max error = " << max_err);
  CHECK_FALSE(bad);
  CHECK(max_err <= 1e-4 * max_ref + 1e-5);
}

/// Runs the case through `descriptor` (with `params`) and cpu/ref; false (and
/// the reason) when the routine does not support it.
inline bool check_case(const Layer& layer, const std::vector<Blob>& inputs, const std::string& descriptor,
                       const RoutineParams& params = {}, std::string* reason = nullptr) {
  Outcome got = run_in_schema(layer, inputs, descriptor, params);
  if (!got.support) {
    if (reason) *reason = got.support.reason;
    return false;
  }
  std::vector<Blob> want = run_layer(layer, inputs, "cpu/ref");
  REQUIRE(got.outputs.size() == want.size());
  CHECK(got.padding_zero);
  for (std::size_t i = 0; i < want.size(); ++i) check_close(got.outputs[i], want[i]);
  return true;
}

inline const char* const kActs[] = {"none", "relu", "clip", "hardswish", "hardsigmoid"};

inline void set_act(Layer& l, const std::string& act, std::mt19937& rng) {
  l.params["act"] = act;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  if (act == "clip") {
    double a = u(rng), b = u(rng);
    l.params["act_min"] = std::min(a, b) - 0.1;
    l.params["act_max"] = std::max(a, b);
  }
  if (act == "hardsigmoid") {
    l.params["act_alpha"] = 0.1 + 0.3 * (u(rng) + 1.0);
    l.params["act_beta"] = 0.5 + 0.2 * u(rng);
  }
}

/// A conv2 layer (weights random, bias when `bias`).
inline Layer conv_layer(int64_t c, int64_t oc, int64_t group, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t dh, int64_t dw, std::vector<int64_t> pads, bool bias, std::mt19937& rng) {
  std::map<std::string, Blob> weights{{"weight", random_blob({oc, c / group, kh, kw}, rng)}};
  if (bias) weights["bias"] = random_blob({oc}, rng);
  return make_layer("conv2",
                    {{"strides", std::vector<int64_t>{sh, sw}},
                     {"pads", pads},
                     {"dilations", std::vector<int64_t>{dh, dw}},
                     {"group", group}},
                    weights);
}

/// Whether the routine's ISA is missing here, or capped away by
/// SOFTNEURO_MAX_CPU_ISA (then tests skip it with a message).
inline bool isa_missing(const std::string& reason) {
  return reason.find("AVX") != std::string::npos || reason.find("SOFTNEURO_MAX_CPU_ISA") != std::string::npos;
}

/// check_case, where the only acceptable refusal is a missing ISA: then a
/// warning, and false (the caller skips the rest of the routine's cases).
inline bool check_or_skip(const Layer& layer, const std::vector<Blob>& inputs, const std::string& descriptor,
                          const RoutineParams& params = {}) {
  std::string why;
  if (check_case(layer, inputs, descriptor, params, &why)) return true;
  REQUIRE(isa_missing(why));
  WARN(descriptor << " skipped: " << why);
  return false;
}

}  // namespace softneuro::test::f32
