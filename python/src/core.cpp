// softneuro._core: the C++ runtime, importer and tuner for Python (nanobind).
// The Python API in python/softneuro/__init__.py wraps this module; arrays
// cross as float32 C-contiguous NumPy arrays (inputs viewed, not copied;
// outputs own the session's result memory), the GIL is released while a
// session runs and while the tuner measures, and softneuro::Error becomes
// softneuro.Error with file, layer and field.
#include <softneuro/import.hpp>
#include <softneuro/session.hpp>
#include <softneuro/softneuro.hpp>
#include <softneuro/tune.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <mutex>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>


namespace nb = nanobind;
using namespace nb::literals;
using softneuro::Blob;
using softneuro::NamedBlob;
using softneuro::Shape;

namespace {

/// Any C-contiguous NumPy array on the CPU: float32/64, the integer types or bool;
/// read-only ones too (np.frombuffer of bytes, a read-only memmap): inputs are only read.
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using OutArray = nb::ndarray<nb::numpy>;

/// The DType of a NumPy element type, and its dlpack code back.
const std::pair<nb::dlpack::dtype, softneuro::DType> kTypes[] = {
    {nb::dtype<float>(), softneuro::DType::float32},     {nb::dtype<double>(), softneuro::DType::float64},
    {nb::dtype<int64_t>(), softneuro::DType::int64},     {nb::dtype<int32_t>(), softneuro::DType::int32},
    {nb::dtype<int16_t>(), softneuro::DType::int16},     {nb::dtype<int8_t>(), softneuro::DType::int8},
    {nb::dtype<uint8_t>(), softneuro::DType::uint8},     {nb::dtype<uint16_t>(), softneuro::DType::uint16},
    {nb::dtype<uint32_t>(), softneuro::DType::uint32},   {nb::dtype<uint64_t>(), softneuro::DType::uint64},
    {nb::dtype<bool>(), softneuro::DType::boolean},
};

softneuro::DType dtype_of(const std::string& name, const InArray& a) {
  for (const auto& [d, t] : kTypes)
    if (a.dtype() == d) return t;
  throw softneuro::Error("an array of an element type nets do not take (float32/64, integers or bool)", {}, {}, name);
}

Shape shape_of(const InArray& a) {
  std::vector<int64_t> dims;
  for (std::size_t i = 0; i < a.ndim(); ++i) dims.push_back(static_cast<int64_t>(a.shape(i)));
  if (dims.size() > static_cast<std::size_t>(Shape::max_rank))
    throw softneuro::Error("an array of more than " + std::to_string(Shape::max_rank) + " dims");
  return Shape(dims);
}

/// Views over the arrays (which the caller keeps alive while they are used),
/// each in its own element type (a net takes typed inputs: token ids as int64).
std::vector<NamedBlob> blobs_of(const std::map<std::string, InArray>& arrays) {
  std::vector<NamedBlob> out;
  for (const auto& [name, a] : arrays)
    out.push_back({name, Blob::view(const_cast<void*>(a.data()), shape_of(a), dtype_of(name, a))});
  return out;
}

/// A copy that owns its memory (samples kept past the call that gave them).
std::vector<NamedBlob> owned_blobs_of(const std::map<std::string, InArray>& arrays) {
  std::vector<NamedBlob> out = blobs_of(arrays);
  for (auto& b : out) b.blob = b.blob.clone();
  return out;
}

/// A NumPy array of the blob's element type owning (a reference to) its memory: no copy.
OutArray array_of(const Blob& b) {
  auto* owner = new Blob(b);
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<Blob*>(p); });
  std::vector<std::size_t> dims;
  for (auto d : b.shape()) dims.push_back(static_cast<std::size_t>(d));
  nb::dlpack::dtype type = nb::dtype<float>();
  bool known = false;
  for (const auto& [d, t] : kTypes)
    if (t == b.dtype()) type = d, known = true;
  if (!known) throw softneuro::Error("an output of a type NumPy has no array for: " + std::string(softneuro::to_string(b.dtype())));
  return OutArray(const_cast<void*>(owner->data()), dims.size(), dims.data(), keep, nullptr, type);
}

