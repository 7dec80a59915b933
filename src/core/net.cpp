#include "core/net_impl.hpp"

#include "core/device.hpp"
#include "core/dnn_file.hpp"
#include "core/log.hpp"

#include <fmt/format.h>

namespace softneuro {
namespace detail {

std::unique_ptr<NetImpl> NetImpl::build(core::Graph graph, const std::string& file) {
  auto impl = std::make_unique<NetImpl>();
  impl->file = file;
  try {
    core::sort_topologically(graph);
    impl->shapes = core::infer_shapes(graph);
    impl->graph = std::move(graph);
    impl->inputs = impl->graph.inputs;
    for (const auto& o : impl->graph.outputs) impl->outputs.push_back({o, impl->shapes.at(o), DType::float32});
    impl->executor = std::make_unique<core::Executor>(impl->graph, impl->shapes);
  } catch (const Error& e) {
    throw file.empty() ? e : e.with_file(file);
  }
  return impl;
}

}  // namespace detail

Net::Net(std::unique_ptr<detail::NetImpl> impl) : impl_(std::move(impl)) {}
Net::Net(Net&&) noexcept = default;
Net& Net::operator=(Net&&) noexcept = default;
Net::~Net() = default;

Net Net::load(const std::string& path) {
  core::Graph g;
  try {
    g = core::read_dnn(path);
  } catch (const Error& e) {
    throw e.file().empty() ? e.with_file(path) : e;
  }
  const std::string& tuned_on = g.routine_path.device_fingerprint;
  if (!tuned_on.empty() && tuned_on != core::device_fingerprint())
    core::warn("{}: tuned on another device ({}); this is {}. It runs, but re-tune for the best speed", path,
               tuned_on, core::device_fingerprint());
  const std::string& tuned_wait = g.routine_path.openmp_wait;
  if (!tuned_wait.empty() && tuned_wait != openmp_wait())
    core::warn("{}: tuned while OpenMP threads waited '{}', this process waits '{}': its times may differ from the "
               "tuner's (set GOMP_SPINCOUNT or OMP_WAIT_POLICY before the process starts; see softneuro::openmp_wait)",
               path, tuned_wait, openmp_wait());
  return Net(detail::NetImpl::build(std::move(g), path));
}

void Net::save(const std::string& path) const { core::write_dnn(impl_->graph, path); }

const std::vector<TensorInfo>& Net::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Net::outputs() const { return impl_->outputs; }

std::vector<std::string> Net::input_names() const {
  std::vector<std::string> v;
  for (const auto& t : impl_->inputs) v.push_back(t.name);
  return v;
}
std::vector<std::string> Net::output_names() const {
  std::vector<std::string> v;
  for (const auto& t : impl_->outputs) v.push_back(t.name);
  return v;
}

namespace {
Shape find_shape(const std::vector<TensorInfo>& ts, const std::string& name, const char* what) {
  for (const auto& t : ts)
    if (t.name == name) return t.shape;
  throw Error(fmt::format("the net has no {} named '{}'", what, name), {}, {}, name);
}
}  // namespace

Shape Net::input_shape(const std::string& name) const { return find_shape(impl_->inputs, name, "input"); }
Shape Net::output_shape(const std::string& name) const { return find_shape(impl_->outputs, name, "output"); }

void Net::run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs) {
  impl_->executor->run(inputs, outputs);
}

std::vector<NamedBlob> Net::run(std::span<const NamedBlob> inputs) {
  std::vector<NamedBlob> outs;
  for (const auto& t : impl_->outputs) outs.push_back({t.name, Blob::allocate(t.shape)});
  run(inputs, outs);
  return outs;
}

std::vector<LayerSummary> Net::layers(bool explain) const {
  std::vector<LayerSummary> out;
  for (const auto& step : impl_->executor->steps()) {
    LayerSummary s;
    s.name = step->name;
    s.type = step->layer->type;
    s.inputs = step->layer->inputs;
    s.outputs = step->layer->outputs;
    s.output_shapes = step->info.output_shapes;
    s.params = core::describe_params(*step->layer);
    s.descriptor = step->routine.descriptor;
    for (const auto& [k, v] : step->params) s.routine_params += fmt::format("{}{}={}", s.routine_params.empty() ? "" : " ", k, v);
    s.tuned = step->tuned;
    s.predicted_ms = step->predicted_ms;
    s.measured_ms = step->measured_ms;
    if (explain)
      for (const auto& c : core::RoutineRegistry::instance().candidates(step->info))
        s.candidates.push_back({c.descriptor, c.support.ok, c.support.reason});
    out.push_back(std::move(s));
  }
  return out;
}

std::size_t Net::planned_bytes() const { return impl_->executor->arena_bytes(); }
std::size_t Net::unplanned_bytes() const { return impl_->executor->unplanned_bytes(); }
std::string Net::tuned_fingerprint() const { return impl_->graph.routine_path.device_fingerprint; }
std::string Net::tuned_openmp_wait() const { return impl_->graph.routine_path.openmp_wait; }
const std::string& Net::name() const { return impl_->graph.name; }

const char* version() { return SOFTNEURO_VERSION; }

}  // namespace softneuro
