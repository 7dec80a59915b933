// Test harness: run one layer through one routine, the way the executor would
// (infer shapes, find the routine, check supports, prepare, allocate, run).
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/routine.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro::test {

/// Runs `layer` on `inputs` with the routine named by `descriptor` (in
/// `registry`, nullptr: the process's) on the global pool and returns the
/// outputs. Throws softneuro::Error when shape inference fails, the routine
/// is unknown, or it does not support the layer.
std::vector<Blob> run_layer(const Layer& layer, const std::vector<Blob>& inputs,
                            std::string_view descriptor = "cpu/ref", const core::RoutineRegistry* registry = nullptr);

/// Runs a prepared routine once on `inputs` (in its schema's layout) with a
/// workspace of its size, outputs of `output_shapes` in `schema`, on the global pool.
std::vector<Blob> run_prepared(PreparedRoutine& prepared, const std::vector<Blob>& inputs,
                               const std::vector<Shape>& output_shapes, const Schema& schema = {});

/// A float32 blob of `shape` holding `values` (their count must match).
Blob make_blob(const Shape& shape, const std::vector<float>& values);
/// A float32 blob of `shape` holding 0, 1, 2, ... (times `scale`, plus `offset`).
Blob iota_blob(const Shape& shape, float scale = 1.0f, float offset = 0.0f);
/// The elements of a float32 blob.
std::vector<float> values(const Blob& blob);

/// A layer of `type` named "L" (or `name`) with inputs "x0".."x{n-1}",
/// outputs "y0".."y{m-1}", and the given parameters and weights.
Layer make_layer(std::string type, std::map<std::string, Attr> params = {},
                 std::map<std::string, Blob> weights = {}, int num_inputs = 1, int num_outputs = 1,
                 std::string name = "L");

}  // namespace softneuro::test