nb::dict dict_of(const std::vector<NamedBlob>& blobs) {
  nb::dict d;
  for (const auto& b : blobs) d[b.name.c_str()] = array_of(b.blob);
  return d;
}

std::vector<int64_t> dims_with_dynamic(const softneuro::TensorInfo& t) {
  std::vector<int64_t> dims(t.shape.begin(), t.shape.end());
  for (int d : t.dynamic_dims) dims[static_cast<std::size_t>(d)] = -1;
  return dims;
}

nb::list infos(const std::vector<softneuro::TensorInfo>& ts) {
  nb::list l;
  for (const auto& t : ts)
    l.append(nb::make_tuple(t.name, dims_with_dynamic(t), std::vector<int64_t>(t.shape.begin(), t.shape.end()),
                            std::string(softneuro::to_string(t.dtype))));
  return l;
}

/// A session and the lock that serialises it: a softneuro::Session runs in one
/// thread at a time, and Python threads share objects freely (one Session used
/// from several threads corrupted the heap while run() released the GIL).
struct PySession {
  PySession(const softneuro::Model& model, const softneuro::SessionOptions& o) : session(model, o) {}
  softneuro::Session session;
  std::mutex mutex;
};

struct SetMetric {
  nb::object fn;  // fn(outputs_list) -> float, outputs as dicts of arrays
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "libsoftneuro's runtime, ONNX importer and tuner (see the softneuro package)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const softneuro::Error& e) {
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("softneuro").attr("Error");
      nb::object err = cls(e.what(), e.message(), e.file(), e.layer(), e.field());
      PyErr_SetObject(cls.ptr(), err.ptr());
    }
  });

  m.def("version", [] { return std::string(softneuro::version()); });
  m.def("source_digest", [] { return std::string(softneuro::source_digest()); });
  m.def("device_fingerprint", &softneuro::device_fingerprint);

  nb::class_<softneuro::Model>(m, "Model")
      .def_prop_ro("inputs", [](const softneuro::Model& n) { return infos(n.inputs()); })
      .def_prop_ro("outputs", [](const softneuro::Model& n) { return infos(n.outputs()); })
      .def_prop_ro("name", [](const softneuro::Model& n) { return n.name(); })
      .def("save", &softneuro::Model::save, "path"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("tuned_fingerprint", &softneuro::Model::tuned_fingerprint)
      // How the tuned path's accuracy was checked (softneuro::AccuracyCheck), as a dict.
      .def_prop_ro("accuracy_check",
                   [](const softneuro::Model& n) {
                     const softneuro::AccuracyCheck c = n.accuracy_check();
                     nb::dict d;
                     d["reduced_precision"] = c.reduced_precision;
                     d["budget"] = c.budget;
                     d["samples"] = c.samples;
                     d["measured"] = c.measured;
                     d["recorded"] = c.recorded;
                     d["checked"] = c.checked();
                     return d;
                   })
      .def("prepared_weight_bytes", &softneuro::Model::prepared_weight_bytes);

  // A benchmark chart (softneuro::chart_svg): panels of (title, bars), a bar
  // (label, median, min, max, colour, hatched, note).
  using ChartBar = std::tuple<std::string, double, double, double, std::string, bool, std::string>;
  m.def(
      "chart_svg",
      [](const std::string& title, const std::string& unit,
         const std::vector<std::pair<std::string, std::vector<ChartBar>>>& panels) {
        softneuro::BarChart chart;
        chart.title = title;
        chart.unit = unit;
        for (const auto& [panel_title, bars] : panels) {
          auto& panel = chart.panels.emplace_back();
          panel.title = panel_title;
          for (const auto& [label, median, min, max, colour, hatched, note] : bars)
            panel.bars.push_back({label, median, min, max, colour, hatched, note});
        }
        return softneuro::chart_svg(chart);
      },
      "title"_a, "unit"_a, "panels"_a);

  // The routine path as SVG (softneuro::path_svg), at the shapes it was tuned at (else the default ones).
  m.def(
      "path_svg",
      [](const softneuro::Model& model, const std::string& title) {
        softneuro::Session session(model);
        const auto buckets = model.tuned_shapes();
        if (!buckets.empty()) session.reshape(buckets[0]);
        return softneuro::path_svg(session.layers(), title);
      },
      "model"_a, "title"_a, nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "load", [](const std::string& path) { return softneuro::Model::load(path); }, "path"_a,
      nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "import_tflite",
      [](const std::string& path) {
        nb::gil_scoped_release release;
        return softneuro::import_tflite(path);
      },
      "path"_a);
  m.def(
      "import_onnx",
      [](const std::string& path, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
        softneuro::ImportOptions o;
        for (const auto& [name, dims] : input_shapes) o.input_shapes[name] = Shape(dims);
        nb::gil_scoped_release release;
        return softneuro::import_onnx(path, o);
      },
      "path"_a, "input_shapes"_a = std::map<std::string, std::vector<int64_t>>{});

  // Returns (the tuned model, the report as a dict). `calibration` and `validation`: lists of dicts of
  // arrays; `metric(outputs_list) -> float` over the validation samples (their
  // outputs as dicts, in order), with `max_drop` the most it may fall below
  // the float32 net's; `progress(stage, done, total, item)`.
  m.def(
      "tune",
      [](const softneuro::Model& model, const std::vector<std::string>& schemas, const std::string& cache_dir,
         const std::vector<std::map<std::string, InArray>>& calibration,
         const std::vector<std::map<std::string, InArray>>& validation, const std::string& accuracy,
         nb::object metric, double max_drop, double time_budget_s, nb::object progress,
         const std::vector<std::map<std::string, std::vector<int64_t>>>& shapes, bool keep_float_weights,
         bool prepared_weights, double min_reduced_gain) {
        softneuro::TuneOptions o;
        o.schemas = schemas;
        o.cache_dir = cache_dir;
        o.accuracy = accuracy;
        o.time_budget_s = time_budget_s;
        o.keep_float_weights = keep_float_weights;
        o.prepared_weights = prepared_weights;
        o.min_reduced_gain = min_reduced_gain;
        for (const auto& s : calibration) o.calibration.inputs.push_back(owned_blobs_of(s));
        for (const auto& s : validation) o.validation.push_back(owned_blobs_of(s));
        for (const auto& bucket : shapes) {
          std::map<std::string, Shape> b;
          for (const auto& [name, dims] : bucket) b[name] = Shape(dims);
          o.shapes.push_back(std::move(b));
        }
        // What the metric raised that is not an Exception (KeyboardInterrupt,
        // SystemExit): raised again as itself once tune() has unwound, never
        // turned into softneuro.Error.
        auto interrupt = std::make_shared<std::pair<PyObject*, std::string>>(nullptr, std::string());
        if (!metric.is_none()) {
          auto fn = std::make_shared<SetMetric>(SetMetric{metric});
          // A lambda's "<lambda>" (or any name that is not a plain word) reports as "metric".
          std::string name = nb::cast<std::string>(nb::str(nb::getattr(metric, "__name__", nb::str("metric"))));
          const bool plain = !name.empty() && name.size() <= 60 &&
                             name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") ==
                                 std::string::npos;
          o.accuracy_metric.name = plain ? name : "metric";
          o.accuracy_metric.max_drop = max_drop;
          o.accuracy_metric.score_set = [fn, interrupt](std::span<const std::vector<NamedBlob>> outputs) {
            nb::gil_scoped_acquire gil;
            try {
              nb::list l;
              for (const auto& sample : outputs) {
                nb::dict d;
                for (const auto& b : sample) d[b.name.c_str()] = array_of(b.blob.clone());
                l.append(d);
              }
              return nb::cast<double>(fn->fn(l));
            } catch (nb::python_error& e) {
              if (!e.matches(PyExc_Exception)) {
                nb::object type = nb::borrow(e.type());
                interrupt->first = type.release().ptr();
                interrupt->second = e.what();
              }
              throw std::runtime_error(e.what());  // no Python object leaves the GIL's scope
            }
          };
        }
        if (!progress.is_none())
          o.progress = [progress](const softneuro::TuneProgress& p) {
            nb::gil_scoped_acquire gil;
            progress(p.stage, p.done, p.total, p.item);
          };
        softneuro::TuneReport r;
        std::optional<softneuro::Model> tuned;
        try {
          nb::gil_scoped_release release;
          tuned = softneuro::tune(model, o, &r);
        } catch (...) {
          if (interrupt->first) {
            PyErr_SetString(interrupt->first, interrupt->second.c_str());
            Py_DECREF(interrupt->first);
            throw nb::python_error();
          }
          throw;
        }
        nb::dict d;
        d["text"] = r.to_text();
        d["json"] = r.to_json();  // every field: softneuro.TuneReport reads them from it
        return nb::make_tuple(*tuned, d);
      },
      "model"_a, "schemas"_a, "cache_dir"_a, "calibration"_a, "validation"_a, "accuracy"_a, "metric"_a.none(),
      "max_drop"_a, "time_budget_s"_a, "progress"_a.none(), "shapes"_a, "keep_float_weights"_a,
      "prepared_weights"_a, "min_reduced_gain"_a);

  nb::class_<PySession>(m, "Session")
      .def(
          "__init__",
          [](PySession* self, const softneuro::Model& model, int threads, std::size_t memory_limit,
             const std::vector<std::string>& schemas, std::size_t shape_cache) {
            softneuro::SessionOptions o;
            o.threads = threads;
            o.memory_limit = memory_limit;
            o.schemas = schemas;
            o.shape_cache = shape_cache;
            nb::gil_scoped_release release;
            new (self) PySession(model, o);
          },
          "model"_a, "threads"_a = 0, "memory_limit"_a = 0, "schemas"_a = std::vector<std::string>{},
          "shape_cache"_a = 4)
      .def(
          "run",
          [](PySession& s, const std::map<std::string, InArray>& inputs) {
            const std::vector<NamedBlob> in = blobs_of(inputs);
            std::vector<NamedBlob> out;
            {
              // The GIL first, then the session's lock: a thread waiting for
              // the session holds no GIL that the running one would need.
              nb::gil_scoped_release release;
              std::lock_guard lock(s.mutex);
              out = s.session.run(in);
            }
            return dict_of(out);
          },
          "inputs"_a)
      .def("output_shape",
           [](PySession& s, const std::string& name) {
             nb::gil_scoped_release release;
             std::lock_guard lock(s.mutex);
             const Shape sh = s.session.output_shape(name);
             return std::vector<int64_t>(sh.begin(), sh.end());
           })
      .def("planned_bytes",
           [](PySession& s) {
             nb::gil_scoped_release release;
             std::lock_guard lock(s.mutex);
             return s.session.planned_bytes();
           })
      .def("plan_counts",
           [](PySession& s) {
             nb::gil_scoped_release release;
             std::lock_guard lock(s.mutex);
             const auto c = s.session.plan_counts();
             return std::make_pair(c.built, c.rebound);
           })
      .def("layers", [](PySession& s) {
        std::vector<softneuro::LayerSummary> layers;
        {
          nb::gil_scoped_release release;
          std::lock_guard lock(s.mutex);
          layers = s.session.layers();
        }
        nb::list l;
        for (const auto& x : layers) {
          nb::dict d;
          d["name"] = x.name;
          d["type"] = x.type;
          d["descriptor"] = x.descriptor;
          d["routine_params"] = x.routine_params;
          d["quant"] = x.quant;
          d["tuned"] = x.tuned;
          d["inputs"] = x.inputs;
          d["fused_into"] = x.fused_into;
          d["view"] = x.view;
          l.append(d);
        }
        return l;
      });
}
