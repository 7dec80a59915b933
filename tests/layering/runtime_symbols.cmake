# The runtime library an app links carries neither the tuner nor the importer:
# none of their symbols is defined in it, and the runtime's own are.
# Run: cmake -DLIBRARY=libsoftneuro.so -P runtime_symbols.cmake
execute_process(COMMAND nm -DC --defined-only ${LIBRARY} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm ${LIBRARY} failed (${rc})")
endif()
if(NOT symbols MATCHES "softneuro::Model::load")
  message(FATAL_ERROR "${LIBRARY} does not define softneuro::Model::load: not the runtime library?")
endif()
string(REGEX MATCHALL "[^\n]*(softneuro::profiler::|softneuro::dprs::|softneuro::tune\\(|softneuro::calibrate\\(|softneuro::import_onnx|softneuro::onnx_import::)[^\n]*"
       found "${symbols}")
if(found)
  list(LENGTH found n)
  list(SUBLIST found 0 5 first)
  list(JOIN first "\n  " first)
  message(FATAL_ERROR "${LIBRARY} defines ${n} symbols of the tuner or the importer, e.g.\n  ${first}")
endif()
message(STATUS "${LIBRARY}: no tuner or importer symbols")
