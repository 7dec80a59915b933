// Blobs, schemas, .npy files, the thread pool, the registry's answers.
#include "core/tensor_math.hpp"
#include "core/aligned_memory.hpp"
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/narrow_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/npy.hpp>
#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <utility>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <filesystem>
#include <fstream>
#include <vector>

using namespace softneuro;

TEST_CASE("schemas parse and print canonically", "[basics]") {
  CHECK(Schema::parse("cpu") == Schema{});
  CHECK(Schema::parse("cpu:float32").to_string() == "cpu");
  CHECK(Schema::parse("cpu:qint8").to_string() == "cpu:qint8");
  CHECK(Schema::parse("cpu:float32:nhwc").to_string() == "cpu:float32:nhwc");
  CHECK(Schema::parse("cuda:float16").device == Device::cuda);
  CHECK_THROWS_AS(Schema::parse("tpu"), Error);
  CHECK_THROWS_AS(Schema::parse("cpu:float33"), Error);
  CHECK_THROWS_AS(Schema::parse("cpu:float32:nchw:x"), Error);
  CHECK(make_descriptor(Schema::parse("cpu:qint8"), "onednn") == "cpu:qint8/onednn");
}

TEST_CASE("shapes and blobs", "[basics]") {
  Shape s{2, 3, 4};
  CHECK(s.numel() == 24);
  CHECK(s.to_string() == "[2,3,4]");
  CHECK(Shape{}.numel() == 1);
  CHECK(storage_bytes({1, 3, 2, 2}, DType::float32, Layout::nchw8c) == 8 * 4 * 4);
  Blob b = Blob::allocate({2, 2});
  b.data_as<float>()[3] = 5;
  Blob c = b.clone();
  b.data_as<float>()[3] = 1;
  CHECK(c.data_as<float>()[3] == 5);
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
  // A default blob is empty (it once was not: its rank-0 shape counts one element).
  CHECK(Blob{}.empty());
  CHECK_FALSE(b.empty());
}

// An LLM's blockwise scales are hundreds of MB: copies of a blob (graphs are
// copied per plan) share its quantisation until one of them changes it.
TEST_CASE("blob copies share their quantisation until one changes it", "[basics]") {
  Blob w = Blob::allocate({4, 64}, DType::quint8);
  w.quant().scales.assign(8, 0.5f);
  w.quant().zero_points.assign(8, 8);
  w.quant().axis = 1;
  w.quant().block_size = 32;
  Blob copy = w;
  const Blob& seen = copy;
  CHECK(&seen.quant() == &std::as_const(w).quant());
  copy.quant().scales[0] = 2.0f;
  CHECK(std::as_const(w).quant().scales[0] == 0.5f);
  CHECK(seen.quant().scales[0] == 2.0f);
  CHECK(seen.quant().block_size == 32);
  CHECK(Blob{}.quant().empty());
  Blob cloned = w.clone();
  cloned.quant().axis = 0;
  CHECK(std::as_const(w).quant().axis == 1);
}

TEST_CASE("long-lived buffers: 64-byte aligned, 2 MiB aligned from 2 MiB up, zeroed blobs", "[basics]") {
  for (std::size_t bytes : {std::size_t(0), std::size_t(100), core::kHugePageBytes - 64, core::kHugePageBytes,
                            core::kHugePageBytes * 3 + 1000}) {
    void* p = core::allocate_aligned(bytes);
    REQUIRE(p != nullptr);
    const auto at = reinterpret_cast<uintptr_t>(p);
    CHECK(at % 64 == 0);
    if (bytes >= core::kHugePageBytes) CHECK(at % core::kHugePageBytes == 0);
    // Every byte asked for is there (the tail past the last 2 MiB boundary too).
    if (bytes) {
      std::memset(p, 0xab, bytes);
      CHECK(static_cast<unsigned char*>(p)[bytes - 1] == 0xab);
    }
    std::free(p);
  }
  // A large blob (huge pages) is zero-filled like a small one.
  Blob big = Blob::allocate({3, 1024, 1024});
  const float* f = big.data_as<float>();
  CHECK(reinterpret_cast<uintptr_t>(f) % core::kHugePageBytes == 0);
  CHECK(f[0] == 0.0f);
  CHECK(f[big.numel() - 1] == 0.0f);
}

TEST_CASE("SOFTNEURO_MAX_CPU_ISA levels: names, order, what each cap leaves", "[basics]") {
  using core::CpuIsa;
  CHECK(core::parse_cpu_isa("avx2") == CpuIsa::avx2);
  CHECK(core::parse_cpu_isa("AVX512_CORE") == CpuIsa::avx512_core);
  CHECK(core::parse_cpu_isa("all") == CpuIsa::all);
  CHECK_FALSE(core::parse_cpu_isa("avx512").has_value());  // oneDNN's names only
  CHECK_FALSE(core::parse_cpu_isa("").has_value());
  for (CpuIsa i : {CpuIsa::sse41, CpuIsa::avx2, CpuIsa::avx2_vnni, CpuIsa::avx512_core, CpuIsa::avx512_core_vnni,
                   CpuIsa::avx512_core_bf16, CpuIsa::avx512_core_amx, CpuIsa::all})
    CHECK(core::parse_cpu_isa(core::cpu_isa_name(i)) == i);

  const core::CpuFeatures every = core::CpuFeatures::every();
  CHECK(core::cap_cpu_features(every, CpuIsa::all) == every);
  const auto sse = core::cap_cpu_features(every, CpuIsa::sse41);
  CHECK_FALSE(sse.avx);
  CHECK_FALSE(sse.avx2_fma());
  CHECK_FALSE(sse.avx512_core());
  CHECK_FALSE(sse.amx_int8);
  const auto avx2 = core::cap_cpu_features(every, CpuIsa::avx2);
  CHECK(avx2.avx2_fma());
  CHECK(avx2.f16c);
  CHECK_FALSE(avx2.avx_vnni);
  CHECK_FALSE(avx2.avx512f);
  CHECK_FALSE(avx2.avx512_vnni);
  const auto vnni = core::cap_cpu_features(every, CpuIsa::avx512_core_vnni);
  CHECK(vnni.avx512_core());
  CHECK(vnni.avx_vnni);
  CHECK(vnni.avx512_vnni);
  CHECK_FALSE(vnni.avx512_bf16);
  CHECK_FALSE(vnni.amx_tile);
  const auto amx = core::cap_cpu_features(every, CpuIsa::avx512_core_amx);
  CHECK(amx.amx_int8);
  CHECK(amx.avx512_fp16);
  // A cap never adds what the CPU lacks.
  const auto none = core::cap_cpu_features(core::CpuFeatures{}, CpuIsa::all);
  CHECK_FALSE(none.avx2);
  CHECK_FALSE(none.avx512f);
  // This process: within its cap (the CTests all_tests_at_* run everything capped).
  const auto& here = core::cpu_features();
  if (core::max_cpu_isa() < CpuIsa::avx512_core) CHECK_FALSE(here.avx512f);
  if (core::max_cpu_isa() < CpuIsa::avx2) CHECK_FALSE(here.avx2);
}

