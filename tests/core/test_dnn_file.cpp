// .dnn files: round trips, and damaged files rejected with an error, never a crash.
#include "core/dnn_file.hpp"
#include "core/hash.hpp"
#include "core/model_impl.hpp"
#include "core/weight_quant.hpp"
#include "support/graphs.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <sys/stat.h>
#include <sys/sysmacros.h>

using namespace softneuro;

namespace {

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> run_once(const Model& net) {
  std::vector<NamedBlob> inputs;
  unsigned seed = 1;
  for (const auto& t : net.inputs()) {
    Blob b = Blob::allocate(t.shape);
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
    inputs.push_back({t.name, b});
  }
  std::vector<float> all;
  for (const auto& o : Session(net).run(inputs)) {
    const float* p = o.blob.data_as<float>();
    all.insert(all.end(), p, p + o.blob.numel());
  }
  return all;
}

// Loads bytes as Model::load would: parse, then check and prepare the graph.
void load_bytes(const std::vector<unsigned char>& bytes) {
  auto g = core::read_dnn_bytes(bytes.data(), bytes.size(), "mem.dnn");
  detail::WorkingModel::build(std::move(g.graph), std::move(g.tuning), "mem.dnn");
}

void rechecksum(std::vector<unsigned char>& b) {
  uint64_t sum = core::xxh64(b.data() + 64, b.size() - 64, core::xxh64(b.data(), 56));
  std::memcpy(b.data() + 56, &sum, 8);
}

}  // namespace

TEST_CASE("xxh64 matches the reference vectors", "[dnn]") {
  CHECK(core::xxh64("", 0) == 0xEF46DB3751D8E999ULL);
  CHECK(core::xxh64("abc", 3) == 0x44BC2CF5AD770999ULL);
  const char* s = "Nobody inspects the spammish repetition";
  CHECK(core::xxh64(s, std::strlen(s)) == 0xFBCEA83C8A378BF1ULL);
}

TEST_CASE("save -> load -> save is byte-identical and runs identically", "[dnn]") {
  for (auto graph : {test::chain_graph(10), test::multi_io_graph()}) {
    std::string a = test::temp_path("a.dnn"), b = test::temp_path("b.dnn");
    Model first = detail::make_model(graph);
    first.save(a);
    Model loaded = Model::load(a);
    loaded.save(b);
    CHECK(read_bytes(a) == read_bytes(b));
    CHECK(run_once(first) == run_once(loaded));
    CHECK(loaded.input_names() == first.input_names());
    CHECK(loaded.output_names() == first.output_names());
  }
}

TEST_CASE("the bundled demo model round-trips", "[dnn]") {
  std::string b = test::temp_path("demo2.dnn");
  Model net = Model::load(SOFTNEURO_DEMO_MODEL);
  net.save(b);
  CHECK(read_bytes(SOFTNEURO_DEMO_MODEL) == read_bytes(b));
  Model again = Model::load(b);
  CHECK(run_once(net) == run_once(again));
}

TEST_CASE("weights are 64-byte aligned in the mapped file", "[dnn]") {
  std::string a = test::temp_path("aligned.dnn");
  core::write_dnn(test::chain_graph(6), a);
  auto g = core::read_dnn(a);
  for (const auto& l : g.graph.layers)
    for (const auto& [k, w] : l.weights) CHECK(reinterpret_cast<uintptr_t>(w.data()) % 64 == 0);
}

TEST_CASE("scalar weights and empty lists round-trip (an empty vector of 8-byte values may sit at any offset)", "[dnn]") {
  // FlatBuffers does not align an empty vector; the loader refused such a file
  // as "damaged" (PP-OCR's direction classifier, saved by our own importer).
  core::Graph g = test::chain_graph(6);
  int k = 0;
  for (auto& l : g.layers) {
    for (int j = 0; j < 3; ++j, ++k) {
      Blob b = Blob::allocate(Shape{});
      b.data_as<float>()[0] = static_cast<float>(k);
      l.weights["scalar" + std::to_string(j)] = b;
      l.params["none" + std::to_string(j)] = std::vector<int64_t>{};
      l.params["nothing" + std::to_string(j)] = std::vector<double>{};
    }
  }
  std::string a = test::temp_path("scalars.dnn");
  core::write_dnn(g, a);
  auto back = core::read_dnn(a);
  k = 0;
  for (const auto& l : back.graph.layers)
    for (int j = 0; j < 3; ++j, ++k) {
      const Blob& b = l.weights.at("scalar" + std::to_string(j));
      CHECK(b.shape().rank() == 0);
      CHECK(b.data_as<float>()[0] == static_cast<float>(k));
      CHECK(std::get<std::vector<int64_t>>(l.params.at("none" + std::to_string(j))).empty());
      CHECK(std::get<std::vector<double>>(l.params.at("nothing" + std::to_string(j))).empty());
    }
}

