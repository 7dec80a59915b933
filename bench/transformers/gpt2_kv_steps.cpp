// A GPT-2 decode step with its KV cache at cache lengths 10-59 in one session (C++,
// no Python): the median time at a new length against the same step run again, and
// the plans built and re-bound. A .dnn of bench/transformers/gpt2_kv.py's export:
//   g++ -O2 -std=c++20 -Iinclude bench/transformers/gpt2_kv_steps.cpp -Lbuild -lsoftneuro -Wl,-rpath,$PWD/build -o /tmp/gpt2_kv_steps
//   build/softneuro import /tmp/gpt2kv/gpt2_kv.onnx -o /tmp/gpt2kv/gpt2_kv.dnn && /tmp/gpt2_kv_steps /tmp/gpt2kv/gpt2_kv.dnn
#include <softneuro/session.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <vector>
#include <algorithm>
#include <string>
using namespace softneuro;
int main(int, char** argv) {
  Model m = Model::load(argv[1]);
  SessionOptions o; o.threads = 2;
  Session s(m, o);
  std::vector<double> t_new, t_again;
  for (int64_t past = 10; past < 60; ++past) {
    std::vector<NamedBlob> in;
    Blob ids = Blob::allocate(Shape{1, 1}, DType::int64); ids.data_as<int64_t>()[0] = 5;
    Blob mask = Blob::allocate(Shape{1, past + 1}, DType::int64);
    for (int64_t i = 0; i <= past; ++i) mask.data_as<int64_t>()[i] = 1;
    in.push_back({"input_ids", ids}); in.push_back({"attention_mask", mask});
    for (int i = 0; i < 24; ++i) in.push_back({"past_" + std::to_string(i), Blob::allocate(Shape{1, 12, past, 64})});
    auto t0 = std::chrono::steady_clock::now();
    s.run(in);
    auto t1 = std::chrono::steady_clock::now();
    s.run(in);
    auto t2 = std::chrono::steady_clock::now();
    if (past >= 20) {  // past the first plans of the cache
      t_new.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      t_again.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
  }
  std::sort(t_new.begin(), t_new.end()); std::sort(t_again.begin(), t_again.end());
  printf("new %.2f ms, again %.2f ms (medians)\n", t_new[t_new.size()/2], t_again[t_again.size()/2]);
  auto c = s.plan_counts(); printf("built %zu rebound %zu\n", c.built, c.rebound);
}
