// .dnn files: a 64-byte header, the Model flatbuffer, then 64-byte aligned weights.
//
// Header (little-endian):
//   0  char[8] magic "SNDNN\0\0\0"     32 u64 weights_offset (multiple of 64)
//   8  u32 format_version               40 u64 weights_size
//  12  u32 flags (0)                    48 u64 file_size
//  16  u64 model_offset (= 64)          56 u64 checksum
//  24  u64 model_size
// checksum = xxh64(file[64..file_size), seed = xxh64(file[0..56))): every byte of
// the file but the checksum itself is covered, header, padding and weights alike.
#include "core/dnn_file.hpp"
#include "core/mapped_file.hpp"

#include "core/aligned_memory.hpp"
#include "core/hash.hpp"
#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/weight_quant.hpp"
#include "dnn_generated.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace softneuro::core {

static_assert(std::endian::native == std::endian::little, ".dnn files are little-endian");

namespace {

constexpr char kMagic[8] = {'S', 'N', 'D', 'N', 'N', 0, 0, 0};
constexpr std::size_t kHeaderSize = 64;
constexpr std::size_t kAlign = 64;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t flags;
  uint64_t model_offset, model_size, weights_offset, weights_size, file_size, checksum;
};
static_assert(sizeof(Header) == kHeaderSize);

std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

uint64_t file_checksum(const unsigned char* base, std::size_t size) {
  return xxh64(base + kHeaderSize, size - kHeaderSize, xxh64(base, 56));
}

[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& msg,
                      const std::string& layer = {}) {
  throw Error(msg, file, layer, field);
}

// ---------------------------------------------------------------------------
// Reading

struct Reader {
  const std::string& file;
  const unsigned char* weights;
  std::size_t weights_size;
  std::shared_ptr<const void> owner;

  std::string str(const flatbuffers::String* s) const { return s ? s->str() : std::string(); }

  /// A vector of 8-byte values, checked to be aligned to them: FlatBuffers 2's
  /// verifier checks only its length's alignment, and a misaligned read is
  /// undefined behaviour. An empty one is read nowhere, and FlatBuffers does
  /// not align it (a scalar's shape lies at any offset).
  template <class T>
  const flatbuffers::Vector<T>* aligned(const flatbuffers::Vector<T>* v, const std::string& layer,
                                        const std::string& field) const {
    if (v && v->size() != 0 && reinterpret_cast<std::uintptr_t>(v->data()) % alignof(T) != 0)
      bad(file, field, fmt::format("a vector of {}-byte values at a misaligned offset: the model section is damaged",
                                   sizeof(T)), layer);
    return v;
  }

  Shape shape(const flatbuffers::Vector<int64_t>* v, const std::string& layer, const std::string& field) const {
    if (!aligned(v, layer, field)) return Shape{};
    if (v->size() > static_cast<unsigned>(Shape::max_rank))
      bad(file, field, fmt::format("rank {} exceeds the maximum {}", v->size(), Shape::max_rank), layer);
    Shape s;
    int64_t total = 1;
    for (auto d : *v) {
      if (d < 0) bad(file, field, fmt::format("negative dim {}", d), layer);
      if (d > 0 && total > std::numeric_limits<int64_t>::max() / d) bad(file, field, "shape overflows", layer);
      total *= d;
      s.push_back(d);
    }
    return s;
  }

  DType dtype(uint8_t raw, const std::string& layer, const std::string& field) const {
    if (raw > static_cast<uint8_t>(kLastDType)) bad(file, field, fmt::format("unknown dtype code {}", raw), layer);
    return static_cast<DType>(raw);
  }

