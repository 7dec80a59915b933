# DPRS solver (dynamic programming for routine selection). Pure C++20: it
# depends on nothing else in the project. Included by the top-level
# CMakeLists.txt with include(src/dprs/dprs.cmake); users include "dprs/dprs.hpp".
add_library(softneuro_dprs STATIC ${CMAKE_CURRENT_LIST_DIR}/dprs.cpp)
softneuro_component(softneuro_dprs dprs)
target_include_directories(softneuro_dprs INTERFACE ${SOFTNEURO_VIEWS_DIR}/softneuro_dprs)

if(BUILD_TESTING)
  add_executable(test_dprs ${CMAKE_CURRENT_LIST_DIR}/../../tests/dprs/test_dprs.cpp)
  target_link_libraries(test_dprs PRIVATE softneuro_dprs catch2_main)
  add_test(NAME dprs COMMAND test_dprs)
endif()
