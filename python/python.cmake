# The Python package's native module (softneuro._core, nanobind), built by
# `pip install .` (scikit-build-core, pyproject.toml) with SOFTNEURO_PYTHON=ON.
# The wheel holds the module and the three libraries it links, next to each
# other (RPATH $ORIGIN): component "python" only, not the C++ install.
# pip passes the Python that builds, whose nanobind this finds; a later plain
# reconfigure of the same folder (the Python cached there may be gone, or lack
# nanobind) skips the module with a warning instead of failing.
find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
unset(nanobind_DIR CACHE)
set(nanobind_missing 1)
if(Python_FOUND)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  OUTPUT_VARIABLE nanobind_ROOT RESULT_VARIABLE nanobind_missing ERROR_QUIET)
endif()
if(nanobind_missing)
  message(WARNING "SOFTNEURO_PYTHON: the Python module is not built: no Python with nanobind "
                  "(${Python_EXECUTABLE}); `pip install .` brings both")
  return()
endif()
find_package(nanobind CONFIG REQUIRED)

nanobind_add_module(softneuro_python NB_STATIC python/src/core.cpp)
set_target_properties(softneuro_python PROPERTIES OUTPUT_NAME _core INSTALL_RPATH "$ORIGIN")
target_link_libraries(softneuro_python PRIVATE softneuro softneuro_tune softneuro_onnx softneuro_tflite)
install(TARGETS softneuro_python LIBRARY DESTINATION softneuro COMPONENT python)
install(TARGETS softneuro softneuro_tune softneuro_onnx softneuro_tflite LIBRARY DESTINATION softneuro COMPONENT python NAMELINK_SKIP)
