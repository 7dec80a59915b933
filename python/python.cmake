# The Python package's native module (softneuro._core, nanobind), built by
# `pip install .` (scikit-build-core, pyproject.toml) with SOFTNEURO_PYTHON=ON.
# The wheel holds the module and the three libraries it links, next to each
# other (RPATH $ORIGIN): component "python" only, not the C++ install.
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
# nanobind's CMake files from the Python that builds (the build environment may be a new temporary one each time).
unset(nanobind_DIR CACHE)
execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                OUTPUT_VARIABLE nanobind_ROOT RESULT_VARIABLE nanobind_missing)
if(nanobind_missing)
  message(FATAL_ERROR "SOFTNEURO_PYTHON needs nanobind in ${Python_EXECUTABLE} (pip install nanobind; pip install . brings it)")
endif()
find_package(nanobind CONFIG REQUIRED)

nanobind_add_module(softneuro_python NB_STATIC python/src/core.cpp)
set_target_properties(softneuro_python PROPERTIES OUTPUT_NAME _core INSTALL_RPATH "$ORIGIN")
target_link_libraries(softneuro_python PRIVATE softneuro softneuro_tune softneuro_onnx)
install(TARGETS softneuro_python LIBRARY DESTINATION softneuro COMPONENT python)
install(TARGETS softneuro softneuro_tune softneuro_onnx LIBRARY DESTINATION softneuro COMPONENT python NAMELINK_SKIP)