TEST_CASE("a truncated file is rejected at every offset", "[dnn]") {
  auto bytes = core::serialize_dnn(test::multi_io_graph());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<unsigned char> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    CHECK_THROWS_AS(load_bytes(cut), Error);
  }
  // And from a file on disk, through the public API.
  std::string p = test::temp_path("cut.dnn");
  for (std::size_t n : {std::size_t{0}, std::size_t{10}, std::size_t{63}, std::size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(n));
    CHECK_THROWS_AS(Model::load(p), Error);
  }
}

TEST_CASE("a flipped byte anywhere is detected", "[dnn]") {
  auto bytes = core::serialize_dnn(test::multi_io_graph());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      auto bad = bytes;
      bad[i] ^= mask;
      INFO("offset " << i << " mask " << int(mask));
      CHECK_THROWS_AS(load_bytes(bad), Error);
    }
  }
}

TEST_CASE("damage behind a valid checksum is an error or a valid net, never a crash", "[dnn]") {
  // Checksums only catch accidents; the verifier and index checks must stand alone.
  auto bytes = core::serialize_dnn(test::multi_io_graph());
  std::mt19937 rng(5);
  int rejected = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i >= 56 && i < 64) continue;  // the checksum itself
    for (int k = 0; k < 3; ++k) {
      auto bad = bytes;
      bad[i] = static_cast<unsigned char>(rng());
      rechecksum(bad);
      try {
        load_bytes(bad);
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  CHECK(rejected > 0);
}

TEST_CASE("a future format version is refused with the version named", "[dnn]") {
  auto bytes = core::serialize_dnn(test::chain_graph(3));
  uint32_t v = core::dnn_format_version + 1;
  std::memcpy(bytes.data() + 8, &v, 4);
  rechecksum(bytes);
  try {
    load_bytes(bytes);
    FAIL("accepted a future version");
  } catch (const Error& e) {
    CHECK(e.field() == "header.format_version");
    CHECK_THAT(e.what(), Catch::Contains("newer than the library"));
  }
}

TEST_CASE("a graph with an affine after a fused activation is written as format version 2", "[dnn]") {
  // A library that reads version 1 only would ignore act_scale/act_shift and
  // compute the layer without them: it must refuse the file instead.
  auto version_of = [](const std::vector<unsigned char>& bytes) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + 8, 4);
    return v;
  };
  core::Graph plain = test::chain_graph(3);
  CHECK(version_of(core::serialize_dnn(plain)) == 1);  // every library reads it
  core::Graph affine = plain;
  affine.layers[0].params["act"] = std::string("relu");
  affine.layers[0].params["act_scale"] = 0.5;
  affine.layers[0].params["act_shift"] = -1.0;
  const auto bytes = core::serialize_dnn(affine);
  CHECK(version_of(bytes) == 2);
  const core::TunedGraph back = core::read_dnn_bytes(bytes.data(), bytes.size(), "affine.dnn");
  CHECK(back.graph.layers[0].get_float("act_scale", 1) == 0.5);
  CHECK(back.graph.layers[0].get_float("act_shift", 0) == -1.0);
}

TEST_CASE("load errors name the file", "[dnn]") {
  std::string p = test::temp_path("garbage.dnn");
  std::ofstream(p) << "this is not a model file at all, just some text that is long enough for a header...";
  try {
    Model::load(p);
    FAIL("accepted garbage");
  } catch (const Error& e) {
    CHECK(e.file() == p);
    CHECK_THAT(e.what(), Catch::Contains("bad magic"));
  }
  CHECK_THROWS_AS(Model::load(test::temp_path("does-not-exist.dnn")), Error);
}