  Blob weight(const fb::Weight* w, const Layer& into) const {
    const std::string& layer = into.name;
    std::string field = "weights." + str(w->name());
    Shape s = shape(w->shape(), layer, field);
    DType dt = dtype(w->dtype(), layer, field);
    uint64_t off = w->offset(), size = w->size();
    if (off % kAlign != 0) bad(file, field, fmt::format("offset {} is not 64-byte aligned", off), layer);
    if (off > weights_size || size > weights_size - off)
      bad(file, field, fmt::format("bytes [{}, +{}) lie outside the weights section ({} bytes)", off, size, weights_size), layer);
    std::size_t want = storage_bytes(s, dt, Layout::nchw);
    if (size != want) bad(file, field, fmt::format("holds {} bytes, shape {} of {} needs {}", size, s.to_string(), to_string(dt), want), layer);
    Blob b = Blob::view(owner, weights + off, s, dt);
    if (w->scales()) b.quant().scales.assign(w->scales()->begin(), w->scales()->end());
    if (w->zero_points()) b.quant().zero_points.assign(w->zero_points()->begin(), w->zero_points()->end());
    b.quant().axis = w->quant_axis();
    if (b.quant().axis < -1 || b.quant().axis >= std::max(1, s.rank()))
      bad(file, field + ".quant_axis", fmt::format("axis {} out of range", b.quant().axis), layer);
    b.quant().block_size = w->quant_block_size();
    if (b.quant().block_size < 0 || (b.quant().block_size > 0 && b.quant().axis < 0))
      bad(file, field + ".quant_block_size", fmt::format("block size {} on axis {}", b.quant().block_size, b.quant().axis), layer);
    // Weights stored quantised (int8 and scales, as the tuner writes the weights
    // of layers that run in qint8) are computed with as float32, which keeps the
    // scales; a conv2's or dense's int8 weight, and an integer-weight layer's
    // (LayerType::integer_weight), stays int8 in the file's memory
    // (core::int8_weight: qint8 routines read it so, the others get its floats).
    if (dt == DType::qint8 || dt == DType::quint8 || dt == DType::quint4) {
      try {
        // A gather's quantised table too: its rows are dequantised as they are read.
        // A dense's blockwise weight (4-bit LLM weights, codes a byte or two a byte) stays so.
        const bool int8_layer = into.type == "conv2" || into.type == "dense" || has_integer_weight(into);
        const bool keep = (str(w->name()) == "weight" && int8_layer && int8_weight(b)) ||
                          (str(w->name()) == "weight" && into.type == "dense" && block_quantized(b)) ||
                          (str(w->name()) == "table" && into.type == "gather" && dt != DType::quint4);
        if (!keep) return dequantize_weight(b, field);
        check_weight_quant(b, field);
        return b;
      } catch (const Error& e) {
        bad(file, e.field(), e.message(), layer);
      }
    }
    return b;
  }

  Attr attr(const fb::Attr* a, const std::string& layer) const {
    std::string field = "params." + str(a->name());
    switch (a->kind()) {
      case fb::AttrKind::Int: return a->i();
      case fb::AttrKind::Float: return a->f();
      case fb::AttrKind::String: return str(a->s());
      case fb::AttrKind::Ints:
        if (auto v = aligned(a->ints(), layer, field)) return std::vector<int64_t>(v->begin(), v->end());
        return std::vector<int64_t>{};
      case fb::AttrKind::Floats:
        if (auto v = aligned(a->floats(), layer, field)) return std::vector<double>(v->begin(), v->end());
        return std::vector<double>{};
    }
    bad(file, field, fmt::format("unknown parameter kind {}", static_cast<int>(a->kind())), layer);
  }
};

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (auto s : *v) out.push_back(s->str());
  return out;
}

