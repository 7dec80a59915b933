#include "cuda_harness.hpp"

#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/run_layer.hpp"

#include <fmt/format.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace softneuro::cudatest {

namespace {

const DeviceMemory& device() {
  const DeviceMemory* dm = device_memory(Device::cuda);
  if (!dm) throw Error("no CUDA device memory is registered");
  return *dm;
}

/// Device or host memory for a workspace of `bytes` on `where`.
std::shared_ptr<void> scratch(std::size_t bytes, Device where) {
  if (!bytes) return nullptr;
  if (where == Device::cpu) return std::shared_ptr<void>(std::aligned_alloc(64, (bytes + 63) / 64 * 64), std::free);
  void* p = device().allocate(bytes);
  if (!p) throw Error(fmt::format("out of device memory ({} bytes)", bytes));
  return std::shared_ptr<void>(p, device().release);
}

const core::Candidate* pick(const std::vector<core::Candidate>& cands) {
  const core::Candidate* best = nullptr;
  for (const auto& c : cands)
    if (c.support.ok && (!best || core::RoutineRegistry::instance().default_rank(c.routine->layer_type(), c.descriptor) <
                                      core::RoutineRegistry::instance().default_rank(best->routine->layer_type(), best->descriptor)))
      best = &c;
  return best;
}
// The result points into the vector: a temporary one would leave it dangling.
const core::Candidate* pick(std::vector<core::Candidate>&&) = delete;

struct AdaptLayer {
  Layer layer;
  LayerInfo info;
  AdaptLayer(const Shape& shape, const Schema& from, const Schema& to) {
    layer.name = "adapt";
    layer.type = "adapt";
    layer.inputs = {"x"};
    layer.outputs = {"y"};
    layer.params["from"] = from.to_string();
    layer.params["to"] = to.to_string();
    info.layer = &layer;
    info.input_shapes = {shape};
    info.output_shapes = {shape};
  }
};


}  // namespace

Blob allocate(const Shape& shape, const Schema& schema) {
  if (schema.device == Device::cpu) return Blob::allocate(shape, schema.dtype, schema.layout);
  const std::size_t bytes = std::max<std::size_t>(64, storage_bytes(shape, schema.dtype, schema.layout));
  std::shared_ptr<void> mem = scratch(bytes, Device::cuda);
  return Blob::view(std::shared_ptr<const void>(mem), mem.get(), shape, schema.dtype, schema.layout, Device::cuda);
}

void synchronize() { device().synchronize(); }

std::string adapt_descriptor(const Shape& shape, const Schema& from, const Schema& to) {
  AdaptLayer a(shape, from, to);
  const auto cands = core::RoutineRegistry::instance().candidates(a.info, to);  // (pick points into it)
  const core::Candidate* c = pick(cands);
  return c ? c->descriptor : std::string();
}

Blob adapt(const Blob& in, const Schema& from, const Schema& to) {
  if (from == to) return in;
  AdaptLayer a(in.shape(), from, to);
  auto cands = core::RoutineRegistry::instance().candidates(a.info, to);
  const core::Candidate* c = pick(cands);
  if (!c) {
    std::string why;
    for (const auto& k : cands) why += fmt::format("; {}: {}", k.descriptor, k.support.reason);
    throw Error(fmt::format("no adapt converts {} to {}{}", from.to_string(), to.to_string(), why));
  }
  auto prepared = c->routine->prepare(a.info, to, {});
  Blob out = allocate(in.shape(), to);
  auto ws = scratch(prepared->workspace_bytes(), prepared->workspace_device());
  const Blob* ins[] = {&in};
  Blob* outs[] = {&out};
  prepared->run(RunArgs{ins, outs, ws.get(), &core::global_pool()});
  synchronize();
  return out;
}

Blob random_blob(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Blob b = Blob::allocate(shape);
  for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}

float round_to_half(float x) {
  // Round to nearest even at float16's precision, in float32 arithmetic.
  if (!std::isfinite(x)) return x;
  const float ax = std::fabs(x);
  if (ax >= 65520.0f) return std::copysign(INFINITY, x);
  int e = 0;
  std::frexp(ax, &e);                     // ax = m * 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, -14);   // float16's smallest normal exponent is -14
  const float ulp = std::ldexp(1.0f, exp - 10);
  return std::copysign(std::nearbyint(ax / ulp) * ulp, x);
}

Blob round_to_half(const Blob& f32) {
  Blob b = Blob::allocate(f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) b.data_as<float>()[i] = round_to_half(f32.data_as<float>()[i]);
  return b;
}

Schema schema_of(const std::string& layer_type, const std::string& descriptor) {
  Schema s;
  if (!core::RoutineRegistry::instance().find(layer_type, descriptor, &s))
    throw Error(fmt::format("no routine {} for {}", descriptor, layer_type));
  return s;
}