TEST_CASE("a failed save leaves the previous file intact and no temporary behind", "[dnn]") {
  std::string p = test::temp_path("keep.dnn");
  core::write_dnn(test::chain_graph(4), p);
  auto before = read_bytes(p);
  // A graph whose weight has no memory fails half-way through serialisation.
  auto broken = test::chain_graph(4);
  broken.layers[0].weights["weight"] = Blob::view(nullptr, Shape{4, 4, 3, 3});
  CHECK_THROWS_AS(core::write_dnn(broken, p), Error);
  CHECK(read_bytes(p) == before);
  // A directory that does not exist: error, nothing written.
  CHECK_THROWS_AS(core::write_dnn(test::chain_graph(4), test::temp_path("no/such/dir/x.dnn")), Error);
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(p).parent_path()))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("the routine path survives a round trip", "[dnn]") {
  core::TunedGraph g{test::chain_graph(3)};
  g.tuning.routine_path.device_fingerprint = "test-cpu avx2 t2";
  g.tuning.routine_path.routines.push_back({"l0", "cpu/ref", {{"tile", 4}, {"block", 64}}, 1.5, 1.75});
  g.tuning.routine_path.adapts.push_back({"b0", "l1", "cpu", "cpu:float32:nhwc", {"cpu/nchw_to_nhwc"}, 0.25, {{"via", 1}}});
  auto back = core::read_dnn_bytes(core::serialize_dnn(g.graph, g.tuning).data(), core::serialize_dnn(g.graph, g.tuning).size(), "mem");
  REQUIRE(back.tuning.routine_path.routines.size() == 1);
  CHECK(back.tuning.routine_path.device_fingerprint == "test-cpu avx2 t2");
  CHECK(back.tuning.routine_path.routines[0].params == g.tuning.routine_path.routines[0].params);
  CHECK(back.tuning.routine_path.routines[0].predicted_ms == 1.5);
  REQUIRE(back.tuning.routine_path.adapts.size() == 1);
  CHECK(back.tuning.routine_path.adapts[0].steps == std::vector<std::string>{"cpu/nchw_to_nhwc"});
  CHECK(back.tuning.routine_path.adapts[0].params == RoutineParams{{"via", 1}});
  CHECK(back.tuning.routine_path.openmp_wait.empty());  // not recorded: older files
  // A tuned choice is used when it applies (cpu/ref has no parameters: the ones
  // above, outside its space, would make the default choice run the layer).
  back.tuning.routine_path.routines[0].params.clear();
  Model net = detail::make_model(std::move(back.graph), std::move(back.tuning));
  CHECK(Session(net).layers()[0].tuned);
  CHECK(net.tuned_fingerprint() == "test-cpu avx2 t2");
}

TEST_CASE("the OpenMP wait a path was tuned under survives a round trip, a malformed one is refused", "[dnn]") {
  auto g = test::chain_graph(3);
  core::Tuning tuning;
  tuning.routine_path.device_fingerprint = "test-cpu avx2 t2";
  tuning.routine_path.routines.push_back({"l0", "cpu/ref", {}, 1.5, 1.75});
  for (const char* wait : {"passive", "active", "spin=10000", "spin=0"}) {
    tuning.routine_path.openmp_wait = wait;
    auto bytes = core::serialize_dnn(g, tuning);
    CHECK(core::read_dnn_bytes(bytes.data(), bytes.size(), "mem").tuning.routine_path.openmp_wait == wait);
  }
  for (const std::string& wait : std::vector<std::string>{"spin=", "spin=12a", "sleepy", "spin=-5", std::string(100, '9'),
                                                       "spin=" + std::string(30, '1')}) {
    tuning.routine_path.openmp_wait = wait;
    auto bytes = core::serialize_dnn(g, tuning);
    try {
      core::read_dnn_bytes(bytes.data(), bytes.size(), "mem");
      FAIL("accepted openmp_wait '" << wait << "'");
    } catch (const Error& e) {
      CHECK(e.field() == "routine_path.openmp_wait");
      CHECK(e.file() == "mem");
    }
  }
}