/// The header checked (magic, version, sizes, checksum) and the model section verified.
const fb::Model* checked_model(const unsigned char* base, std::size_t size, const std::string& file, Header& h) {
  if (size < kHeaderSize) bad(file, "header", fmt::format("file is truncated: {} bytes, a header alone is {}", size, kHeaderSize));
  std::memcpy(&h, base, kHeaderSize);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) bad(file, "header.magic", "not a .dnn file (bad magic)");
  if (h.version == 0 || h.version > dnn_format_version)
    bad(file, "header.format_version",
        fmt::format("format version {} is not supported (this library reads 1 to {}){}", h.version, dnn_format_version,
                    h.version > dnn_format_version ? ": the file is newer than the library" : ""));
  if (h.file_size != size)
    bad(file, "header.file_size", fmt::format("file is {} bytes, its header says {} (truncated or padded)", size, h.file_size));
  if (h.flags != 0) bad(file, "header.flags", fmt::format("unknown flags {:#x}", h.flags));
  if (h.model_offset != kHeaderSize || h.model_size > size - kHeaderSize || h.weights_offset % kAlign != 0 ||
      h.weights_offset < h.model_offset + h.model_size || h.weights_offset > size || h.weights_size != size - h.weights_offset)
    bad(file, "header", "inconsistent section offsets/sizes");
  if (file_checksum(base, size) != h.checksum)
    bad(file, "header.checksum", "checksum mismatch: the file is damaged");

  const unsigned char* model = base + h.model_offset;
  flatbuffers::Verifier verifier(model, h.model_size, /*max_depth=*/64, /*max_tables=*/50'000'000);
  if (!fb::VerifyModelBuffer(verifier)) bad(file, "model", "the model section fails FlatBuffers verification");
  const fb::Model* m = fb::GetModel(model);

  return m;
}

/// The graph of a verified model section: inputs, outputs, layers and their weights.
Graph read_graph(const fb::Model* m, const Reader& r) {
  const std::string& file = r.file;
  Graph g;
  g.storage = r.owner;
  g.name = r.str(m->name());
  if (m->inputs())
    for (auto t : *m->inputs()) {
      std::string name = r.str(t->name());
      TensorInfo info{name, r.shape(t->shape(), {}, "inputs." + name), r.dtype(t->dtype(), {}, "inputs." + name), {}};
      if (t->dynamic_dims())
        for (int d : *t->dynamic_dims()) {
          if (d < 0 || d >= info.shape.rank() || (!info.dynamic_dims.empty() && d <= info.dynamic_dims.back()))
            throw Error(fmt::format("dynamic dim {} is out of range or order for the rank-{} shape", d, info.shape.rank()),
                        file, {}, "inputs." + name + ".dynamic_dims");
          info.dynamic_dims.push_back(d);
        }
      g.inputs.push_back(std::move(info));
    }
  g.outputs = strings(m->outputs());
  if (m->output_dtypes()) {
    if (m->output_dtypes()->size() != g.outputs.size())
      bad(file, "output_dtypes", fmt::format("{} dtypes for {} outputs", m->output_dtypes()->size(), g.outputs.size()));
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      const DType d = r.dtype(m->output_dtypes()->Get(static_cast<flatbuffers::uoffset_t>(k)), {}, "output_dtypes." + g.outputs[k]);
      if (d != DType::float32) g.output_dtypes[g.outputs[k]] = d;
    }
  }
  if (m->layers())
    for (auto fl : *m->layers()) {
      Layer l;
      l.name = r.str(fl->name());
      l.type = r.str(fl->type());
      l.inputs = strings(fl->inputs());
      l.outputs = strings(fl->outputs());
      if (fl->params())
        for (auto a : *fl->params())
          if (!l.params.emplace(r.str(a->name()), r.attr(a, l.name)).second)
            bad(file, "params." + r.str(a->name()), "duplicate parameter", l.name);
      if (fl->weights())
        for (auto w : *fl->weights())
          if (!l.weights.emplace(r.str(w->name()), r.weight(w, l)).second)
            bad(file, "weights." + r.str(w->name()), "duplicate weight", l.name);
      g.layers.push_back(std::move(l));
    }
  return g;
}

