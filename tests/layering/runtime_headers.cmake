# The runtime's public headers (what an app that only runs models includes)
# include nothing of the tuner or the importer, directly or through another;
# an app's (softneuro.hpp and what it includes) nothing of the routine-author
# API either (routine.hpp, plugin.hpp).
# Run: cmake -DCXX=c++ -DINCLUDE=<repo>/include -DPROBE=<dir> -P runtime_headers.cmake
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST), in script mode too
set(runtime_headers blob.hpp error.hpp layer.hpp npy.hpp plugin.hpp routine.hpp session.hpp softneuro.hpp)
set(app_headers blob.hpp error.hpp layer.hpp npy.hpp session.hpp softneuro.hpp)
set(problems "")
foreach(h IN LISTS runtime_headers)
  set(source ${PROBE}/runtime_header_${h}.cpp)
  file(WRITE ${source} "#include <softneuro/${h}>\n")
  execute_process(COMMAND ${CXX} -std=c++20 -I${INCLUDE} -M ${source}
                  OUTPUT_VARIABLE deps ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "softneuro/${h} does not compile on its own:\n${err}")
  endif()
  set(forbidden tune.hpp calibrate.hpp import.hpp)
  if(h IN_LIST app_headers)
    list(APPEND forbidden routine.hpp plugin.hpp)
  endif()
  foreach(other IN LISTS forbidden)
    if(deps MATCHES "softneuro/${other}")
      list(APPEND problems "softneuro/${h} includes softneuro/${other}")
    endif()
  endforeach()
endforeach()
if(problems)
  list(JOIN problems "\n  " problems)
  message(FATAL_ERROR "public headers include what they must not (the tuner, the importer; an app's, the routine API):\n  ${problems}")
endif()
message(STATUS "runtime headers: nothing of the tuner or the importer; an app's, nothing of the routine API")