TEST_CASE("dynamic dims and shape-bucket paths survive a round trip, bad ones are refused", "[dnn]") {
  core::TunedGraph g{test::chain_graph(3)};
  g.graph.inputs[0].dynamic_dims = {0, 2, 3};
  g.tuning.routine_path.routines.push_back({"l0", "cpu/ref", {}, 1.5, 1.75});
  g.tuning.routine_path.input_shapes = {{"input", Shape{1, 4, 8, 8}}};
  core::RoutinePath bucket;
  bucket.routines.push_back({"l0", "cpu/ref", {}, 4.0, 4.5});
  bucket.input_shapes = {{"input", Shape{2, 4, 32, 16}}};
  g.tuning.shape_paths.push_back(bucket);
  auto bytes = core::serialize_dnn(g.graph, g.tuning);
  auto back = core::read_dnn_bytes(bytes.data(), bytes.size(), "mem");
  CHECK(back.graph.inputs[0].dynamic_dims == std::vector<int>{0, 2, 3});
  CHECK(back.tuning.routine_path.input_shapes == g.tuning.routine_path.input_shapes);
  REQUIRE(back.tuning.shape_paths.size() == 1);
  CHECK(back.tuning.shape_paths[0].input_shapes == bucket.input_shapes);
  CHECK(back.tuning.shape_paths[0].routines[0].predicted_ms == 4.0);

  auto refused = [](const core::TunedGraph& bad, const std::string& field) {
    auto b = core::serialize_dnn(bad.graph, bad.tuning);
    try {
      core::read_dnn_bytes(b.data(), b.size(), "mem");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.field() == field);
      CHECK(e.file() == "mem");
    }
  };
  auto bad = g;
  bad.graph.inputs[0].dynamic_dims = {0, 4};  // past the rank
  refused(bad, "inputs.input.dynamic_dims");
  bad.graph.inputs[0].dynamic_dims = {2, 0};  // out of order
  refused(bad, "inputs.input.dynamic_dims");
  bad = g;
  bad.tuning.shape_paths[0].input_shapes = {{"input", Shape{2, 5, 32, 16}}};  // a fixed dim changed
  refused(bad, "shape_paths[0].input_shapes.input");
  bad.tuning.shape_paths[0].input_shapes = {{"nope", Shape{1}}};
  refused(bad, "shape_paths[0].input_shapes");
  bad.tuning.shape_paths[0].input_shapes.clear();
  refused(bad, "shape_paths[0].input_shapes");
}

TEST_CASE("calibrated blob quantisation survives a round trip and reaches routines", "[dnn]") {
  core::TunedGraph g{test::chain_graph(3)};
  g.tuning.blob_quant["b0"] = QuantParams{{0.05f}, {3}, -1};
  g.tuning.blob_quant["out"] = QuantParams{{0.1f, 0.2f}, {}, 1};
  auto bytes = core::serialize_dnn(g.graph, g.tuning);
  auto back = core::read_dnn_bytes(bytes.data(), bytes.size(), "mem");
  CHECK(back.tuning.blob_quant == g.tuning.blob_quant);
  Model net = detail::make_model(std::move(back.graph), std::move(back.tuning));
  // A non-positive scale is damage, not data.
  g.tuning.blob_quant["b0"].scales = {-1.0f};
  auto bad = core::serialize_dnn(g.graph, g.tuning);
  CHECK_THROWS_WITH(core::read_dnn_bytes(bad.data(), bad.size(), "mem"), Catch::Contains("blob_quant.b0"));
  // So is one beyond the range the library computes with (1e38 aborted in XNNPACK).
  for (float huge : {1e38f, 1e-38f}) {
    g.tuning.blob_quant["b0"].scales = {huge};
    auto out_of_range = core::serialize_dnn(g.graph, g.tuning);
    CHECK_THROWS_WITH(core::read_dnn_bytes(out_of_range.data(), out_of_range.size(), "mem"),
                      Catch::Contains("blob_quant.b0") && Catch::Contains("outside [1e-30, 1e30]"));
  }
}