/// A routine path of the file (`field` names it in errors), its descriptors
/// renamed since by their alias; its input shapes are checked against `g`'s inputs.
RoutinePath read_path(const fb::RoutinePath* p, const Reader& r, const Graph& g, const std::string& field) {
  const std::string& file = r.file;
  RoutinePath path;
  path.device_fingerprint = r.str(p->device_fingerprint());
  path.openmp_wait = r.str(p->openmp_wait());
  if (const std::string& w = path.openmp_wait; !w.empty()) {
    const bool count = w.size() > 5 && w.size() <= 25 && w.rfind("spin=", 0) == 0 &&
                       w.find_first_not_of("0123456789", 5) == std::string::npos;
    if (!(w == "passive" || w == "active" || count))
      bad(file, field + ".openmp_wait", fmt::format("'{}' is not passive, active or spin=N", w.substr(0, 40)));
  }
  // A childnet routine's choice holds its children's, recursively.
  auto choice = [&](auto&& self, const fb::RoutineChoice* c) -> RoutineChoice {
    RoutineChoice rc{r.str(c->layer()), r.str(c->descriptor()), {}, c->predicted_ms(), c->measured_ms(), {}};
    if (c->params())
      for (auto kv : *c->params()) rc.params.emplace_back(r.str(kv->name()), kv->value());
    // A routine renamed since the file was written: its new name and parameter.
    if (const RoutineRegistry::Alias* a = RoutineRegistry::instance().alias(rc.descriptor)) {
      rc.descriptor = a->descriptor;
      for (const auto& [name, value] : a->params)
        if (std::none_of(rc.params.begin(), rc.params.end(), [&name = name](const auto& p) { return p.first == name; }))
          rc.params.emplace_back(name, value);
    }
    if (c->children())
      for (auto child : *c->children()) rc.children.push_back(self(self, child));
    return rc;
  };
  if (p->routines())
    for (auto c : *p->routines()) path.routines.push_back(choice(choice, c));
  if (p->adapts())
    for (auto a : *p->adapts()) {
      AdaptChoice ac{r.str(a->blob()), r.str(a->consumer()), r.str(a->from_schema()),
                     r.str(a->to_schema()), strings(a->steps()), a->predicted_ms(), {}};
      if (a->params())
        for (auto kv : *a->params()) ac.params.emplace_back(r.str(kv->name()), kv->value());
      path.adapts.push_back(std::move(ac));
    }
  if (p->input_shapes())
    for (auto t : *p->input_shapes()) {
      const std::string name = r.str(t->name());
      const TensorInfo* in = nullptr;
      for (const auto& i : g.inputs)
        if (i.name == name) in = &i;
      if (!in) bad(file, field + ".input_shapes", fmt::format("the model has no input '{}'", name.substr(0, 80)));
      const Shape shape = r.shape(t->shape(), {}, field + ".input_shapes." + name);
      try {
        check_input_shape(*in, shape);
      } catch (const Error& e) {
        bad(file, field + ".input_shapes." + name, e.message());
      }
      path.input_shapes[name] = shape;
    }
  if (const fb::AccuracyCheck* a = p->accuracy()) {
    AccuracyCheck c;
    c.reduced_precision = a->reduced_precision();
    c.budget = r.str(a->budget());
    c.samples = a->samples();
    c.measured = a->measured();
    c.recorded = true;
    if (c.budget.size() > 200) bad(file, field + ".accuracy.budget", "longer than 200 characters");
    if (c.samples < 0) bad(file, field + ".accuracy.samples", fmt::format("{} samples", c.samples));
    if (!std::isfinite(c.measured)) bad(file, field + ".accuracy.measured", "not a finite value");
    path.accuracy = c;
  }
  return path;
}