TEST_CASE("constant folding refuses a tensor of bytes instead of reading it as floats past its end", "[basics]") {
  // (The importer keeps MatMulNBits's codes as uint8 blobs; read as float32 a blob of n bytes is 4n bytes.)
  Blob b = Blob::allocate(Shape{5}, DType::uint8);
  CHECK_THROWS_AS(core::to_ints(b), Error);
  CHECK_THROWS_AS(core::to_doubles(b), Error);
  Blob q = Blob::allocate(Shape{5}, DType::qint8);
  CHECK_THROWS_AS(core::to_ints(q), Error);
  CHECK(core::to_ints(core::int_blob(Shape{2}, {3, -4})) == std::vector<int64_t>{3, -4});
}

TEST_CASE(".npy files round-trip", "[basics]") {
  for (Shape s : {Shape{5}, Shape{1, 3, 4, 2}, Shape{}}) {
    Blob b = test::iota_blob(s, 0.5f, -1.0f);
    std::string p = test::temp_path("x.npy");
    save_npy(p, b);
    Blob back = load_npy(p);
    CHECK(back.shape() == s);
    CHECK(test::values(back) == test::values(b));
  }
  // Every typed I/O dtype round-trips bit for bit, and |i1/|u1 read as plain int8/uint8.
  for (DType d : {DType::float64, DType::int8, DType::uint8, DType::int16, DType::uint16, DType::int32, DType::uint32,
                  DType::int64, DType::uint64, DType::boolean, DType::float16, DType::bfloat16}) {  // bfloat16: '<V2'
    Blob b = Blob::allocate(Shape{2, 3}, d);
    auto* bytes = static_cast<unsigned char*>(b.data());
    for (std::size_t i = 0; i < b.byte_size(); ++i) bytes[i] = d == DType::boolean ? i % 2 : static_cast<unsigned char>(i * 37 + 1);
    std::string p = test::temp_path("typed.npy");
    save_npy(p, b);
    Blob back = load_npy(p);
    INFO(to_string(d));
    CHECK(back.dtype() == d);
    CHECK(back.shape() == b.shape());
    CHECK(std::memcmp(back.data(), b.data(), b.byte_size()) == 0);
  }
  std::string bad = test::temp_path("bad.npy");
  std::ofstream(bad) << "not numpy";
  CHECK_THROWS_AS(load_npy(bad), Error);
}

