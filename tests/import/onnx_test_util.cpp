#include "import/onnx_test_util.hpp"

#include "import/onnx_importer.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <unistd.h>

namespace softneuro::test {

NodeRef& NodeRef::i(const std::string& name, int64_t v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
  return *this;
}
NodeRef& NodeRef::f(const std::string& name, float v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
  return *this;
}
NodeRef& NodeRef::s(const std::string& name, const std::string& v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
  return *this;
}
NodeRef& NodeRef::ints(const std::string& name, const std::vector<int64_t>& v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
  return *this;
}
NodeRef& NodeRef::t(const std::string& name, const onnx::TensorProto& v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  *a->mutable_t() = v;
  return *this;
}

NodeRef& NodeRef::g(const std::string& name, const onnx::GraphProto& v) {
  auto* a = p->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = v;
  return *this;
}

OnnxModel::OnnxModel(int opset) {
  proto.set_ir_version(7);
  proto.set_producer_name("softneuro-tests");
  auto* o = proto.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  graph().set_name("test");
}

OnnxModel& OnnxModel::input(const std::string& name, const std::vector<int64_t>& dims) {
  auto* in = graph().add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape();  // {}: a scalar, not a tensor of unknown shape
  for (std::size_t k = 0; k < dims.size(); ++k) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (dims[k] < 0) dim->set_dim_param(fmt::format("{}_d{}", name, k));  // each its own size
    else dim->set_dim_value(dims[k]);
  }
  return *this;
}

OnnxModel& OnnxModel::named_input(const std::string& name, int onnx_type, const std::vector<std::string>& dims) {
  auto* in = graph().add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_type);
  for (const auto& d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (!d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; })) dim->set_dim_value(std::stoll(d));
    else if (d != "?") dim->set_dim_param(d);
  }
  return *this;
}

OnnxModel& OnnxModel::output(const std::string& name) {
  auto* out = graph().add_output();
  out->set_name(name);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return *this;
}

OnnxModel& OnnxModel::typed_input(const std::string& name, int onnx_type, const std::vector<int64_t>& dims) {
  input(name, dims);
  graph().mutable_input(graph().input_size() - 1)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx_type);
  return *this;
}

OnnxModel& OnnxModel::typed_output(const std::string& name, int onnx_type) {
  output(name);
  graph().mutable_output(graph().output_size() - 1)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx_type);
  return *this;
}

onnx::TensorProto float_tensor(const std::vector<int64_t>& dims, const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (auto d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return t;
}

onnx::TensorProto int_tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  for (auto d : dims) t.add_dims(d);
  for (auto v : values) t.add_int64_data(v);  // typed field: the other way exporters store data
  return t;
}

OnnxModel& OnnxModel::init(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
  auto* t = graph().add_initializer();
  *t = float_tensor(dims, values);
  t->set_name(name);
  return *this;
}

OnnxModel& OnnxModel::init_ints(const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& values) {
  auto* t = graph().add_initializer();
  *t = int_tensor(dims, values);
  t->set_name(name);
  return *this;
}

OnnxModel& OnnxModel::init_typed(const std::string& name, int onnx_type, const std::vector<int64_t>& dims,
                                 const std::vector<int64_t>& values) {
  auto* t = graph().add_initializer();
  t->set_data_type(onnx_type);
  for (auto d : dims) t->add_dims(d);
  for (auto v : values) t->add_int32_data(static_cast<int32_t>(v));
  t->set_name(name);
  return *this;
}

NodeRef OnnxModel::node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name) {
  auto* n = graph().add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? fmt::format("{}_{}", op, graph().node_size()) : name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return NodeRef{n};
}

std::string OnnxModel::save(const std::string& file) const {
  std::string path = test_dir() + "/" + file;
  std::ofstream out(path, std::ios::binary);
  proto.SerializeToOstream(&out);
  return path;
}

std::string test_dir() {
  // One folder per test process, removed when it exits; kept with
  // SOFTNEURO_TEST_KEEP_FILES=1 (scripts/fuzz.sh seeds its corpora with them).
  static const struct Dir {
    std::string path;
    Dir() {
      auto d = std::filesystem::temp_directory_path() / fmt::format("softneuro_import_tests_{}", ::getpid());
      std::filesystem::create_directories(d);
      path = d.string();
    }
    ~Dir() {
      if (const char* keep = std::getenv("SOFTNEURO_TEST_KEEP_FILES"); keep && *keep == '1') return;
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> pattern(std::size_t n, int mod, float shift, float div) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (static_cast<float>(static_cast<int>(i) % mod) - shift) / div;
  return v;
}

Blob make_input(const Shape& shape, const std::vector<float>& values) {
  Blob b = Blob::allocate(shape);
  if (!values.empty()) std::memcpy(b.data(), values.data(), values.size() * sizeof(float));  // an empty blob has no data
  return b;
}

std::vector<Output> run_net(const Model& net, const std::vector<NamedBlob>& inputs) {
  std::vector<Output> outs;
  for (const auto& o : Session(net).run(inputs)) {
    const float* p = o.blob.data_as<float>();
    outs.push_back({o.blob.shape(), std::vector<float>(p, p + o.blob.numel())});
  }
  return outs;
}

Output run_model(const OnnxModel& m, const std::string& file, const Shape& x_shape, const std::vector<float>& x,
                 const ImportOptions& options) {
  Model net = import_onnx(m.save(file), options);
  return run_net(net, {{"x", make_input(x_shape, x)}}).at(0);
}

core::Graph import_without_passes(const std::string& path) { return onnx_import::import_graph(path); }

int count_layers(const Model& net, const std::string& type) {
  int n = 0;
  for (const auto& l : Session(net).layers()) n += l.type == type;
  return n;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace softneuro::test