/// What tuning added to the graph `g`: its routine paths (descriptors renamed
/// since, by their alias), prepared weights and blob quantisation.
Tuning read_tuning(const fb::Model* m, const Reader& r, const Graph& g) {
  const std::string& file = r.file;
  Tuning t;
  if (auto p = m->routine_path()) t.routine_path = read_path(p, r, g, "routine_path");
  if (m->shape_paths()) {
    for (auto p : *m->shape_paths()) {
      const std::string field = fmt::format("shape_paths[{}]", t.shape_paths.size());
      t.shape_paths.push_back(read_path(p, r, g, field));
      if (t.shape_paths.back().input_shapes.empty()) bad(file, field + ".input_shapes", "a shape bucket's path names no input shapes");
    }
  }
  if (auto p = m->prepared()) {
    auto entries = std::make_shared<std::map<std::string, Blob>>();
    t.prepared_tag = r.str(p->tag());
    if (p->weights())
      for (auto w : *p->weights()) {
        const std::string key = r.str(w->key());
        const std::string field = "prepared." + key.substr(0, 200);
        const uint64_t off = w->offset(), n = w->size();
        if (off % kAlign != 0) bad(file, field, fmt::format("offset {} is not 64-byte aligned", off));
        if (off > r.weights_size || n > r.weights_size - off)
          bad(file, field, fmt::format("bytes [{}, +{}) lie outside the weights section ({} bytes)", off, n, r.weights_size));
        Blob b = Blob::view(r.owner, r.weights + off, Shape{static_cast<int64_t>(n)}, DType::uint8);
        if (!entries->emplace(key, std::move(b)).second) bad(file, field, "duplicate entry");
      }
    t.prepared = std::move(entries);
  }
  if (m->blob_quant())
    for (auto q : *m->blob_quant()) {
      QuantParams qp;
      if (q->scales()) qp.scales.assign(q->scales()->begin(), q->scales()->end());
      if (q->zero_points()) qp.zero_points.assign(q->zero_points()->begin(), q->zero_points()->end());
      qp.axis = q->axis();
      std::string field = "blob_quant." + r.str(q->blob());
      if (qp.scales.empty() || (!qp.zero_points.empty() && qp.zero_points.size() != qp.scales.size()) || qp.axis < -1)
        bad(file, field, "inconsistent scales, zero points or axis");
      for (float sc : qp.scales)
        if (!quant_scale_in_range(sc)) bad(file, field, fmt::format("scale {} lies outside [1e-30, 1e30]", sc));
      if (!t.blob_quant.emplace(r.str(q->blob()), std::move(qp)).second) bad(file, field, "duplicate entry");
    }
  return t;
}

TunedGraph parse(const unsigned char* base, std::size_t size, std::shared_ptr<const void> owner, const std::string& file) {
  Header h;
  const fb::Model* m = checked_model(base, size, file, h);
  const Reader r{file, base + h.weights_offset, h.weights_size, owner};
  TunedGraph out;
  out.graph = read_graph(m, r);
  out.tuning = read_tuning(m, r, out.graph);
  return out;
}

}  // namespace

TunedGraph read_dnn(const std::string& path) {
  const MappedFile m = map_file(path);
  if (m.size < kHeaderSize)
    bad(path, "header", fmt::format("file is truncated: {} bytes, a header alone is {}", m.size, kHeaderSize));
  return parse(m.data, m.size, m.owner, path);
}

TunedGraph read_dnn_bytes(const void* data, std::size_t size, const std::string& name) {
  void* copy = allocate_aligned(align_up(std::max<std::size_t>(size, 1)));
  if (!copy) throw Error("out of memory", name);
  std::shared_ptr<const void> owner(copy, [](const void* q) { std::free(const_cast<void*>(q)); });
  if (size) std::memcpy(copy, data, size);
  return parse(static_cast<const unsigned char*>(copy), size, owner, name);
}

// ---------------------------------------------------------------------------
// Writing

uint32_t required_format_version(const Graph& graph) {
  for (const auto& l : graph.layers)
    if (l.has("act_scale") || l.has("act_shift")) return 2;
  return 1;
}

namespace {

/// Builds a file's model section and lists the blobs of its weights section.
struct Writer {
  flatbuffers::FlatBufferBuilder fbb{1 << 16};
  std::vector<const Blob*> blobs;  ///< in weights-section order
  std::deque<Blob> int8_weights;   ///< the int8 storage of weights on their int8 grid (stable addresses)
  std::size_t weights_size = 0;

