# The importers. ONNX: a shared library of its own (softneuro::onnx), so that apps
# that only run .dnn files never link protobuf. Included by the top-level
# CMakeLists.txt with include(src/import/import.cmake), after softneuro_cli exists.
# Reads ONNX with Debian's libonnx (CMake package ONNX; its targets need protobuf).
find_package(Protobuf REQUIRED)
find_package(ONNX REQUIRED)

set(SOFTNEURO_IMPORT_DIR ${CMAKE_CURRENT_LIST_DIR})
# The ONNX translator: onnx/importer.cpp its scaffolding, one file per operator family.
file(GLOB SOFTNEURO_ONNX_CONVERTERS CONFIGURE_DEPENDS ${SOFTNEURO_IMPORT_DIR}/onnx/*.cpp)
add_library(softneuro_onnx SHARED
  ${SOFTNEURO_ONNX_CONVERTERS}
  ${SOFTNEURO_IMPORT_DIR}/onnx_tensor.cpp
  ${SOFTNEURO_IMPORT_DIR}/dynamic_dims.cpp)
add_library(softneuro::onnx ALIAS softneuro_onnx)
set_target_properties(softneuro_onnx PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME onnx)
softneuro_component(softneuro_onnx core import)
target_link_options(softneuro_onnx PRIVATE ${SOFTNEURO_NO_UNDEFINED})
# onnx_proto brings ONNX_ML=1 and ONNX_NAMESPACE=onnx with its headers.
target_link_libraries(softneuro_onnx
  PUBLIC softneuro
  PRIVATE onnx_proto protobuf::libprotobuf fmt::fmt)

install(TARGETS softneuro_onnx EXPORT softneuroTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The TensorFlow Lite importer: a library of its own (softneuro::tflite) that
# needs FlatBuffers only. schemas/tflite.fbs is our reading of the .tflite
# format; flatc makes its reader and verifier.
set(TFLITE_FBS ${PROJECT_SOURCE_DIR}/schemas/tflite.fbs)
set(TFLITE_GEN_DIR ${GEN_DIR}/tflite)
add_custom_command(
  OUTPUT ${TFLITE_GEN_DIR}/tflite_generated.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${TFLITE_GEN_DIR}
  COMMAND ${FLATC} --cpp --scoped-enums --gen-name-strings -o ${TFLITE_GEN_DIR} ${TFLITE_FBS}
  DEPENDS ${TFLITE_FBS}
  COMMENT "flatc tflite.fbs")
add_custom_target(tflite_schema DEPENDS ${TFLITE_GEN_DIR}/tflite_generated.h)

add_library(softneuro_tflite SHARED ${SOFTNEURO_IMPORT_DIR}/tflite_importer.cpp)
add_library(softneuro::tflite ALIAS softneuro_tflite)
add_dependencies(softneuro_tflite tflite_schema)
set_target_properties(softneuro_tflite PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME tflite)
softneuro_component(softneuro_tflite core import)
target_include_directories(softneuro_tflite PRIVATE ${TFLITE_GEN_DIR})
target_link_options(softneuro_tflite PRIVATE ${SOFTNEURO_NO_UNDEFINED})
target_link_libraries(softneuro_tflite
  PUBLIC softneuro
  PRIVATE flatbuffers::flatbuffers_shared fmt::fmt)

install(TARGETS softneuro_tflite EXPORT softneuroTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The CLI's `import` command (ONNX, and .tflite by the file's identifier).
target_link_libraries(softneuro_cli PRIVATE softneuro_onnx softneuro_tflite)

if(BUILD_TESTING)
  include(Catch)
  # Tests build ONNX models in C++ with libonnx (no Python) and check the
  # importer and each graph pass against the cpu/ref routines.
  file(GLOB SOFTNEURO_IMPORT_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/import/*.cpp)
  add_executable(softneuro_import_tests ${SOFTNEURO_IMPORT_TEST_SOURCES})
  target_include_directories(softneuro_import_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  # test_tflite.cpp writes .tflite files with the builders flatc generates.
  add_dependencies(softneuro_import_tests tflite_schema)
  target_include_directories(softneuro_import_tests PRIVATE ${TFLITE_GEN_DIR})
  target_link_libraries(softneuro_import_tests PRIVATE
    softneuro_onnx softneuro_tflite softneuro softneuro_tune onnx_proto protobuf::libprotobuf
    flatbuffers::flatbuffers_shared fmt::fmt catch2_main)
  catch_discover_tests(softneuro_import_tests EXTRA_ARGS -w NoTests)  # as tests/CMakeLists.txt

  # The CLI's import command: it exists and refuses a missing file with the importer's message.
  add_test(NAME cli_import_rejects_missing_file COMMAND softneuro_cli import /nonexistent.onnx -o /nonexistent.dnn)
  set_tests_properties(cli_import_rejects_missing_file PROPERTIES PASS_REGULAR_EXPRESSION "nonexistent.onnx: cannot open the file")
endif()