TEST_CASE("narrow types: every value round-trips, Cast's rounding, saturation, wrapping and specials", "[basics][narrow]") {
  using core::cast_bits;
  using core::ScaleRounding;
  const auto up = ScaleRounding::up;
  auto cast = [&](DType t, float x, bool saturate = true) { return narrow_value(t, cast_bits(t, x, saturate, up)); };
  for (int d = static_cast<int>(DType::float8e4m3fn); d <= static_cast<int>(DType::uint2); ++d) {
    const auto t = static_cast<DType>(d);
    INFO(to_string(t));
    REQUIRE(is_narrow(t));
    CHECK(dtype_size(t) == 1);
    for (int b = 0; b < 256; ++b) {  // every value is held exactly, and found again
      const float v = narrow_value(t, static_cast<uint8_t>(b));
      // (float8e8m0 rounds up whatever its float32 mantissa holds: 2^-127 is subnormal there, so down)
      const float back = narrow_value(t, cast_bits(t, v, false, t == DType::float8e8m0 ? ScaleRounding::down : up));
      CHECK((back == v || (std::isnan(back) && std::isnan(v))));
      uint8_t bits;
      CHECK(core::exact_narrow_bits(t, v, bits) == !(std::isnan(v) && t == DType::float4e2m1));
    }
  }
  // The largest finite values; beyond them saturation, or infinity / NaN as the type has them.
  const std::pair<DType, float> largest[] = {{DType::float8e4m3fn, 448}, {DType::float8e4m3fnuz, 240},
                                             {DType::float8e5m2, 57344}, {DType::float8e5m2fnuz, 57344},
                                             {DType::float4e2m1, 6}};
  for (const auto& [t, m] : largest) {
    INFO(to_string(t));
    CHECK(cast(t, 1e6f) == m);
    CHECK(cast(t, -INFINITY) == -m);
    uint8_t bits;
    CHECK(core::exact_narrow_bits(t, m, bits));
    CHECK_FALSE(core::exact_narrow_bits(t, m * 1.01f, bits));
  }
  CHECK(std::isnan(cast(DType::float8e4m3fn, 1e6f, false)));
  CHECK(std::isnan(cast(DType::float8e4m3fnuz, INFINITY, false)));
  CHECK(cast(DType::float8e5m2, 1e6f, false) == INFINITY);
  CHECK(cast(DType::float8e5m2, -INFINITY, false) == -INFINITY);
  CHECK(cast(DType::float4e2m1, 1e6f, false) == 6);  // no infinity, no NaN: always saturates
  CHECK(cast(DType::float8e4m3fn, 460, false) == 448);  // rounds down onto the largest value
  CHECK(std::isnan(cast(DType::float8e4m3fn, 470, false)));
  // Nearest, ties to even; subnormals; no -0 in the fnuz kinds.
  CHECK(cast(DType::float8e4m3fn, 0.3f) == 0.3125f);
  CHECK(cast(DType::float8e4m3fn, -3.3f) == -3.25f);
  CHECK(cast(DType::float4e2m1, 0.25f) == 0.0f);
  CHECK(cast(DType::float4e2m1, 0.75f) == 1.0f);
  CHECK(cast(DType::float4e2m1, 2.5f) == 2.0f);
  CHECK(cast(DType::float4e2m1, 5.0f) == 4.0f);
  CHECK(cast(DType::float8e4m3fn, std::ldexp(1.0f, -9)) == std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK(cast_bits(DType::float8e4m3fn, -1e-9f, true, up) == 0x80);
  CHECK(cast_bits(DType::float8e4m3fnuz, -1e-9f, true, up) == 0x00);
  CHECK(std::isnan(narrow_value(DType::float8e4m3fnuz, 0x80)));
  CHECK(std::isnan(cast(DType::float8e5m2, NAN)));
  // Integers: toward zero, then wrapped; the byte holds the low bits.
  CHECK(cast(DType::int4, -9) == 7);
  CHECK(cast(DType::int4, 8) == -8);
  CHECK(cast(DType::int4, 2.7f) == 2);
  CHECK(cast(DType::int4, -2.7f) == -2);
  CHECK(cast(DType::uint2, -3) == 1);
  CHECK(cast(DType::int2, 2) == -2);
  CHECK(cast_bits(DType::int4, -1, true, up) == 0x0f);
  CHECK(cast(DType::uint4, NAN) == 0);
  uint8_t bits;
  CHECK_FALSE(core::exact_narrow_bits(DType::int4, 8, bits));
  CHECK_FALSE(core::exact_narrow_bits(DType::int4, 2.5f, bits));
  // float8e8m0: powers of two, rounded as asked; 0 is the smallest, 2^-127; NaN and infinities are NaN.
  CHECK(cast(DType::float8e8m0, 0.124f) == 0.125f);
  CHECK(cast(DType::float8e8m0, 1.1f) == 2.0f);
  CHECK(narrow_value(DType::float8e8m0, cast_bits(DType::float8e8m0, 1.1f, true, ScaleRounding::down)) == 1.0f);
  CHECK(narrow_value(DType::float8e8m0, cast_bits(DType::float8e8m0, 1.6f, true, ScaleRounding::nearest)) == 2.0f);
  CHECK(cast(DType::float8e8m0, 0.0f) == std::ldexp(1.0f, -127));
  CHECK(cast_bits(DType::float8e8m0, INFINITY, true, up) == 0xff);
  CHECK(std::isnan(narrow_value(DType::float8e8m0, 0xff)));
  CHECK_THROWS_AS(narrow_bits(DType::float32, 1.0f), Error);
}

TEST_CASE("narrow types in .npy: 1-byte voids, read as the type the caller names", "[basics][npy][narrow]") {
  Blob b = Blob::allocate(Shape{5}, DType::int4);
  for (int i = 0; i < 5; ++i) b.data_as<uint8_t>()[i] = narrow_bits(DType::int4, static_cast<float>(i - 3));
  const std::string p = test::temp_path("int4.npy");
  save_npy(p, b);
  CHECK_THROWS_WITH(load_npy(p), Catch::Contains("1-byte types"));
  Blob back = load_npy(p, DType::int4);
  CHECK(back.dtype() == DType::int4);
  CHECK(std::memcmp(back.data(), b.data(), 5) == 0);
  CHECK(narrow_value(DType::int4, back.data_as<uint8_t>()[0]) == -3);
  CHECK(load_npy(p, DType::float8e5m2).dtype() == DType::float8e5m2);
  // A file of another dtype is read as what it holds, whatever the caller names.
  const std::string f = test::temp_path("f32.npy");
  save_npy(f, test::iota_blob(Shape{2}, 1.0f, 0.0f));
  CHECK(load_npy(f, DType::int4).dtype() == DType::float32);
}

TEST_CASE("a folder of .npy samples loads in name order, bad folders are clear errors", "[basics][npy]") {
  namespace fs = std::filesystem;
  const std::string dir = test::temp_path("samples");
  fs::remove_all(dir);
  fs::create_directories(dir);
  CHECK_THROWS_WITH(load_samples(dir, {"x"}), Catch::Contains("no .npy or .npz samples"));
  for (int k : {2, 0, 1}) save_npy(dir + "/s" + std::to_string(k) + ".npy", test::iota_blob(Shape{1, 2}, 1.0f, float(k)));
  std::ofstream(dir + "/notes.txt") << "skipped";
  auto samples = load_samples(dir, {"x"});
  REQUIRE(samples.size() == 3);
  for (int k = 0; k < 3; ++k) {
    REQUIRE(samples[k].size() == 1);
    CHECK(samples[k][0].name == "x");
    CHECK(test::values(samples[k][0].blob) == std::vector<float>{float(k), float(k) + 1});
  }
  CHECK_THROWS_WITH(load_samples(dir, {"x"}, 2), Catch::Contains("more than 2 samples"));
  Blob ints = Blob::allocate(Shape{2}, DType::int32);
  std::memset(ints.data(), 0, ints.byte_size());
  save_npy(dir + "/s3.npy", ints);
  CHECK_THROWS_WITH(load_samples(dir, {"x"}), Catch::Contains("must be float32"));
  CHECK_THROWS_WITH(load_samples(dir + "/s0.npy", {"x"}), Catch::Contains("not a folder"));
  fs::remove_all(dir);
}

TEST_CASE("samples of integer inputs load as the model's dtype: token ids beside a float input", "[basics][npy]") {
  // softneuro tune --calibration refused a BERT's int64 token ids ("must be float32").
  namespace fs = std::filesystem;
  const std::string dir = test::temp_path("int_samples");
  fs::remove_all(dir);
  fs::create_directories(dir);
  Blob ids = Blob::allocate(Shape{1, 4}, DType::int64);
  for (int64_t i = 0; i < 4; ++i) ids.data_as<int64_t>()[i] = 100 + i;
  const NamedBlob sample[] = {{"input_ids", ids}, {"scale", test::iota_blob(Shape{1}, 1.0f, 0.5f)}};
  save_npz(dir + "/s0.npz", sample);
  const auto samples = load_samples(dir, {"input_ids", "scale"}, 16, {DType::int64, DType::float32});
  REQUIRE(samples.size() == 1);
  REQUIRE(samples[0][0].blob.dtype() == DType::int64);
  CHECK(samples[0][0].blob.data_as<int64_t>()[3] == 103);
  CHECK_THROWS_WITH(load_samples(dir, {"input_ids", "scale"}, 16, {DType::int32, DType::float32}),
                    Catch::Contains("a sample of input 'input_ids' must be int32 (the model's input), the file holds int64"));
  CHECK_THROWS_WITH(load_samples(dir, {"input_ids", "scale"}), Catch::Contains("must be float32"));
  CHECK_THROWS_WITH(load_samples(dir, {"input_ids", "scale"}, 16, {DType::int64}), Catch::Contains("1 input dtypes for 2 inputs"));
  fs::remove_all(dir);
}

// Archives numpy 1.24 wrote: np.savez(f, x=np.arange(6, dtype=np.float32).reshape(1, 2, 3),
// y=np.array([[1.5, -2]], dtype=np.float32)), and the same with np.savez_compressed.
const std::string kNumpySavez(
    "\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\xa9\x7c\x8d\x2b\x98\x00\x00\x00\x98\x00\x00\x00\x05\x00\x14\x00\x78\x2e"
    "\x6e\x70\x79\x01\x00\x10\x00\x98\x00\x00\x00\x00\x00\x00\x00\x98\x00\x00\x00\x00\x00\x00\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76"
    "\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x66\x34\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72"
    "\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x31\x2c\x20\x32\x2c\x20\x33\x29\x2c\x20\x7d\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x00\x00\x00\x00\x00\x00\x80\x3f\x00"
    "\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\xfd\xcf\xa5"
    "\x08\x88\x00\x00\x00\x88\x00\x00\x00\x05\x00\x14\x00\x79\x2e\x6e\x70\x79\x01\x00\x10\x00\x88\x00\x00\x00\x00\x00\x00\x00\x88\x00"
    "\x00\x00\x00\x00\x00\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x3c\x66\x34\x27\x2c"
    "\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27"
    "\x3a\x20\x28\x31\x2c\x20\x32\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x0a\x00\x00\xc0\x3f\x00\x00\x00\xc0\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\xa9\x7c"
    "\x8d\x2b\x98\x00\x00\x00\x98\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00\x78\x2e\x6e\x70"
    "\x79\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00\xfd\xcf\xa5\x08\x88\x00\x00\x00\x88\x00\x00\x00\x05\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\xcf\x00\x00\x00\x79\x2e\x6e\x70\x79\x50\x4b\x05\x06\x00\x00\x00\x00\x02\x00\x02\x00"
    "\x66\x00\x00\x00\x8e\x01\x00\x00\x00\x00",
    522);
const std::string kNumpySavezCompressed(
    "\x50\x4b\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x21\x00\xa9\x7c\x8d\x2b\x58\x00\x00\x00\x98\x00\x00\x00\x05\x00\x14\x00\x78\x2e"
    "\x6e\x70\x79\x01\x00\x10\x00\x98\x00\x00\x00\x00\x00\x00\x00\x58\x00\x00\x00\x00\x00\x00\x00\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50"
    "\xc6\x50\xad\x9e\x92\x5a\x9c\x5c\xa4\x6e\xa5\xa0\x6e\x93\x66\xa2\xae\xa3\xa0\x9e\x96\x5f\x54\x52\x94\x98\x17\x9f\x5f\x94\x92\x0a"
    "\x12\x77\x4b\xcc\x29\x4e\x05\x8a\x17\x67\x24\x16\xa4\x02\xf9\x1a\x86\x3a\x0a\x46\x3a\x0a\xc6\x9a\x3a\x0a\xb5\x0a\xe4\x01\x2e\x06"
    "\x30\x68\xb0\x07\x12\x0e\x40\x04\xc4\x0d\x40\xbc\xc0\x01\x00\x50\x4b\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x21\x00\xfd\xcf\xa5"
    "\x08\x4d\x00\x00\x00\x88\x00\x00\x00\x05\x00\x14\x00\x79\x2e\x6e\x70\x79\x01\x00\x10\x00\x88\x00\x00\x00\x00\x00\x00\x00\x4d\x00"
    "\x00\x00\x00\x00\x00\x00\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50\xc6\x50\xad\x9e\x92\x5a\x9c\x5c\xa4\x6e\xa5\xa0\x6e\x93\x66\xa2\xae"
    "\xa3\xa0\x9e\x96\x5f\x54\x52\x94\x98\x17\x9f\x5f\x94\x92\x0a\x12\x77\x4b\xcc\x29\x4e\x05\x8a\x17\x67\x24\x16\xa4\x02\xf9\x1a\x86"
    "\x3a\x0a\x46\x9a\x3a\x0a\xb5\x0a\x64\x03\x2e\x06\x86\x03\xf6\x0c\x40\x02\x00\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x08\x00\x00"
    "\x00\x21\x00\xa9\x7c\x8d\x2b\x58\x00\x00\x00\x98\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00"
    "\x00\x78\x2e\x6e\x70\x79\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x08\x00\x00\x00\x21\x00\xfd\xcf\xa5\x08\x4d\x00\x00\x00\x88\x00"
    "\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x8f\x00\x00\x00\x79\x2e\x6e\x70\x79\x50\x4b\x05\x06\x00\x00\x00"
    "\x00\x02\x00\x02\x00\x66\x00\x00\x00\x13\x01\x00\x00\x00\x00",
    399);

TEST_CASE(".npz archives: numpy's stored and deflated ones read, ours round-trip, damage is a clear error", "[basics][npy]") {
  const std::string p = test::temp_path("a.npz");
  for (const std::string* bytes : {&kNumpySavez, &kNumpySavezCompressed}) {
    std::ofstream(p, std::ios::binary) << *bytes;
    auto arrays = load_npz(p);
    REQUIRE(arrays.size() == 2);
    CHECK(arrays[0].name == "x");
    CHECK(arrays[0].blob.shape() == Shape{1, 2, 3});
    CHECK(test::values(arrays[0].blob) == std::vector<float>{0, 1, 2, 3, 4, 5});
    CHECK(arrays[1].name == "y");
    CHECK(test::values(arrays[1].blob) == std::vector<float>{1.5f, -2.0f});
    // Every single-byte change and every truncation ends in an Error or the same arrays, never a crash.
    for (std::size_t i = 0; i < bytes->size(); ++i) {
      std::string damaged = *bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
      std::ofstream(p, std::ios::binary | std::ios::trunc) << damaged;
      try {
        auto again = load_npz(p);
        for (const auto& a : again) CHECK(a.blob.numel() <= 6);
      } catch (const Error&) {
      }
      std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes->substr(0, i);
      CHECK_THROWS_AS(load_npz(p), Error);
    }
  }
  std::vector<NamedBlob> mine{{"a", test::iota_blob(Shape{2, 3}, 0.25f, -1.0f)}, {"b", test::iota_blob(Shape{4}, 1.0f, 0.0f)}};
  save_npz(p, mine);
  auto back = load_npz(p);
  REQUIRE(back.size() == 2);
  CHECK(back[0].name == "a");
  CHECK(back[0].blob.shape() == Shape{2, 3});
  CHECK(test::values(back[0].blob) == test::values(mine[0].blob));
  CHECK(test::values(back[1].blob) == test::values(mine[1].blob));
  CHECK_THROWS_WITH(load_npz(test::temp_path("missing.npz")), Catch::Contains("cannot open"));
}

namespace {

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t crc32_of(const std::string& data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return ~c;
}

/// A zip archive with one stored member whose bytes `data` the central
/// directory names `entries` times (names from `name_of`), claiming `size`
/// inflated bytes by `method`.
std::string hand_made_zip(const std::string& data, uint16_t method, uint32_t size, std::size_t entries,
                          const std::function<std::string(std::size_t)>& name_of) {
  std::string z;
  const std::string first = name_of(0);
  const uint32_t crc = method == 0 ? crc32_of(data) : 0;  // a deflated member's is never reached here
  put_le(z, 0x04034b50, 4), put_le(z, 20, 2), put_le(z, 0, 2), put_le(z, method, 2), put_le(z, 0, 4), put_le(z, crc, 4);
  put_le(z, data.size(), 4), put_le(z, size, 4), put_le(z, first.size(), 2), put_le(z, 0, 2);
  z += first + data;
  const std::size_t cd = z.size();
  for (std::size_t k = 0; k < entries; ++k) {
    const std::string name = name_of(k);
    put_le(z, 0x02014b50, 4), put_le(z, 20, 2), put_le(z, 20, 2), put_le(z, 0, 2), put_le(z, method, 2), put_le(z, 0, 4);
    put_le(z, crc, 4), put_le(z, data.size(), 4), put_le(z, size, 4), put_le(z, name.size(), 2), put_le(z, 0, 2);
    put_le(z, 0, 2), put_le(z, 0, 2), put_le(z, 0, 2), put_le(z, 0, 4), put_le(z, 0, 4);
    z += name;
  }
  const std::size_t cd_size = z.size() - cd;
  if (entries >= 0xffff) {  // zip64: the end record and its locator
    const std::size_t z64 = z.size();
    put_le(z, 0x06064b50, 4), put_le(z, 44, 8), put_le(z, 45, 2), put_le(z, 45, 2), put_le(z, 0, 4), put_le(z, 0, 4);
    put_le(z, entries, 8), put_le(z, entries, 8), put_le(z, cd_size, 8), put_le(z, cd, 8);
    put_le(z, 0x07064b50, 4), put_le(z, 0, 4), put_le(z, z64, 8), put_le(z, 1, 4);
  }
  put_le(z, 0x06054b50, 4), put_le(z, 0, 2), put_le(z, 0, 2), put_le(z, std::min<std::size_t>(entries, 0xffff), 2);
  put_le(z, std::min<std::size_t>(entries, 0xffff), 2), put_le(z, cd_size, 4), put_le(z, cd, 4), put_le(z, 0, 2);
  return z;
}

/// Resets the process's peak resident memory (VmHWM) to its current one and
/// returns it, in bytes; -1 where Linux does not allow the reset.
long long reset_peak_rss();
long long peak_rss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}
long long reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!(clear << "5" << std::flush)) return -1;
  return peak_rss();
}

}  // namespace