  flatbuffers::Offset<flatbuffers::Vector<int64_t>> ints(const Shape& s) { return fbb.CreateVector(s.to_vector()); }
  /// Places `b` in the weights section; returns its offset.
  std::size_t place(const Blob& b) {
    const std::size_t offset = weights_size;
    weights_size = align_up(weights_size + b.byte_size());
    blobs.push_back(&b);
    return offset;
  }

  flatbuffers::Offset<fb::Attr> attr(const std::string& k, const Attr& v) {
    auto name = fbb.CreateString(k);
    flatbuffers::Offset<fb::Attr> a;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) a = fb::CreateAttr(fbb, name, fb::AttrKind::Int, x);
          else if constexpr (std::is_same_v<T, double>) a = fb::CreateAttr(fbb, name, fb::AttrKind::Float, 0, x);
          else if constexpr (std::is_same_v<T, std::string>) {
            auto s = fbb.CreateString(x);
            a = fb::CreateAttr(fbb, name, fb::AttrKind::String, 0, 0, s);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            auto v2 = fbb.CreateVector(x);
            a = fb::CreateAttr(fbb, name, fb::AttrKind::Ints, 0, 0, 0, v2);
          } else {
            auto v2 = fbb.CreateVector(x);
            a = fb::CreateAttr(fbb, name, fb::AttrKind::Floats, 0, 0, 0, 0, v2);
          }
        },
        v);
    return a;
  }

  flatbuffers::Offset<fb::Weight> weight(const Layer& l, const std::string& k, const Blob& given) {
    if (given.layout() != Layout::nchw || given.device() != Device::cpu)
      throw Error("only plain CPU weights can be saved", {}, l.name, "weights." + k);
    if (!given.data() && given.byte_size() != 0) throw Error("weight has no memory", {}, l.name, "weights." + k);
    // A float32 weight on its int8 grid is stored as int8 and its scales;
    // any other keeps its dtype, and a float32 one no scales.
    const Blob* stored = &given;
    QuantParams quant = given.quant();
    if (auto q = int8_storage(given)) {
      stored = &int8_weights.emplace_back(std::move(*q));
    } else if (given.dtype() == DType::float32) {
      quant = QuantParams{};
    }
    const Blob& b = *stored;
    const std::size_t offset = place(b);
    auto scales = quant.scales.empty() ? 0 : fbb.CreateVector(quant.scales);
    auto zps = quant.zero_points.empty() ? 0 : fbb.CreateVector(quant.zero_points);
    auto shape = ints(b.shape());
    return fb::CreateWeight(fbb, fbb.CreateString(k), static_cast<uint8_t>(b.dtype()), shape, offset, b.byte_size(),
                            scales, zps, quant.axis, quant.block_size);
  }

  flatbuffers::Offset<fb::Layer> layer(const Layer& l) {
    std::vector<flatbuffers::Offset<fb::Attr>> params;
    for (const auto& [k, v] : l.params) params.push_back(attr(k, v));
    std::vector<flatbuffers::Offset<fb::Weight>> weights;
    for (const auto& [k, given] : l.weights) weights.push_back(weight(l, k, given));
    return fb::CreateLayer(fbb, fbb.CreateString(l.name), fbb.CreateString(l.type), fbb.CreateVectorOfStrings(l.inputs),
                           fbb.CreateVectorOfStrings(l.outputs), fbb.CreateVector(params), fbb.CreateVector(weights));
  }

  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::RoutineParam>>> params(const RoutineParams& ps) {
    std::vector<flatbuffers::Offset<fb::RoutineParam>> out;
    for (const auto& [k, v] : ps) out.push_back(fb::CreateRoutineParam(fbb, fbb.CreateString(k), v));
    return fbb.CreateVector(out);
  }

  /// A routine choice and its children's, recursively.
  flatbuffers::Offset<fb::RoutineChoice> choice(const RoutineChoice& c) {
    std::vector<flatbuffers::Offset<fb::RoutineChoice>> children;
    for (const auto& child : c.children) children.push_back(choice(child));
    auto children_vec = children.empty() ? 0 : fbb.CreateVector(children);  // absent: what older writers wrote
    auto ps = params(c.params);
    return fb::CreateRoutineChoice(fbb, fbb.CreateString(c.layer), fbb.CreateString(c.descriptor), ps, c.predicted_ms,
                                   c.measured_ms, children_vec);
  }

  flatbuffers::Offset<fb::RoutinePath> path(const RoutinePath& p) {
    std::vector<flatbuffers::Offset<fb::RoutineChoice>> rcs;
    for (const auto& c : p.routines) rcs.push_back(choice(c));
    std::vector<flatbuffers::Offset<fb::AdaptChoice>> acs;
    for (const auto& a : p.adapts) {
      auto ps = a.params.empty() ? 0 : params(a.params);
      acs.push_back(fb::CreateAdaptChoice(fbb, fbb.CreateString(a.blob), fbb.CreateString(a.consumer),
                                          fbb.CreateString(a.from_schema), fbb.CreateString(a.to_schema),
                                          fbb.CreateVectorOfStrings(a.steps), a.predicted_ms, ps));
    }
    std::vector<flatbuffers::Offset<fb::Tensor>> shapes;
    for (const auto& [name, shape] : p.input_shapes)
      shapes.push_back(fb::CreateTensor(fbb, fbb.CreateString(name), static_cast<uint8_t>(DType::float32), ints(shape)));
    flatbuffers::Offset<fb::AccuracyCheck> accuracy = 0;
    if (p.accuracy)
      accuracy = fb::CreateAccuracyCheck(fbb, p.accuracy->reduced_precision, fbb.CreateString(p.accuracy->budget),
                                         p.accuracy->samples, p.accuracy->measured);
    return fb::CreateRoutinePath(fbb, fbb.CreateString(p.device_fingerprint), fbb.CreateVector(rcs), fbb.CreateVector(acs),
                                 p.openmp_wait.empty() ? 0 : fbb.CreateString(p.openmp_wait),
                                 shapes.empty() ? 0 : fbb.CreateVector(shapes), accuracy);
  }

  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::BlobQuant>>> blob_quant(
      const std::map<std::string, QuantParams>& quant) {
    std::vector<flatbuffers::Offset<fb::BlobQuant>> quants;
    for (const auto& [blob, q] : quant) {
      auto zps = q.zero_points.empty() ? 0 : fbb.CreateVector(q.zero_points);
      quants.push_back(fb::CreateBlobQuant(fbb, fbb.CreateString(blob), fbb.CreateVector(q.scales), zps, q.axis));
    }
    return quants.empty() ? 0 : fbb.CreateVector(quants);
  }

  flatbuffers::Offset<fb::PreparedWeights> prepared(const Tuning& t) {
    if (!t.prepared) return 0;
    std::vector<flatbuffers::Offset<fb::PreparedWeight>> entries;
    for (const auto& [key, b] : *t.prepared) {
      const std::size_t offset = place(b);
      entries.push_back(fb::CreatePreparedWeight(fbb, fbb.CreateString(key), offset, b.byte_size()));
    }
    return fb::CreatePreparedWeights(fbb, fbb.CreateString(t.prepared_tag), fbb.CreateVector(entries));
  }

  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> output_dtypes(const Graph& g) {
    if (g.output_dtypes.empty()) return 0;
    std::vector<uint8_t> codes;
    for (const auto& o : g.outputs) {
      auto it = g.output_dtypes.find(o);
      codes.push_back(static_cast<uint8_t>(it == g.output_dtypes.end() ? DType::float32 : it->second));
    }
    return fbb.CreateVector(codes);
  }

  /// The whole file: header, the model section, the weights section.
  std::vector<unsigned char> file(uint32_t version) const {
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = version;
    h.model_offset = kHeaderSize;
    h.model_size = fbb.GetSize();
    h.weights_offset = align_up(kHeaderSize + h.model_size);
    h.weights_size = weights_size;
    h.file_size = h.weights_offset + weights_size;
    std::vector<unsigned char> out(h.file_size, 0);
    std::memcpy(out.data() + h.model_offset, fbb.GetBufferPointer(), h.model_size);
    std::size_t offset = 0;
    for (const Blob* b : blobs) {
      if (b->byte_size()) std::memcpy(out.data() + h.weights_offset + offset, b->data(), b->byte_size());
      offset = align_up(offset + b->byte_size());
    }
    std::memcpy(out.data(), &h, kHeaderSize);
    h.checksum = file_checksum(out.data(), out.size());
    std::memcpy(out.data(), &h, kHeaderSize);
    return out;
  }
};

}  // namespace

