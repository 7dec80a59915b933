// Helpers of the importer tests: ONNX models built in C++ with libonnx (no
// Python), imported and run through the public API, and small references.
#pragma once

#include "core/graph.hpp"

#include <softneuro/import.hpp>
#include <softneuro/session.hpp>

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace softneuro::test {

/// One node being built: chainable attribute setters.
struct NodeRef {
  onnx::NodeProto* p;
  NodeRef& i(const std::string& name, int64_t v);
  NodeRef& f(const std::string& name, float v);
  NodeRef& s(const std::string& name, const std::string& v);
  NodeRef& ints(const std::string& name, const std::vector<int64_t>& v);
  NodeRef& t(const std::string& name, const onnx::TensorProto& v);
  NodeRef& g(const std::string& name, const onnx::GraphProto& v);
};

/// An ONNX model under construction (default domain at `opset`).
class OnnxModel {
 public:
  explicit OnnxModel(int opset = 13);
  onnx::ModelProto proto;
  onnx::GraphProto& graph() { return *proto.mutable_graph(); }

  /// A float input; a dim of -1 is symbolic, each with a dim_param of its own.
  OnnxModel& input(const std::string& name, const std::vector<int64_t>& dims);
  /// An input of ONNX type `onnx_type` whose dims are numbers, dim_params ("sequence",
  /// "past + 1": dims naming one size vary together) or "?" (symbolic without a name).
  OnnxModel& named_input(const std::string& name, int onnx_type, const std::vector<std::string>& dims);
  OnnxModel& output(const std::string& name);
  /// An input or output of another ONNX element type (INT64, BOOL, DOUBLE, ...).
  OnnxModel& typed_input(const std::string& name, int onnx_type, const std::vector<int64_t>& dims);
  OnnxModel& typed_output(const std::string& name, int onnx_type);
  OnnxModel& init(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values);
  OnnxModel& init_ints(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& values);
  /// An integer initializer of another ONNX type (INT8, UINT8, INT32), values in its int32_data field.
  OnnxModel& init_typed(const std::string& name, int onnx_type, const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& values);
  NodeRef node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               const std::string& name = {});
  /// Writes the model into the test folder; returns its path.
  std::string save(const std::string& file) const;
};

onnx::TensorProto float_tensor(const std::vector<int64_t>& dims, const std::vector<float>& values);
onnx::TensorProto int_tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& values);

/// A fresh folder for this test run's files.
std::string test_dir();
/// Deterministic values in [-1, 1).
std::vector<float> random_values(std::size_t n, unsigned seed);
/// (i % mod - shift) / div for i < n: the inputs and weights whose ONNX Runtime outputs the tests hold.
std::vector<float> pattern(std::size_t n, int mod, float shift, float div);
Blob make_input(const Shape& shape, const std::vector<float>& values);

/// A net's output: its shape and values.
struct Output {
  Shape shape;
  std::vector<float> values;
};
/// Runs a net on named inputs; returns every output in order.
std::vector<Output> run_net(const Model& net, const std::vector<NamedBlob>& inputs);
/// Saves, imports (with `options`) and runs a model with one input "x" and one output "y".
Output run_model(const OnnxModel& m, const std::string& file, const Shape& x_shape, const std::vector<float>& x,
                 const ImportOptions& options = {});
/// The graph the importer makes (before any pass).
core::Graph import_without_passes(const std::string& path);
/// Number of layers of a type in a net.
int count_layers(const Model& net, const std::string& type);

/// Max |a - b|, infinity when the sizes differ.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace softneuro::test