TEST_CASE(".npz: a huge directory is read in linear time, a member's claimed size is never allocated up front",
          "[basics][npy]") {
  const std::string p = test::temp_path("hostile.npz");
  // 200,000 entries (zip64), the last one a duplicate of the first (the
  // duplicate-name check was quadratic: 60,000 entries took 69 s).
  const std::size_t n = 200000;
  const std::string npy = [] {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    h.append(64 - (10 + h.size() + 1) % 64, ' ');
    h.push_back('\n');
    return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h + std::string(4, '\0');
  }();
  {
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        << hand_made_zip(npy, 0, npy.size(), n, [&](std::size_t k) { return fmt::format("x{}.npy", k == n - 1 ? 0 : k); });
    CHECK_THROWS_WITH(load_npz(p), Catch::Contains("two members of one name") && Catch::Contains("hostile.npz:x0.npy"));
  }
  // A deflated member of 1 MiB claiming 1 GiB (within deflate's ratio): the
  // buffer grows with what really inflates (before, 1 GiB was allocated first).
  std::string deflate;
  const std::size_t payload = std::size_t{1} << 20;
  for (std::size_t done = 0; done < payload;) {
    const std::size_t len = std::min<std::size_t>(65535, payload - done);
    deflate.push_back(done + len == payload ? 1 : 0);  // a stored block, final or not
    put_le(deflate, len, 2), put_le(deflate, ~len & 0xffff, 2);
    deflate.append(len, 'a');
    done += len;
  }
  std::ofstream(p, std::ios::binary | std::ios::trunc) << hand_made_zip(deflate, 8, 1u << 30, 1, [](std::size_t) { return "x.npy"; });
  const long long before = reset_peak_rss();
  CHECK_THROWS_WITH(load_npz(p), Catch::Contains("corrupt deflate data") && Catch::Contains("hostile.npz:x.npy"));
  if (before >= 0) {
    INFO("peak resident memory " << before << " bytes before reading, " << peak_rss() << " while");
    CHECK(peak_rss() - before < (256ll << 20));
  } else {
    WARN("/proc/self/clear_refs cannot reset the peak: the claimed-size allocation is not measured here");
  }
}