std::vector<unsigned char> serialize_dnn(const Graph& g, const Tuning& t) {
  Writer w;
  std::vector<flatbuffers::Offset<fb::Tensor>> inputs;
  for (const auto& in : g.inputs)
    inputs.push_back(fb::CreateTensor(w.fbb, w.fbb.CreateString(in.name), static_cast<uint8_t>(in.dtype), w.ints(in.shape),
                                      in.dynamic_dims.empty() ? 0 : w.fbb.CreateVector(in.dynamic_dims)));
  std::vector<flatbuffers::Offset<fb::Layer>> layers;
  for (const auto& l : g.layers) layers.push_back(w.layer(l));
  flatbuffers::Offset<fb::RoutinePath> path = 0;
  if (!t.routine_path.empty() || !t.routine_path.device_fingerprint.empty()) path = w.path(t.routine_path);
  std::vector<flatbuffers::Offset<fb::RoutinePath>> shape_paths;
  for (const auto& p : t.shape_paths) shape_paths.push_back(w.path(p));
  auto quant = w.blob_quant(t.blob_quant);
  auto output_dtypes = w.output_dtypes(g);
  auto prepared = w.prepared(t);
  auto model = fb::CreateModel(w.fbb, w.fbb.CreateString(g.name),
                               w.fbb.CreateString(fmt::format("libsoftneuro {}", SOFTNEURO_VERSION)),
                               w.fbb.CreateVector(inputs), w.fbb.CreateVectorOfStrings(g.outputs),
                               w.fbb.CreateVector(layers), path, quant,
                               shape_paths.empty() ? 0 : w.fbb.CreateVector(shape_paths), output_dtypes, prepared);
  fb::FinishModelBuffer(w.fbb, model);
  return w.file(required_format_version(g));
}