TEST_CASE("weights on their int8 grid are stored as int8, damaged int8 weights are refused", "[dnn]") {
  auto g = test::chain_graph(1);
  Blob& w = g.layers[0].weights.at("weight");
  auto grid = core::on_int8_grid(w);
  REQUIRE(grid);
  const auto float_bytes = core::serialize_dnn(g).size();
  w = *grid;
  auto bytes = core::serialize_dnn(g);
  CHECK(bytes.size() < float_bytes);
  auto back = core::read_dnn_bytes(bytes.data(), bytes.size(), "mem");
  // A conv2's stays int8 in the file's memory (core::int8_weight); its float32
  // values are those saved.
  const Blob& got = back.graph.layers[0].weights.at("weight");
  REQUIRE(back.graph.layers[0].type == "conv2");
  CHECK(core::int8_weight(got));
  const Blob values = core::float_weight(got);
  CHECK(values.quant() == w.quant());
  CHECK(std::memcmp(values.data(), w.data(), w.byte_size()) == 0);
  CHECK(core::serialize_dnn(back.graph, back.tuning) == bytes);  // saved again: int8 again, byte for byte
  // The 7-bit grid of a routine whose weight range is 63 (qint8 u8s8): stored as
  // int8 too, and quantised again at that range it gives back its own values.
  {
    auto g7 = test::chain_graph(1);
    Blob& w7 = g7.layers[0].weights.at("weight");
    auto grid7 = core::on_int8_grid(w7, 63);
    REQUIRE(grid7);
    const int64_t oc = grid7->shape()[0], k = grid7->numel() / oc;
    const auto q = core::quantize_per_channel(grid7->data_as<float>(), oc, k, 63);
    for (int64_t i = 0; i < grid7->numel(); ++i) {
      CHECK(std::abs(q.q[static_cast<std::size_t>(i)]) <= 63);
      CHECK(static_cast<float>(q.q[static_cast<std::size_t>(i)]) * q.scale[static_cast<std::size_t>(i / k)] == grid7->data_as<float>()[i]);
    }
    w7 = *grid7;
    auto bytes7 = core::serialize_dnn(g7);
    CHECK(bytes7.size() < float_bytes);
    auto back7 = core::read_dnn_bytes(bytes7.data(), bytes7.size(), "mem");
    CHECK(std::memcmp(core::float_weight(back7.graph.layers[0].weights.at("weight")).data(), w7.data(), w7.byte_size()) == 0);
  }
  // A float32 weight whose values are off its scales' grid is stored as float32, without them.
  auto off = g;
  Blob shifted = Blob::allocate(w.shape());
  std::memcpy(shifted.data(), w.data(), w.byte_size());
  shifted.data_as<float>()[5] += 1e-3f;
  shifted.quant() = w.quant();
  off.layers[0].weights["weight"] = shifted;
  auto off_bytes = core::serialize_dnn(off);
  auto off_back = core::read_dnn_bytes(off_bytes.data(), off_bytes.size(), "mem");
  CHECK(off_back.graph.layers[0].weights.at("weight").quant().empty());
  CHECK(off_back.graph.layers[0].weights.at("weight").data_as<float>()[5] == shifted.data_as<float>()[5]);

  // int8 weights as another writer could store them, each damage refused naming the field.
  auto refused = [&](QuantParams q, const std::string& field) {
    auto bad = g;
    Blob raw = Blob::allocate(w.shape(), DType::qint8);
    raw.quant() = std::move(q);
    bad.layers[0].weights["weight"] = raw;
    auto b = core::serialize_dnn(bad);
    try {
      core::read_dnn_bytes(b.data(), b.size(), "mem");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.field() == field);
      CHECK(e.layer() == "l0");
      CHECK(e.file() == "mem");
    }
  };
  refused({{0.1f, 0.1f, 0.1f}, {}, 0}, "weights.weight.scales");  // 3 scales for 4 channels
  refused({{0.1f, 0.1f, std::numeric_limits<float>::infinity(), 0.1f}, {}, 0}, "weights.weight.scales");
  refused({{0.1f, 0.1f, 0.0f, 0.1f}, {}, 0}, "weights.weight.scales");
  refused({{1e38f}, {}, -1}, "weights.weight.scales");
  refused({{0.1f}, {200}, -1}, "weights.weight.zero_points");
  refused({{0.1f}, {0, 0}, -1}, "weights.weight.zero_points");
  refused({}, "weights.weight.scales");
}