TEST_CASE("a .npy header claiming more than the file holds is refused before allocating", "[basics][npy]") {
  const std::string p = test::temp_path("huge.npy");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 16384, 16384), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 0xff) + char(header.size() >> 8) + header + "12345678";
  std::ofstream(p, std::ios::binary) << file;
  CHECK_THROWS_WITH(load_npy(p), Catch::Contains("truncated"));
  // A shape whose byte count overflows 64 bits is refused the same way.
  std::string big = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }";
  big.append(64 - (10 + big.size() + 1) % 64, ' ');
  big.push_back('\n');
  std::ofstream(p, std::ios::binary | std::ios::trunc) << std::string("\x93NUMPY\x01\x00", 8) + char(big.size() & 0xff) + char(big.size() >> 8) + big;
  CHECK_THROWS_WITH(load_npy(p), Catch::Contains("truncated"));
}

TEST_CASE("samples of a model with several inputs come from .npz files, one member per input", "[basics][npy]") {
  namespace fs = std::filesystem;
  const std::string dir = test::temp_path("npz_samples");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int k = 0; k < 2; ++k) {
    std::vector<NamedBlob> s{{"image", test::iota_blob(Shape{1, 2}, 1.0f, float(k))}, {"mask", test::iota_blob(Shape{1}, 1.0f, -float(k))}};
    save_npz(dir + "/s" + std::to_string(k) + ".npz", s);
  }
  auto samples = load_samples(dir, {"mask", "image"});
  REQUIRE(samples.size() == 2);
  CHECK(samples[1][0].name == "mask");
  CHECK(test::values(samples[1][0].blob) == std::vector<float>{-1.0f});
  CHECK(samples[1][1].name == "image");
  CHECK(test::values(samples[1][1].blob) == std::vector<float>{1.0f, 2.0f});
  CHECK_THROWS_WITH(load_samples(dir, {"image", "mask", "extra"}), Catch::Contains("no member for the model's input 'extra'"));
  CHECK_THROWS_WITH(load_samples(dir, {"image"}), Catch::Contains("member 'mask' names no input"));
  save_npy(dir + "/s9.npy", test::iota_blob(Shape{1, 2}, 1.0f, 0.0f));
  CHECK_THROWS_WITH(load_samples(dir, {"image", "mask"}), Catch::Contains("a .npy sample binds one input"));
  fs::remove_all(dir);
}