void write_dnn(const Graph& graph, const std::string& path, const Tuning& tuning) {
  auto bytes = serialize_dnn(graph, tuning);
  write_file_atomically(path, bytes.data(), bytes.size());
}

void write_file_atomically(const std::string& path, const void* data, std::size_t size) {
  // Only a regular file (or a new one) is replaced: a rename over a device, a
  // FIFO or a socket would replace it for the whole machine (`-o /dev/null` as
  // root turned /dev/null into a model file).
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(fmt::format("not a regular file ({}): refusing to replace it; give a regular file's path",
                            S_ISDIR(st.st_mode) ? "a folder" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                            : S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file"),
                path);
  // The temporary file is created 0666 so that the user's umask decides the
  // saved file's permissions, as for any file an application writes (mkstemp's
  // 0600 made every model private, a fixed 0644 ignored a umask of 077).
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    tmp = fmt::format("{}.tmp.{}.{}.{:x}", path, ::getpid(), counter.fetch_add(1),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw Error(fmt::format("cannot create a temporary file beside it: {}", std::strerror(errno)), path);
  const auto* p = static_cast<const char*>(data);
  std::size_t left = size;
  bool ok = true;
  while (ok && left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) { p += n; left -= static_cast<std::size_t>(n); }
  }
  int err = ok ? 0 : errno;
  if (ok && ::fsync(fd) != 0) { ok = false; err = errno; }
  if (::close(fd) != 0 && ok) { ok = false; err = errno; }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) { ok = false; err = errno; }
  if (!ok) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write: {}", std::strerror(err)), path);
  }
  // The rename itself reaches the disk with the folder's entry.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace softneuro::core
