// Plugins: a good one registers its routines; a mismatched or broken one is refused.
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/plugin.hpp>
#include <softneuro/session.hpp>

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
