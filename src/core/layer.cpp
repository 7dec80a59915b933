// Layer parameter access, schemas and descriptors.
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <fnmatch.h>

namespace softneuro {
namespace {

template <class T>
const T* typed(const Layer& l, const std::string& key, const char* type_name) {
  auto it = l.params.find(key);
  if (it == l.params.end()) return nullptr;
  if (const T* v = std::get_if<T>(&it->second)) return v;
  throw Error(fmt::format("expected {} value", type_name), {}, l.name, key);
}

[[noreturn]] void missing(const Layer& l, const std::string& key) {
  throw Error(fmt::format("required parameter missing for {}", l.type), {}, l.name, key);
}

}  // namespace

int64_t Layer::get_int(const std::string& key) const {
  if (auto v = typed<int64_t>(*this, key, "an integer")) return *v;
  missing(*this, key);
}
int64_t Layer::get_int(const std::string& key, int64_t fallback) const {
  auto v = typed<int64_t>(*this, key, "an integer");
  return v ? *v : fallback;
}
double Layer::get_float(const std::string& key) const {
  auto it = params.find(key);
  if (it == params.end()) missing(*this, key);
  return get_float(key, 0.0);
}
double Layer::get_float(const std::string& key, double fallback) const {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (auto d = std::get_if<double>(&it->second)) return *d;
  if (auto i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  throw Error("expected a number", {}, name, key);
}
std::string Layer::get_string(const std::string& key) const {
  if (auto v = typed<std::string>(*this, key, "a string")) return *v;
  missing(*this, key);
}
std::string Layer::get_string(const std::string& key, const std::string& fallback) const {
  auto v = typed<std::string>(*this, key, "a string");
  return v ? *v : fallback;
}
std::vector<int64_t> Layer::get_ints(const std::string& key) const {
  if (auto v = typed<std::vector<int64_t>>(*this, key, "an integer list")) return *v;
  missing(*this, key);
}
std::vector<int64_t> Layer::get_ints(const std::string& key, std::vector<int64_t> fallback) const {
  auto v = typed<std::vector<int64_t>>(*this, key, "an integer list");
  return v ? *v : fallback;
}
std::vector<double> Layer::get_floats(const std::string& key) const {
  if (!has(key)) missing(*this, key);
  return get_floats(key, {});
}
std::vector<double> Layer::get_floats(const std::string& key, std::vector<double> fallback) const {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (auto d = std::get_if<std::vector<double>>(&it->second)) return *d;
  if (auto i = std::get_if<std::vector<int64_t>>(&it->second)) return {i->begin(), i->end()};
  throw Error("expected a number list", {}, name, key);
}

const Blob& Layer::weight(const std::string& key) const {
  if (const Blob* b = find_weight(key)) return *b;
  throw Error(fmt::format("required weight missing for {}", type), {}, name, key);
}
const Blob* Layer::find_weight(const std::string& key) const {
  auto it = weights.find(key);
  return it == weights.end() ? nullptr : &it->second;
}

Schema Schema::parse(std::string_view text) {
  Schema s;
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    auto p = text.find(':', start);
    parts.push_back(text.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  if (parts.size() > 3 || parts[0].empty())
    throw Error(fmt::format("'{}' is not a schema (platform[:dtype[:layout]])", text), {}, {}, "schema");
  try {
    s.device = parse_device(parts[0]);
    if (parts.size() > 1) s.dtype = parse_dtype(parts[1]);
    if (parts.size() > 2) s.layout = parse_layout(parts[2]);
  } catch (const Error& e) {
    throw Error(fmt::format("'{}' is not a schema: {}", text, e.message()), {}, {}, "schema");
  }
  return s;
}

std::string Schema::to_string() const {
  std::string s(softneuro::to_string(device));
  if (dtype != DType::float32 || layout != Layout::nchw) s += fmt::format(":{}", softneuro::to_string(dtype));
  if (layout != Layout::nchw) s += fmt::format(":{}", softneuro::to_string(layout));
  return s;
}

bool Schema::matches(std::string_view pattern) const {
  const std::string p(pattern);
  if (p.find_first_of("*?[") == std::string::npos) return parse(p) == *this;
  const std::string full = fmt::format("{}:{}:{}", softneuro::to_string(device), softneuro::to_string(dtype),
                                       softneuro::to_string(layout));
  return ::fnmatch(p.c_str(), full.c_str(), 0) == 0;
}

std::string make_descriptor(const Schema& schema, std::string_view algorithm) {
  return fmt::format("{}/{}", schema.to_string(), algorithm);
}

int64_t routine_param(const RoutineParams& params, std::string_view key, int64_t fallback) {
  for (const auto& [k, v] : params)
    if (k == key) return v;
  return fallback;
}

std::vector<RoutineParams> param_combinations(const std::vector<RoutineParamSpec>& space) {
  std::vector<RoutineParams> out{{}};
  for (const auto& spec : space) {
    if (spec.choices.empty()) continue;
    std::vector<RoutineParams> next;
    for (const auto& partial : out)
      for (int64_t v : spec.choices) {
        RoutineParams p = partial;
        p.emplace_back(spec.name, v);
        next.push_back(std::move(p));
      }
    out = std::move(next);
  }
  return out;
}

std::unique_ptr<PreparedRoutine> Routine::plan(const LayerInfo& info, const Schema& schema, const RoutineParams&,
                                               std::shared_ptr<const PackedWeights>) const {
  throw Error(fmt::format("{}/{} implements neither prepare() nor plan()", schema.to_string(), algorithm()), {},
              info.layer ? info.layer->name : std::string(), "routine");
}

namespace {
/// pack()'s object as the model's store holds it (nullptr where it packs nothing).
struct PackedHolder {
  std::shared_ptr<const PackedWeights> packed;
};
}  // namespace

std::unique_ptr<PreparedRoutine> Routine::prepare(const LayerInfo& info, const Schema& schema,
                                                  const RoutineParams& params) const {
  const PackInfo p{info.layer, info.input_quant, info.output_quant, info.memory_limit};
  const std::shared_ptr<const PackedHolder> held = prepared_weights<PackedHolder>(
      info, "packed", [&] { return PackedHolder{pack(p, schema, params)}; },
      [](const PackedHolder& h) { return h.packed ? h.packed->save() : Blob{}; },
      [&](const Blob& bytes) -> std::optional<PackedHolder> {
        auto unpacked = unpack(bytes, p, schema, params);
        if (!unpacked) return std::nullopt;
        return PackedHolder{std::move(unpacked)};
      });
  // Sharing the holder's ownership: while the prepared routine holds its
  // weights, the store's entry stays alive for other sessions and shapes.
  std::shared_ptr<const PackedWeights> packed =
      held->packed ? std::shared_ptr<const PackedWeights>(held, held->packed.get()) : nullptr;
  return plan(info, schema, params, std::move(packed));
}

void check_prepare_bytes(const LayerInfo& info, std::size_t bytes, std::string_view what) {
  check_prepare_bytes(PackInfo{info.layer, {}, {}, info.memory_limit}, bytes, what);
}

void check_prepare_bytes(const PackInfo& info, std::size_t bytes, std::string_view what) {
  if (info.memory_limit && bytes > info.memory_limit)
    throw Error(fmt::format("{} would take {} bytes, more than the session's memory limit of {} bytes", what, bytes,
                            info.memory_limit),
                {}, info.layer ? info.layer->name : std::string(), "memory_limit");
}

}  // namespace softneuro