TEST_CASE("parallel_for covers every index once, at any thread count", "[basics]") {
  for (int t : {1, 2, 5}) {
    set_num_threads(t);
    CHECK(num_threads() == t);
    for (int64_t n : {0, 1, 7, 1000, 100003}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      core::global_pool().parallel_for(n, 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        // Nested use runs inline rather than deadlocking.
        core::global_pool().parallel_for(2, 1, [](int64_t, int64_t) {});
      });
      for (auto& h : hits) CHECK(h.load() == 1);
    }
  }
  set_num_threads(0);
}

TEST_CASE("parallel_for gives each thread the same chunk on every call", "[basics]") {
  // Cache affinity: a layer run again finds its rows in the cache of the core
  // that computed them (dynamic chunks moved them between cores every call).
  // (On a busy machine the contention guard would run regions on one thread.)
  core::contention_guard().set_enabled(false);
  set_num_threads(2);
  for (int64_t n : {8, 60, 1001}) {
    for (int64_t grain : {1, 4}) {
      auto chunks = [&] {
        std::mutex m;
        std::map<std::pair<int64_t, int64_t>, std::thread::id> by_chunk;
        core::global_pool().parallel_for(n, grain, [&](int64_t b, int64_t e) {
          std::lock_guard lock(m);
          by_chunk[{b, e}] = std::this_thread::get_id();
        });
        return by_chunk;
      };
      const auto first = chunks();
      REQUIRE(first.size() == 2);  // one contiguous chunk per thread
      const auto [lo, hi] = std::pair{first.begin()->first, first.rbegin()->first};
      CHECK(lo.first == 0);
      CHECK(lo.second % grain == 0);
      CHECK(lo.second == hi.first);
      CHECK(hi.second == n);
      CHECK(first.begin()->second != first.rbegin()->second);
      for (int call = 0; call < 20; ++call) CHECK(chunks() == first);
    }
  }
  set_num_threads(0);
  core::contention_guard().set_enabled(true);
}

