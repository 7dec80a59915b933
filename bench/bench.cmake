# Benchmarks (included from the top-level CMakeLists.txt).
# conv_bench: every registered conv2 routine on the conv shapes of VGG16,
# ResNet50 and MobileNetV2, GFLOP/s against a measured FMA peak.
add_executable(conv_bench ${CMAKE_CURRENT_LIST_DIR}/conv_bench.cpp)
target_include_directories(conv_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(conv_bench PRIVATE softneuro fmt::fmt Threads::Threads)