std::vector<std::string> cuda_descriptors(const std::string& layer_type) {
  std::vector<std::string> out;
  for (const auto& d : registered_routines(layer_type))
    if (d.rfind("cuda", 0) == 0) out.push_back(d);
  return out;
}

std::optional<std::vector<Blob>> run_on_device(const Layer& layer, const std::vector<Blob>& inputs,
                                               const std::string& descriptor, const RoutineParams& params,
                                               std::string* why) {
  LayerInfo info;
  info.layer = &layer;
  for (const Blob& b : inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find(layer.type, descriptor, &schema);
  if (!r) throw Error(fmt::format("no routine {} for {}", descriptor, layer.type));
  if (Support s = r->supports(info, schema); !s)
    throw Error(fmt::format("{} does not support the layer: {}", descriptor, s.reason));
  std::unique_ptr<PreparedRoutine> prepared;
  try {
    prepared = r->prepare(info, schema, params);
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
  const Schema host{};
  std::vector<Blob> dev_in, dev_out;
  for (const Blob& b : inputs) dev_in.push_back(adapt(b, host, schema));
  for (const Shape& s : info.output_shapes) dev_out.push_back(allocate(s, schema));
  auto ws = scratch(prepared->workspace_bytes(), prepared->workspace_device());
  std::vector<const Blob*> ins;
  std::vector<Blob*> outs;
  for (auto& b : dev_in) ins.push_back(&b);
  for (auto& b : dev_out) outs.push_back(&b);
  prepared->run(RunArgs{ins, outs, ws.get(), &core::global_pool()});
  synchronize();
  std::vector<Blob> result;
  for (const Blob& b : dev_out) result.push_back(adapt(b, schema, host));
  return result;
}

Tolerance tolerance_for(const Schema& schema, double scale_up) {
  // float16: a few units of its precision (2^-11) relative to the largest value.
  if (schema.dtype == DType::float16) return {2e-2, 2e-2};
  return {2e-5 * scale_up, 1e-4 * scale_up};
}

bool close(const Blob& got, const Blob& want, const Tolerance& tol, const std::string& what) {
  if (got.shape() != want.shape()) {
    FAIL_CHECK(what << ": shape " << got.shape().to_string() << " vs " << want.shape().to_string());
    return false;
  }
  const float* g = got.data_as<float>();
  const float* w = want.data_as<float>();
  double scale = 1.0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(w[i])) scale = std::max(scale, double(std::fabs(w[i])));
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = g[i], b = w[i];
    if (std::isinf(b) && a == b) continue;  // e.g. an all-padding max window
    const double err = std::fabs(a - b), lim = tol.abs * scale + tol.rel * std::fabs(b);
    if (!(err <= lim)) {
      if (first < 0) first = i;
      ++bad;
      worst = std::max(worst, err);
    }
  }
  if (bad) {
    FAIL_CHECK(what << ": " << bad << " of " << want.numel() << " elements differ (first at " << first << ": got "
                    << g[first] << ", want " << w[first] << "; worst error " << worst << ", scale " << scale << ")");
    return false;
  }
  return true;
}

std::vector<Blob> as_seen_by(const std::vector<Blob>& inputs, const Schema& schema) {
  if (schema.dtype != DType::float16) return inputs;
  std::vector<Blob> out;
  for (const Blob& b : inputs) out.push_back(round_to_half(b));
  return out;
}

int check_all_cuda_routines(const Layer& layer, const std::vector<Blob>& inputs, const std::string& what,
                            double scale_up, std::map<std::string, RoutineTally>* tally) {
  int compared = 0;
  LayerInfo info;
  info.layer = &layer;
  for (const Blob& b : inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  for (const std::string& d : cuda_descriptors(layer.type)) {
    Schema schema;
    const Routine* r = core::RoutineRegistry::instance().find(layer.type, d, &schema);
    RoutineTally ignored;
    RoutineTally& t = tally ? (*tally)[d] : ignored;
    Support s = r->supports(info, schema);
    if (!s) {
      t.refusals += fmt::format("\n  {}: {}", what, s.reason);
      continue;
    }
    const std::vector<Blob> seen = as_seen_by(inputs, schema);
    const std::vector<Blob> want = test::run_layer(layer, seen, "cpu/ref");
    for (const RoutineParams& params : param_combinations(r->param_space(info, schema))) {
      std::string params_text;
      for (const auto& [k, v] : params) params_text += fmt::format(" {}={}", k, v);
      const std::string name = fmt::format("{} {}{}", what, d, params_text);
      std::string why;
      auto got = run_on_device(layer, inputs, d, params, &why);
      if (!got) {
        t.refusals += fmt::format("\n  {} ({} parameters): {}", what, params.size(), why);
        continue;
      }
      REQUIRE(got->size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) close((*got)[k], want[k], tolerance_for(schema, scale_up), name);
      ++compared;
      ++t.runs;
    }
  }
  return compared;
}

}  // namespace softneuro::cudatest