TEST_CASE("the contention guard shrinks the team after stalled regions and probes again later", "[basics][threads]") {
  using G = core::ContentionGuard;
  G g;
  int64_t t = 1'000'000'000'000;
  const int64_t quiet = 20'000, stalled = 5'000'000;  // worker start lags: 20 us, 5 ms
  // A quiet machine: many regions, never a shrink; one stall alone is not enough.
  for (int i = 0; i < 500; ++i) g.record(quiet, t += 100'000);
  g.record(stalled, t += 100'000);
  for (int i = 0; i < 100; ++i) g.record(quiet, t += 100'000);
  CHECK(g.full_team(t));
  CHECK(g.shrinks() == 0);
  // Two stalls within the window: one thread for the minimum wait.
  g.record(stalled, t += 100'000);
  g.record(stalled, t += 100'000);
  CHECK(g.shrinks() == 1);
  CHECK_FALSE(g.full_team(t + 1));
  CHECK_FALSE(g.full_team(t + G::kMinBackoffNs - 1));
  // Regions begun before the shrink that end during it change nothing.
  g.record(stalled, t + 10);
  g.record(stalled, t + 20);
  CHECK(g.shrinks() == 1);
  t += G::kMinBackoffNs;
  CHECK(g.full_team(t));
  // The probe stalls again at once: twice the wait.
  g.record(stalled, t += 1000);
  g.record(stalled, t += 1000);
  CHECK(g.shrinks() == 2);
  CHECK_FALSE(g.full_team(t + G::kMinBackoffNs));
  CHECK(g.full_team(t + 2 * G::kMinBackoffNs));
  // Doubling stops at the maximum.
  for (int k = 0; k < 10; ++k) {
    while (!g.full_team(t)) t += G::kMinBackoffNs / 4;  // the probe, as soon as the wait ends
    g.record(stalled, t += 1000);
    g.record(stalled, t += 1000);
  }
  CHECK_FALSE(g.full_team(t + G::kMaxBackoffNs - 1));
  CHECK(g.full_team(t + G::kMaxBackoffNs));
  // Quiet again for long: the next shrink waits the minimum again.
  t += G::kMaxBackoffNs + 10 * G::kMaxBackoffNs;
  for (int i = 0; i < 100; ++i) g.record(quiet, t += 100'000);
  g.record(stalled, t += 1000);
  g.record(stalled, t += 1000);
  CHECK(g.full_team(t + G::kMinBackoffNs));
  // Off: nothing shrinks.
  G off;
  off.set_enabled(false);
  for (int i = 0; i < 10; ++i) off.record(stalled, t += 1000);
  CHECK(off.full_team(t));
  CHECK(off.shrinks() == 0);
}

TEST_CASE("the registry explains why a routine is not a candidate", "[basics]") {
  Layer l = test::make_layer("conv2", {}, {{"weight", Blob::allocate({2, 1, 3, 3}, DType::int32)}});
  LayerInfo info{&l, {Shape{1, 1, 5, 5}}, {Shape{1, 2, 3, 3}}, {}, {}};
  auto cands = core::RoutineRegistry::instance().candidates(info, Schema{});
  REQUIRE_FALSE(cands.empty());
  bool ref_said_no = false;
  for (const auto& c : cands)
    if (c.descriptor == "cpu/ref") ref_said_no = !c.support.ok && !c.support.reason.empty();
  CHECK(ref_said_no);
  CHECK_THROWS_WITH(core::RoutineRegistry::instance().default_choice(info, Schema{}), Catch::Contains("cpu/ref"));
}

TEST_CASE("every layer type has a cpu/ref routine", "[basics]") {
  for (const auto& t : core::layer_types()) {
    if (t.name == "constant") continue;  // bound to its weight, never run
    if (t.plan_time) continue;           // evaluated by core::specialize, never run
    if (t.name.starts_with("test_")) continue;  // registered by a test below
    auto d = registered_routines(t.name);
    INFO(t.name);
    CHECK(std::find(d.begin(), d.end(), "cpu/ref") != d.end());
  }
}

namespace {
std::vector<Shape> infer_twice_wide(const Layer& l, std::span<const Shape> in) {
  core::expect_rank(l, in[0], 2);
  return {Shape{in[0][0], 2 * in[0][1]}};
}
}  // namespace

TEST_CASE("a routine family registers the layer types it needs", "[basics]") {
  // The Winograd family's children are registered by src/routines/cpu/winograd.cpp, not core.
  CHECK(core::find_layer_type("wgenc") != nullptr);
  CHECK(core::find_layer_type("test_twice_wide") == nullptr);
  register_layer_type({"test_twice_wide", 1, 1, infer_twice_wide});
  const core::LayerType* t = core::find_layer_type("test_twice_wide");
  REQUIRE(t != nullptr);
  Layer l;
  l.name = "wide";
  l.type = "test_twice_wide";
  l.inputs = {"x"};
  l.outputs = {"y"};
  const Shape in[] = {Shape{3, 4}};
  CHECK(core::infer_layer_shapes(l, in).at(0) == Shape{3, 8});
  const Shape bad[] = {Shape{3, 4, 5}};
  CHECK_THROWS_WITH(core::infer_layer_shapes(l, bad), Catch::Contains("expected rank 2"));
  CHECK_THROWS_WITH(register_layer_type({"test_twice_wide", 1, 1, infer_twice_wide}), Catch::Contains("already registered"));
  CHECK_THROWS_WITH(register_layer_type({"conv2", 1, 1, infer_twice_wide}), Catch::Contains("already registered"));
  CHECK_THROWS_WITH(register_layer_type({"test_no_inference", 1, 1, nullptr}), Catch::Contains("no shape inference"));
  CHECK_THROWS_WITH(register_layer_type({"test_bad_counts", 2, 1, infer_twice_wide}), Catch::Contains("2 to 1 inputs"));
}

namespace {
// A routine of layer type test_order (or another) in one schema that supports the layer unless told not
// to, costly to prepare or not (oneDNN's primitives are).
class OrderProbe final : public Routine {
 public:
  OrderProbe(std::string algorithm, std::string schema, std::string type = "test_order", bool costly = false)
      : algorithm_(std::move(algorithm)), schema_(std::move(schema)), type_(std::move(type)), costly_(costly) {}
  std::string_view layer_type() const override { return type_; }
  std::string_view algorithm() const override { return algorithm_; }
  std::vector<Schema> schemas() const override { return {Schema::parse(schema_)}; }
  bool costly_prepare() const override { return costly_; }
  Support supports(const LayerInfo& info, const Schema&) const override {
    return info.layer->get_string("refuse", "") == algorithm_ ? Support::no("told to refuse") : Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo&, const Schema&, const RoutineParams&) const override {
    return nullptr;
  }

 private:
  std::string algorithm_, schema_, type_;
  bool costly_;
};
}  // namespace

TEST_CASE("a default order naming a routine nobody registered fails the first default choice, not ranked last in silence", "[basics]") {
  core::RoutineRegistry registry;  // its own: the process's stays as it is
  registry.add(std::make_unique<OrderProbe>("plain", "cpu"), "test");
  registry.set_default_order("test_order", {{"cpu/plian"}, {"cpu/plain"}});
  Layer l;
  l.name = "probe";
  l.type = "test_order";
  l.inputs = {"x"};
  l.outputs = {"y"};
  const LayerInfo info{&l, {Shape{1, 4}}, {Shape{1, 4}}, {}, {}};
  // (It chose cpu/plain from the second tier before, the typo unseen.)
  CHECK_THROWS_WITH(registry.default_choice_any_schema(info, Schema{}), Catch::Contains("test_order: cpu/plian"));
  CHECK_THROWS_WITH(registry.default_choice(info, Schema{}), Catch::Contains("does not register"));  // every use
}

TEST_CASE("a tiny index-arithmetic layer's default is a routine cheap to prepare in the first choice's schema", "[basics]") {
  // (A decode loop prepares its [1, T] mask arithmetic again at every step: oneDNN's
  // primitives took 0.35 of a 1.5 ms re-bind.)
  core::RoutineRegistry registry;  // its own: the process's stays as it is
  registry.add(std::make_unique<OrderProbe>("costly", "cpu", "sub", true), "test");
  registry.add(std::make_unique<OrderProbe>("elsewhere", "cpu:float32:nhwc", "sub"), "test");
  registry.add(std::make_unique<OrderProbe>("cheap", "cpu", "sub"), "test");
  registry.set_default_order("sub", {{"cpu/costly", "cpu:float32:nhwc/elsewhere"}, {"cpu/cheap"}});
  Layer l;
  l.name = "probe";
  l.type = "sub";
  l.inputs = {"a", "b"};
  l.outputs = {"y"};
  auto choice = [&](const Shape& shape) {
    const LayerInfo info{&l, {shape, Shape{1}}, {shape}, {}, {}};
    return registry.default_choice_any_schema(info, Schema{}).descriptor;
  };
  CHECK(choice(Shape{1, 64}) == "cpu/cheap");             // a later tier, in the schema the costly one computes in
  CHECK(choice(Shape{1, 4096}) == "cpu/costly");          // past 1,024 values: the order as listed
  l.params["refuse"] = std::string("cheap");
  CHECK(choice(Shape{1, 64}) == "cpu/costly");            // (never another schema for it)
  l.params.erase("refuse");
  l.weights["w"] = Blob::allocate(Shape{1});
  CHECK(choice(Shape{1, 64}) == "cpu/costly");            // a layer with weights is no index arithmetic
}

TEST_CASE("the default order: first tier with a supported routine, staying in the input's schema within it", "[basics]") {
  core::RoutineRegistry registry;  // its own: the process's stays as it is
  registry.add(std::make_unique<OrderProbe>("blocked", "cpu:float32:nchw16c"), "test");
  registry.add(std::make_unique<OrderProbe>("channels_last", "cpu:float32:nhwc"), "test");
  registry.add(std::make_unique<OrderProbe>("plain", "cpu"), "test");
  registry.add(std::make_unique<OrderProbe>("unlisted", "cpu"), "test");
  registry.set_default_order("test_order", {{"cpu:float32:nchw16c/blocked", "*/channels_last"}, {"cpu/plain"}});
  CHECK(registry.default_rank("test_order", "cpu:float32:nhwc/channels_last") == std::pair{0, 1});
  CHECK(registry.default_rank("test_order", "cpu/plain") == std::pair{1, 0});
  CHECK(registry.default_rank("test_order", "cpu/unlisted").first == 2);

  Layer l;
  l.name = "probe";
  l.type = "test_order";
  l.inputs = {"x"};
  l.outputs = {"y"};
  LayerInfo info{&l, {Shape{1, 16, 4, 4}}, {Shape{1, 16, 4, 4}}, {}, {}};
  auto choice = [&](const char* preferred) {
    return registry.default_choice_any_schema(info, Schema::parse(preferred)).descriptor;
  };
  CHECK(choice("cpu") == "cpu:float32:nchw16c/blocked");  // a later tier does not win by staying
  CHECK(choice("cpu:float32:nhwc") == "cpu:float32:nhwc/channels_last");  // staying wins within the tier
  CHECK(choice("cpu:float32:nchw16c") == "cpu:float32:nchw16c/blocked");
  l.params["refuse"] = std::string("blocked");
  CHECK(choice("cpu") == "cpu:float32:nhwc/channels_last");
  l.params["refuse"] = std::string("channels_last");
  CHECK(choice("cpu:float32:nhwc") == "cpu:float32:nchw16c/blocked");
  // In one schema: list order; unlisted routines after the list.
  CHECK(registry.default_choice(info, Schema{}).descriptor == "cpu/plain");
  l.params["refuse"] = std::string("plain");
  CHECK(registry.default_choice(info, Schema{}).descriptor == "cpu/unlisted");
  // Only the schemas a session allows.
  l.params.erase("refuse");
  auto only_plain = [](const Schema& s) { return s == Schema{}; };
  CHECK(registry.default_choice_any_schema(info, Schema::parse("cpu:float32:nhwc"), only_plain).descriptor == "cpu/plain");
}