TEST_CASE("a dense's blockwise weight (4-bit LLM codes) stays blockwise through a file, damaged ones are refused", "[dnn]") {
  // dense [6] -> [5]: codes [5, 6] in blocks of 4 along K (2 blocks a row, the last one short).
  auto graph_with = [](const Blob& w) {
    core::Graph g;
    g.name = "blocks";
    g.inputs = {{"x", Shape{1, 6}}};
    Layer d;
    d.name = "d";
    d.type = "dense";
    d.inputs = {"x"};
    d.outputs = {"y"};
    d.weights["weight"] = w;
    g.layers.push_back(d);
    g.outputs = {"y"};
    return g;
  };
  Blob w = Blob::allocate(Shape{5, 6}, DType::quint8);
  for (int i = 0; i < 30; ++i) w.data_as<uint8_t>()[i] = static_cast<uint8_t>(i % 16);
  w.quant().axis = 1;
  w.quant().block_size = 4;
  w.quant().scales = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f};  // negative and zero: ONNX Runtime's symmetric codes
  w.quant().zero_points = {8, 8, 0, 15, 8, 8, 1, 2, 3, 4};
  REQUIRE(core::block_quantized(w));
  auto bytes = core::serialize_dnn(graph_with(w));
  auto back = core::read_dnn_bytes(bytes.data(), bytes.size(), "mem");
  const Blob& got = back.graph.layers[0].weights.at("weight");
  CHECK(got.dtype() == DType::quint8);
  CHECK(got.quant() == w.quant());
  CHECK(core::block_quantized(got));
  CHECK(std::memcmp(got.data(), w.data(), 30) == 0);
  const Blob values = core::float_weight(got);  // what the float routines read
  CHECK(values.data_as<float>()[0] == (0 - 8) * 0.1f);
  CHECK(values.data_as<float>()[5] == (5 - 8) * -0.2f);
  CHECK(values.data_as<float>()[6 + 4] == (10 - 15) * 0.0f);
  auto refused_blob = [&](const Blob& raw, const std::string& field) {
    auto b = core::serialize_dnn(graph_with(raw));
    try {
      core::read_dnn_bytes(b.data(), b.size(), "mem");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.field() == field);
      CHECK(e.layer() == "d");
    }
  };
  auto refused = [&](QuantParams q, const std::string& field) {
    Blob raw = Blob::allocate(Shape{5, 6}, DType::quint8);
    raw.quant() = std::move(q);
    refused_blob(raw, field);
  };
  QuantParams q = w.quant();
  q.scales.pop_back();
  refused(q, "weights.weight.scales");
  q = w.quant();
  q.scales[3] = std::numeric_limits<float>::quiet_NaN();
  refused(q, "weights.weight.scales");
  q = w.quant();
  q.zero_points[2] = 300;
  refused(q, "weights.weight.zero_points");
  q = w.quant();
  q.block_size = -4;
  refused(q, "weights.weight.quant_block_size");
  q = w.quant();
  q.block_size = std::numeric_limits<int64_t>::max();  // one block a row: 5 scales, not 10
  refused(q, "weights.weight.scales");
  q.scales.resize(5);
  q.zero_points.resize(5);
  auto one_block = core::serialize_dnn(graph_with([&] { Blob b = w; b.quant() = q; return b; }()));
  CHECK(core::block_quantized(core::read_dnn_bytes(one_block.data(), one_block.size(), "mem").graph.layers[0].weights.at("weight")));

  // Two codes a byte (quint4, K a multiple of 32): [3, 64] in 96 bytes, the same values through the file.
  CHECK_FALSE(core::packed_codes4(w));  // (K 6)
  Blob wide = Blob::allocate(Shape{3, 64}, DType::quint8);
  for (int i = 0; i < 192; ++i) wide.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 7) % 16);
  wide.quant().axis = 1;
  wide.quant().block_size = 16;
  for (int i = 0; i < 12; ++i) {
    wide.quant().scales.push_back(0.1f * static_cast<float>(i - 3));
    wide.quant().zero_points.push_back(i % 16);
  }
  const Blob packed = *core::packed_codes4(wide);
  CHECK(packed.dtype() == DType::quint4);
  CHECK(packed.byte_size() == 96);
  CHECK(packed.data_as<uint8_t>()[1] == (7 | (((17 * 7) % 16) << 4)));  // codes 1 and 17 of row 0
  auto packed_bytes = core::serialize_dnn(graph_with(packed));
  const Blob packed_back = core::read_dnn_bytes(packed_bytes.data(), packed_bytes.size(), "mem").graph.layers[0].weights.at("weight");
  CHECK(packed_back.dtype() == DType::quint4);
  CHECK(core::block_quantized(packed_back));
  const Blob packed_values = core::float_weight(packed_back), wide_values = core::float_weight(wide);
  CHECK(std::memcmp(packed_values.data(), wide_values.data(), 192 * sizeof(float)) == 0);
  // A zero point past 15, or codes that are no blockwise weight (no blocks, K not a multiple of 32), are refused.
  Blob bad = packed.clone();
  bad.quant().zero_points[1] = 16;
  refused_blob(bad, "weights.weight.zero_points");
  bad = packed.clone();
  bad.quant().block_size = 0;
  bad.quant().scales = {0.5f};
  bad.quant().zero_points = {8};
  bad.quant().axis = -1;
  refused_blob(bad, "weights.weight.block_size");
  Blob odd = Blob::allocate(Shape{3, 48}, DType::quint4);
  odd.quant() = packed.quant();
  odd.quant().scales.resize(9);
  odd.quant().zero_points.resize(9);
  refused_blob(odd, "weights.weight.block_size");
}

