# Benchmarks (included from the top-level CMakeLists.txt).
# conv_bench: every registered conv2 routine on the conv shapes of VGG16,
# ResNet50 and MobileNetV2, GFLOP/s against a measured FMA peak (x86: the
# peak probe is AVX2/AVX-512 code).
if(SOFTNEURO_X86)
  add_executable(conv_bench ${CMAKE_CURRENT_LIST_DIR}/conv_bench.cpp)
  target_include_directories(conv_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(conv_bench PRIVATE softneuro fmt::fmt Threads::Threads)
endif()

# adapt_bench: every CPU adapt routine (quantise, dequantise, casts, layout
# changes, chains) on activation shapes, ms and GB/s.
add_executable(adapt_bench ${CMAKE_CURRENT_LIST_DIR}/adapt_bench.cpp)
target_include_directories(adapt_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(adapt_bench PRIVATE softneuro fmt::fmt)

# ops_bench: every float32 CPU routine of layernorm, softmax, gelu, matmul and
# concat on ViT-B/16-like shapes, at 1 and 2 threads, median microseconds.
add_executable(ops_bench ${CMAKE_CURRENT_LIST_DIR}/ops_bench.cpp)
target_include_directories(ops_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ops_bench PRIVATE softneuro fmt::fmt)

# shape_memory_bench: resident memory of one session over thousands of distinct
# input shapes (a dynamic-size conv net, a small shape cache).
add_executable(shape_memory_bench ${CMAKE_CURRENT_LIST_DIR}/shape_memory_bench.cpp)
target_link_libraries(shape_memory_bench PRIVATE softneuro fmt::fmt)

# load_bench: a tuned .dnn from process start to the first run possible (load,
# session creation, first and second run), milliseconds.
add_executable(load_bench ${CMAKE_CURRENT_LIST_DIR}/load_bench.cpp)
target_link_libraries(load_bench PRIVATE softneuro fmt::fmt)

# calibrate_bench: softneuro::calibrate() with every range method on a model
# and a folder of samples (a hybrid tuning's full calibration), in rounds.
add_executable(calibrate_bench ${CMAKE_CURRENT_LIST_DIR}/calibrate_bench.cpp)
target_link_libraries(calibrate_bench PRIVATE softneuro_tune softneuro fmt::fmt)

# core_handoff_bench: read bandwidth of a buffer one thread wrote, read by the
# same thread or another (what a step pays where its threads split the work
# unlike the step before).
add_executable(core_handoff_bench ${CMAKE_CURRENT_LIST_DIR}/core_handoff_bench.cpp)
target_link_libraries(core_handoff_bench PRIVATE fmt::fmt OpenMP::OpenMP_CXX)

# amx_split_bench: float32 products from three bfloat16 parts on AMX tiles
# (bf16x6) against one bfloat16 product, packed GEMMs at BERT's dense sizes:
# the ceiling of such a float32 routine (x86 with AMX; elsewhere it says so).
if(SOFTNEURO_X86)
  add_executable(amx_split_bench ${CMAKE_CURRENT_LIST_DIR}/amx_split_bench.cpp)
  target_include_directories(amx_split_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(amx_split_bench PRIVATE ${SOFTNEURO_ISA_FLAGS_amx})
  target_link_libraries(amx_split_bench PRIVATE softneuro fmt::fmt Threads::Threads)
endif()
