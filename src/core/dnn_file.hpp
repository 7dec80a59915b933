// Reading and writing .dnn files (layout in schemas/dnn.fbs and dnn_file.cpp).
#pragma once

#include "core/graph.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace softneuro::core {

/// The newest format version this library reads (1..this) and writes.
/// Version 2: a layer parameter an older library would ignore and so compute
/// something else (a conv2's or dense's act_scale/act_shift). A graph without
/// one is written as version 1, which every library reads.
inline constexpr uint32_t dnn_format_version = 2;
/// The oldest format version whose readers compute `graph` as written.
uint32_t required_format_version(const Graph& graph);

/// Reads and fully checks a .dnn file: header, sizes, checksum, the FlatBuffers
/// verifier, every enum, shape, offset and size. Weights are views into the
/// memory-mapped file (kept alive by Graph::storage). The graph itself (DAG,
/// shapes) is checked by the caller. Throws Error naming the file and field.
TunedGraph read_dnn(const std::string& path);
/// The same from bytes in memory (copied into aligned storage); `name` is used in errors.
TunedGraph read_dnn_bytes(const void* data, std::size_t size, const std::string& name);

/// The bytes of a .dnn file for the graph and its tuning (deterministic: the
/// same ones give the same bytes).
std::vector<unsigned char> serialize_dnn(const Graph& graph, const Tuning& tuning = {});
/// Writes serialize_dnn(graph, tuning) to a temporary file beside `path`, then renames it over `path`.
void write_dnn(const Graph& graph, const std::string& path, const Tuning& tuning = {});

/// Writes bytes atomically (temporary file + fsync + rename); used for every file we save.
void write_file_atomically(const std::string& path, const void* data, std::size_t size);

}  // namespace softneuro::core