// Before, storage_bytes wrapped: a conv weight of shape [16,16,2^27,2^27]
// needed 2^64 bytes, i.e. 0, and a file that claimed 0 bytes for it loaded.
TEST_CASE("a weight whose byte size overflows is refused, not wrapped to a small size", "[dnn]") {
  CHECK(storage_bytes(Shape{16, 16, int64_t{1} << 27, int64_t{1} << 27}, DType::float32, Layout::nchw) ==
        std::numeric_limits<std::size_t>::max());
  CHECK(Shape{int64_t{1} << 40, int64_t{1} << 40}.numel() == std::numeric_limits<int64_t>::max());
  CHECK(Shape{int64_t{1} << 40, 0, int64_t{1} << 40}.numel() == 0);
  CHECK_THROWS_WITH(Blob::allocate(Shape{int64_t{1} << 40, int64_t{1} << 40}), Catch::Contains("too large to allocate"));
  auto g = test::chain_graph(1);  // l0: conv2, weight [4,4,3,3] (576 bytes), bias [4]
  auto bytes = core::serialize_dnn(g);
  auto find_all = [&](const std::vector<int64_t>& values) {
    std::vector<std::size_t> at;
    std::vector<unsigned char> pattern(values.size() * 8);
    std::memcpy(pattern.data(), values.data(), pattern.size());
    for (auto it = bytes.begin(); (it = std::search(it, bytes.end(), pattern.begin(), pattern.end())) != bytes.end(); ++it)
      at.push_back(static_cast<std::size_t>(it - bytes.begin()));
    return at;
  };
  auto dims = find_all({4, 4, 3, 3}), size = find_all({576});
  REQUIRE(dims.size() == 1);
  REQUIRE(size.size() == 1);
  const std::vector<int64_t> huge{16, 16, int64_t{1} << 27, int64_t{1} << 27}, zero{0};
  std::memcpy(bytes.data() + dims[0], huge.data(), 32);
  std::memcpy(bytes.data() + size[0], zero.data(), 8);
  rechecksum(bytes);
  try {
    load_bytes(bytes);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.field() == "weights.weight");
    CHECK(e.layer() == "l0");
  }
}

TEST_CASE("devices without registered memory are unavailable", "[dnn]") {
  CHECK(device_memory(Device::cpu) == nullptr);
  CHECK_THROWS_AS(register_device_memory(Device::cpu, DeviceMemory{}), Error);
  CHECK_THROWS_AS(register_device_memory(Device::cuda, DeviceMemory{}), Error);  // incomplete
}

TEST_CASE("a saved file has the permissions the user's umask gives, and no temporary file is left", "[dnn][save]") {
  // mkstemp's temporary made every file 0600, then a fixed chmod 0644 ignored a umask of 077.
  const std::string p = test::temp_path("umask.dnn");
  const auto graph = test::chain_graph(2);
  for (const auto& [mask, mode] : {std::pair<mode_t, mode_t>{022, 0644}, {077, 0600}, {002, 0664}}) {
    const mode_t before = ::umask(mask);
    core::write_dnn(graph, p);
    ::umask(before);
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == mode);
  }
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(p).parent_path()))
    left += e.path().filename().string().rfind("umask.dnn.tmp", 0) == 0;
  CHECK(left == 0);
  std::remove(p.c_str());
}

TEST_CASE("weights with values that are not finite have no int8 quantisation", "[dnn]") {
  // Fuzzing found it (fuzz/regressions/dnn_load/int8-conv-nan-weight): a .dnn
  // whose qint8 conv has a NaN weight converted NaN to int (undefined).
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> w = {0.5f, -1.0f, bad, 2.0f};
    try {
      core::quantize_per_channel(w.data(), 2, 2);
      FAIL("quantised a weight of " << bad);
    } catch (const Error& e) {
      CHECK(e.field() == "weight");
      CHECK_THAT(e.what(), Catch::Contains("output channel 1"));
    }
    // And its bias (fuzz/regressions/dnn_load/int8-conv-nan-bias).
    CHECK_THROWS_WITH(core::quantize_bias_value(bad, 0.01), Catch::Contains("no int32 representation"));
  }
  // A channel of values too small for a scale in range (1e-40 / 127 underflows
  // to 0, and w / 0 is infinite): zeros at scale 1.
  std::vector<float> tiny = {1e-40f, -1e-40f, 0.5f, 1.0f};
  auto q = core::quantize_per_channel(tiny.data(), 2, 2);
  CHECK(q.scale == std::vector<float>{1.0f, 1.0f / 127});
  CHECK(q.q == std::vector<int8_t>{0, 0, 64, 127});
  // Values needing a scale above 1e30 have none in range either.
  std::vector<float> huge = {1e33f, 1.0f};
  CHECK_THROWS_WITH(core::quantize_per_channel(huge.data(), 1, 2), Catch::Contains("scale above 1e30"));
  Blob big = Blob::allocate(Shape{1, 2});
  std::copy(huge.begin(), huge.end(), big.data_as<float>());
  CHECK_FALSE(core::on_int8_grid(big));  // stored as float32
  CHECK(core::quantize_bias_value(1.0f, 0.01) == 100);
  CHECK(core::quantize_bias_value(1e30f, 0.01) == 1 << 30);
}

