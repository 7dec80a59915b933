// Plugins: a good one registers its routines; a mismatched or broken one is refused.
#include "core/model_impl.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/plugin.hpp>
#include <softneuro/session.hpp>
#include <softneuro/tune.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

#include <sys/stat.h>
#include <unistd.h>

using namespace softneuro;

namespace {
std::string plugin(const char* name) { return std::string(SOFTNEURO_TEST_PLUGIN_DIR) + "/" + name + ".so"; }
}  // namespace

TEST_CASE("a plugin's routines are registered and run", "[plugin]") {
  load_plugin(plugin("test_plugin_good"));
  auto relus = registered_routines("relu");
  CHECK(std::find(relus.begin(), relus.end(), "cpu/plugin_relu") != relus.end());
  Layer l = test::make_layer("relu");
  auto y = test::run_layer(l, {test::make_blob({4}, {-1, 2, -3, 4})}, "cpu/plugin_relu");
  CHECK(test::values(y[0]) == std::vector<float>{0, 2, 0, 4});
  load_plugin(plugin("test_plugin_good"));  // twice is a no-op, not a duplicate
}

TEST_CASE("a plugin built for another ABI version is refused", "[plugin]") {
  try {
    load_plugin(plugin("test_plugin_bad_abi"));
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.field() == "abi");
    CHECK_THAT(e.what(), Catch::Contains("ABI version"));
    CHECK(e.file() == plugin("test_plugin_bad_abi"));
  }
}

TEST_CASE("a library that is not a plugin, or no library, is refused", "[plugin]") {
  CHECK_THROWS_WITH(load_plugin(plugin("test_plugin_no_entry")), Catch::Contains("not a softneuro plugin"));
  CHECK_THROWS_WITH(load_plugin(plugin("does_not_exist")), Catch::Contains("cannot load plugin"));
  CHECK_THROWS_WITH(load_plugin(SOFTNEURO_DEMO_MODEL), Catch::Contains("cannot load plugin"));
  // A FIFO: dlopen blocked on it for ever.
  const std::string fifo = test::temp_path("plugin.fifo");
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_plugin(fifo), Catch::Contains("not a regular file") && Catch::Contains(fifo));
  ::unlink(fifo.c_str());
  CHECK_THROWS_WITH(load_plugin(test::temp_path("")), Catch::Contains("not a regular file"));
}

TEST_CASE("a plugin whose initialisation throws anything is refused with an Error", "[plugin]") {
  // An int thrown from init ended the CLI with std::terminate.
  CHECK_THROWS_WITH(load_plugin(plugin("test_plugin_throws_int")),
                    Catch::Contains("initialisation failed") && Catch::Contains("not a std::exception"));
  auto relus = registered_routines("relu");
  CHECK(std::find(relus.begin(), relus.end(), "cpu/plugin_throws_int") == relus.end());
}

TEST_CASE("a plugin's static registrations wait for its ABI check", "[plugin]") {
  // A plugin registering from static initialisers put its routines in the
  // registry when the library was opened, before the ABI check refused it.
  CHECK_THROWS_WITH(load_plugin(plugin("test_plugin_static_bad_abi")), Catch::Contains("ABI version"));
  auto relus = registered_routines("relu");
  CHECK(std::find(relus.begin(), relus.end(), "cpu/static_bad_abi") == relus.end());
  load_plugin(plugin("test_plugin_static_good"));
  relus = registered_routines("relu");
  CHECK(std::find(relus.begin(), relus.end(), "cpu/static_relu") != relus.end());
}

TEST_CASE("a plugin registers all its routines or none", "[plugin]") {
  CHECK_THROWS_WITH(load_plugin(plugin("test_plugin_duplicate")), Catch::Contains("cpu/ref") && Catch::Contains("already registered"));
  auto relus = registered_routines("relu");
  CHECK(std::find(relus.begin(), relus.end(), "cpu/plugin_dup_first") == relus.end());
}

// A plugin's routines could only share their derived weights within a process
// (the codec that stores them in a tuned file was core's alone): every session
// of a tuned file derived them again.
TEST_CASE("a plugin's routine stores its derived weights in a tuned file, and a session of it reads them", "[plugin]") {
  load_plugin(plugin("test_plugin_good"));
  core::Graph g;
  g.name = "plugin_dense";
  g.inputs = {{"x", Shape{3, 8}, DType::float32, {}}};
  Layer fc = test::make_layer("dense", {}, {}, 1, 1, "fc");
  fc.inputs = {"x"};
  fc.outputs = {"y"};
  fc.weights = {{"weight", test::iota_blob(Shape{5, 8}, 0.01f, -0.2f)}, {"bias", test::iota_blob(Shape{5}, 0.1f, -0.2f)}};
  g.layers = {fc};
  g.outputs = {"y"};
  const Model net = detail::make_model(g);
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.2;
  o.integrated_runs = 2;
  o.pin = {{"fc", "cpu/plugin_dense"}};
  const Model tuned = tune(net, o);
  CHECK(tuned.prepared_weight_bytes() >= 5 * 8 * sizeof(float));
  const std::string path = test::temp_path("plugin_prepared.dnn");
  tuned.save(path);

  const Model back = Model::load(path);
  std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{3, 8}, 0.05f, -0.6f)}};
  Session s(back);
  REQUIRE(s.layers().size() == 1);
  CHECK(s.layers()[0].descriptor == "cpu/plugin_dense");
  const auto got = test::values(s.run(in)[0].blob);
  CHECK(detail::impl_of(back).weights->built() == 0);  // read from the file, derived by nobody
  CHECK(detail::impl_of(back).weights->loaded() >= 1);
  const auto want = test::values(Session(net).run(in)[0].blob);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
}
