// Host <-> device transfers and on-device casts/layout changes: round trips
// are exact for float32 and round once to float16; layouts agree with the CPU
// layout adapts; staging buffers are reused safely across queued transfers.
#include "cuda_harness.hpp"

#include "core/registry.hpp"
#include "core/thread_pool.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace softneuro;
using namespace softneuro::cudatest;

namespace {

const Schema kHost{};

std::vector<Schema> device_schemas() {
  std::vector<Schema> out;
  for (DType t : {DType::float32, DType::float16})
    for (Layout l : {Layout::nchw, Layout::nhwc}) out.push_back(Schema{Device::cuda, t, l});
  return out;
}

/// The float32 nchw values of `x` as `s` holds them (float16 rounds).
Blob expected_in(const Blob& x, const Schema& s) { return s.dtype == DType::float16 ? round_to_half(x) : x; }

bool identical(const Blob& a, const Blob& b) {
  return a.shape() == b.shape() && a.byte_size() == b.byte_size() && std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

}  // namespace

TEST_CASE("the transfer and convert adapts are the ones picked", "[transfer]") {
  const Shape s{1, 3, 4, 4};
  CHECK(adapt_descriptor(s, kHost, Schema{Device::cuda}) == "cuda/transfer");
  CHECK(adapt_descriptor(s, kHost, Schema{Device::cuda, DType::float16, Layout::nhwc}) == "cuda:float16:nhwc/transfer");
  CHECK(adapt_descriptor(s, Schema{Device::cuda, DType::float16}, kHost) == "cpu/transfer");
  CHECK(adapt_descriptor(s, Schema{Device::cuda}, Schema{Device::cuda, DType::float16}) == "cuda:float16/convert");
}

TEST_CASE("host -> device -> host round trips in every device schema", "[transfer]") {
  std::mt19937 rng(21);
  for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{1, 16, 9, 9}, Shape{5, 11}, Shape{13}, Shape{2, 4, 6}}) {
    Blob x = random_blob(shape, rng, -100, 100);
    for (const Schema& s : device_schemas()) {
      const std::string what = fmt::format("{} via {}", shape.to_string(), s.to_string());
      INFO(what);
      Blob d = adapt(x, kHost, s);
      CHECK(d.device() == Device::cuda);
      Blob back = adapt(d, s, kHost);
      CHECK(identical(back, expected_in(x, s)));
      // Back to the host in the device blob's own dtype and layout, then to float32 nchw there.
      const Schema host_same{Device::cpu, s.dtype, s.layout};
      if (s.dtype == DType::float32) {
        Blob raw = adapt(d, s, host_same);
        CHECK(raw.device() == Device::cpu);
        CHECK(identical(adapt(raw, host_same, kHost), x));  // the CPU layout adapt undoes it
      }
    }
  }
}

TEST_CASE("float16 rounds to nearest even, saturates to infinity, keeps subnormals", "[transfer]") {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f,
                          1e6f, -1e6f, 1e-7f, 3e-8f, 6.1e-5f, -2.5f, 0.1f};
  Blob x = Blob::allocate(Shape{static_cast<int64_t>(v.size())});
  std::memcpy(x.data(), v.data(), v.size() * 4);
  Blob back = adapt(adapt(x, kHost, Schema{Device::cuda, DType::float16}), Schema{Device::cuda, DType::float16}, kHost);
  for (std::size_t i = 0; i < v.size(); ++i) {
    INFO(v[i]);
    CHECK(back.data_as<float>()[i] == round_to_half(v[i]));
  }
  CHECK(std::isinf(back.data_as<float>()[7]));
}

TEST_CASE("host blobs in float16 and nhwc upload and download directly", "[transfer]") {
  std::mt19937 rng(22);
  const Shape shape{2, 5, 3, 4};
  Blob x = random_blob(shape, rng);
  const Schema host_nhwc{Device::cpu, DType::float32, Layout::nhwc};
  Blob x_nhwc = adapt(x, kHost, host_nhwc);  // the CPU layout adapt
  for (const Schema& s : device_schemas()) {
    INFO(s.to_string());
    Blob d = adapt(x_nhwc, host_nhwc, s);
    CHECK(identical(adapt(d, s, kHost), expected_in(x, s)));
    Blob h = adapt(d, s, host_nhwc);
    CHECK(identical(h, adapt(expected_in(x, s), kHost, host_nhwc)));
  }
  // A float16 host blob (its bits made here) uploads into float32.
  const Schema host_half{Device::cpu, DType::float16, Layout::nchw};
  Blob half_host = adapt(adapt(x, kHost, Schema{Device::cuda, DType::float16}), Schema{Device::cuda, DType::float16},
                         host_half);
  CHECK(half_host.dtype() == DType::float16);
  Blob up = adapt(half_host, host_half, Schema{Device::cuda});
  CHECK(identical(adapt(up, Schema{Device::cuda}, kHost), round_to_half(x)));
}

TEST_CASE("on-device converts between every pair of device schemas", "[transfer]") {
  std::mt19937 rng(23);
  const Shape shape{2, 7, 3, 5};
  Blob x = random_blob(shape, rng, -10, 10);
  for (const Schema& from : device_schemas())
    for (const Schema& to : device_schemas()) {
      if (from == to) continue;
      INFO(from.to_string() << " -> " << to.to_string());
      CHECK(adapt_descriptor(shape, from, to) == make_descriptor(to, "convert"));
      Blob d = adapt(adapt(x, kHost, from), from, to);
      Blob want = (from.dtype == DType::float16 || to.dtype == DType::float16) ? round_to_half(x) : x;
      CHECK(identical(adapt(d, to, kHost), want));
    }
}

TEST_CASE("a transfer's staging buffer is not overwritten while a queued copy reads it", "[transfer]") {
  std::mt19937 rng(24);
  const Shape shape{1, 64, 64, 64};  // 1 MiB: the copy takes a while
  Layer l;
  l.name = "adapt";
  l.type = "adapt";
  l.inputs = {"x"};
  l.outputs = {"y"};
  l.params["from"] = kHost.to_string();
  l.params["to"] = Schema{Device::cuda}.to_string();
  LayerInfo info{&l, {shape}, {shape}, {}, {}};
  Schema s;
  const Routine* r = core::RoutineRegistry::instance().find("adapt", "cuda/transfer", &s);
  REQUIRE(r);
  auto prepared = r->prepare(info, s, {});
  REQUIRE(prepared->workspace_bytes() == 0);
  std::vector<Blob> xs, ds;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(random_blob(shape, rng));
    ds.push_back(allocate(shape, s));
  }
  for (int i = 0; i < 4; ++i) {  // queued back to back, no wait in between
    const Blob* in[] = {&xs[static_cast<std::size_t>(i)]};
    Blob* out[] = {&ds[static_cast<std::size_t>(i)]};
    prepared->run(RunArgs{in, out, nullptr, &core::global_pool()});
  }
  synchronize();
  for (int i = 0; i < 4; ++i) CHECK(identical(adapt(ds[static_cast<std::size_t>(i)], s, kHost), xs[static_cast<std::size_t>(i)]));
}

TEST_CASE("CPU-only adapts never claim device blobs", "[transfer]") {
  // Quantised or blocked host blobs have no direct transfer: the tuner sees no adapt (infinite cost).
  const Shape s{1, 8, 4, 4};
  CHECK(adapt_descriptor(s, Schema{Device::cpu, DType::float32, Layout::nchw8c}, Schema{Device::cuda}).empty());
  CHECK(adapt_descriptor(s, Schema{Device::cuda}, Schema{Device::cpu, DType::qint8}).empty());
}