TEST_CASE("int8 weights read back per tensor and per slice of any axis", "[dnn]") {
  // dequantize_weight walks runs of one slice; each value against its formula.
  Blob q = Blob::allocate(Shape{2, 3, 4}, DType::quint8);
  for (int64_t i = 0; i < q.numel(); ++i) q.data_as<uint8_t>()[i] = static_cast<uint8_t>(i * 11 % 256);
  for (int axis : {-1, 0, 1, 2}) {
    q.quant() = QuantParams{};
    q.quant().axis = axis;
    const int64_t slices = axis < 0 ? 1 : q.shape()[axis];
    for (int64_t k = 0; k < slices; ++k) {
      q.quant().scales.push_back(0.5f + 0.25f * static_cast<float>(k));
      q.quant().zero_points.push_back(static_cast<int32_t>(3 * k + 1));
    }
    const Blob v = core::dequantize_weight(q, "w");
    for (int64_t i = 0; i < q.numel(); ++i) {
      const int64_t inner = axis == 0 ? 12 : axis == 1 ? 4 : 1;
      const std::size_t k = axis < 0 ? 0 : static_cast<std::size_t>(i / inner % slices);
      CHECK(v.data_as<float>()[i] ==
            static_cast<float>(q.data_as<uint8_t>()[i] - q.quant().zero_points[k]) * q.quant().scales[k]);
    }
  }
}

TEST_CASE("prepared weights round-trip, aligned, and saved again byte for byte", "[dnn][prepared]") {
  core::TunedGraph g{test::chain_graph(2)};
  auto prepared = std::make_shared<std::map<std::string, Blob>>();
  for (int i = 0; i < 3; ++i) {
    Blob b = Blob::allocate(Shape{100 + 37 * i}, DType::uint8);
    for (int64_t j = 0; j < b.numel(); ++j) b.data_as<uint8_t>()[j] = static_cast<uint8_t>(j * (i + 3));
    prepared->emplace(fmt::format("l{}|cpu:float32:nchw/some|k{}", i, i), b);
  }
  g.tuning.prepared = prepared;
  g.tuning.prepared_tag = "libsoftneuro test | avx2";
  const auto bytes = core::serialize_dnn(g.graph, g.tuning);
  const core::TunedGraph back = core::read_dnn_bytes(bytes.data(), bytes.size(), "p.dnn");
  CHECK(back.tuning.prepared_tag == g.tuning.prepared_tag);
  REQUIRE(back.tuning.prepared);
  REQUIRE(back.tuning.prepared->size() == 3);
  for (const auto& [key, b] : *prepared) {
    const Blob& r = back.tuning.prepared->at(key);
    CHECK(reinterpret_cast<std::uintptr_t>(r.data()) % 64 == 0);
    REQUIRE(r.byte_size() == b.byte_size());
    CHECK(std::memcmp(r.data(), b.data(), b.byte_size()) == 0);
  }
  CHECK(core::serialize_dnn(back.graph, back.tuning) == bytes);
  // A file without them reads none (older files, tune --no-prepared-weights).
  const auto plain = core::serialize_dnn(test::chain_graph(2));
  CHECK_FALSE(core::read_dnn_bytes(plain.data(), plain.size(), "q.dnn").tuning.prepared);
}

TEST_CASE("a FIFO or a device is neither read as a model nor replaced by one", "[dnn]") {
  Model net = detail::make_model(test::chain_graph(3));
  // A FIFO with no writer: opening it to read waited forever (Model::load, the importers).
  const std::string fifo = test::temp_path("model.fifo");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(Model::load(fifo), Catch::Contains("not a regular file") && Catch::Contains(fifo));
  // Saving over it: refused, and it stays a FIFO (a rename replaced it).
  CHECK_THROWS_WITH(net.save(fifo), Catch::Contains("a FIFO") && Catch::Contains("refusing to replace"));
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  // A device node the test makes itself (as root, where mknod is allowed): /dev/null's numbers.
  const std::string dev = test::temp_path("null.dev");
  std::filesystem::remove(dev);
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    CHECK_THROWS_WITH(net.save(dev), Catch::Contains("a device"));
    REQUIRE(::stat(dev.c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    std::filesystem::remove(dev);
  }
  // A folder is refused too; a regular file is replaced as before.
  CHECK_THROWS_WITH(net.save(test::temp_path("")), Catch::Contains("a folder"));
  const std::string plain = test::temp_path("plain.dnn");
  net.save(plain);
  net.save(plain);
  CHECK(Model::load(plain).input_names() == net.input_names());
  std::filesystem::remove(fifo);
}
