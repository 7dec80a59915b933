"""libsoftneuro for Python: import an ONNX model or load a .dnn, tune it on this
device, and run it in sessions with NumPy arrays.

    import softneuro
    m = softneuro.import_onnx("model.onnx")          # or softneuro.load("model.dnn")
    t = softneuro.tune(m, schemas=["cpu:float32:*", "cpu:qint8:*"], calibration=samples)
    t.save("model.tuned.dnn")
    s = softneuro.Session(t, threads=2)
    outs = s.run({"x": array})                        # {"y": ndarray}, any input shape

Errors are softneuro.Error with .file, .layer and .field. Session.run and tune
release the GIL; use one Session per thread.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional, Sequence

import numpy as np


class Error(Exception):
    """softneuro::Error: what went wrong, and where (file, layer, field; empty where none)."""

    def __init__(self, text: str, message: str = "", file: str = "", layer: str = "", field: str = ""):
        super().__init__(text)
        self.message = message or text
        self.file = file
        self.layer = layer
        self.field = field


from . import _core  # noqa: E402  (Error first: the module raises it)

__version__ = _core.version()


def version() -> str:
    """The library's version."""
    return _core.version()


def source_digest() -> str:
    """A digest of the sources the library was built from (16 hex digits): what
    tuned files' prepared weights and the profile cache are kept per."""
    return _core.source_digest()


def device_fingerprint() -> str:
    """What identifies this device to a tuned path ("CPU model | ISA extensions | logical CPUs"):
    a file whose Model.tuned_fingerprint equals it runs here as tuned."""
    return _core.device_fingerprint()


class TensorInfo(tuple):
    """(name, shape with -1 where any size is taken, default shape, element type:
    'float32', 'int64', 'bool', ...)."""

    @property
    def name(self) -> str:
        return self[0]

    @property
    def shape(self) -> list:
        return self[1]

    @property
    def default_shape(self) -> list:
        return self[2]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self[3])


class Model:
    """A model: imported, loaded or tuned. Sessions run it; save() writes a .dnn."""

    def __init__(self, model, report: Optional["TuneReport"] = None):
        self._model = model
        self.report = report

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def inputs(self) -> list:
        return [TensorInfo(t) for t in self._model.inputs]

    @property
    def outputs(self) -> list:
        return [TensorInfo(t) for t in self._model.outputs]

    @property
    def tuned_fingerprint(self) -> str:
        """The device fingerprint its routine path was tuned on ("" when untuned)."""
        return self._model.tuned_fingerprint()

    @property
    def accuracy_check(self) -> dict:
        """How the tuned path's accuracy was checked, as the file records it: reduced_precision
        (it computes below float32, a quantised model's own int8 layers aside), budget
        ("top1:0.99", "seq:0.95", ...; "none": allowed unchecked; "": no budget), samples (real
        samples it was measured on; 0: never on real data), measured (-1: not measured),
        recorded (False: a file tuned before records were kept) and checked (nothing below
        float32, or its budget met on real samples)."""
        return self._model.accuracy_check

    def prepared_weight_bytes(self) -> int:
        """Bytes of the routine path's derived weights the model holds ready to use (tune's
        prepared_weights; 0: none)."""
        return self._model.prepared_weight_bytes()

    def save(self, path: str) -> None:
        """Writes a .dnn file (atomically)."""
        self._model.save(str(path))

    def path_svg(self, path: Optional[str] = None, title: Optional[str] = None) -> str:
        """The routine path as an SVG picture (steps coloured by schema, adapts with their
        cost, tuned times), as `softneuro report FILE --svg` draws it; written to `path` if given."""
        text = _core.path_svg(self._model, title or self.name)
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return text

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}{t.shape}" for t in self.inputs)
        outs = ", ".join(f"{t.name}{t.shape}" for t in self.outputs)
        return f"<softneuro.Model {self.name!r}: {ins} -> {outs}>"


def chart_svg(title: str, panels: Sequence, unit: str = "ms", path: Optional[str] = None) -> str:
    """A benchmark chart as SVG, drawn by the code that draws Model.path_svg:
    panels = [(panel title, [bar, ...]), ...], each bar a dict with "label",
    "median" (<= 0: no result, "note" says why), "min", "max" (whiskers),
    "colour", "hatched" (e.g. int8); written to `path` if given."""
    def bar(b):
        return (str(b["label"]), float(b.get("median") or 0), float(b.get("min") or 0), float(b.get("max") or 0),
                str(b.get("colour", "#4e79a7")), bool(b.get("hatched", False)), str(b.get("note", "")))
    text = _core.chart_svg(str(title), str(unit), [(str(t), [bar(b) for b in bars]) for t, bars in panels])
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text


class TuneReport:
    """What tune() measured and chose, every field of the JSON report as an attribute:
    .layers (dicts: layer, type, descriptor, routine_params, unit_ms, integrated_ms,
    candidates, sensitivity), .adapts (dicts: blob, consumer, from, to, descriptor, ms),
    .predicted_ms, .measured_ms, .default_ms, .kept_default, .accuracy, .accuracy_budget,
    .accuracy_missed, .device_fingerprint, .threads, .stages, .input_shapes,
    .other_shapes (TuneReports), ...; str() is the text report, .json the JSON one.
    Model.path_svg() draws the path."""

    def __init__(self, d: dict):
        import json
        fields = json.loads(d["json"]) if d.get("json") else {}
        fields["other_shapes"] = [TuneReport({"json": json.dumps(o), "text": ""})
                                  for o in fields.get("other_shapes", [])]
        self.__dict__.update(fields)
        self.text = d.get("text", "")
        self.json = d.get("json", "")

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return (f"<softneuro.TuneReport: {len(self.layers)} layers, {len(self.adapts)} adapts, "
                f"{self.measured_ms:.3f} ms (untuned {self.default_ms:.3f}), on {self.device_fingerprint!r}>")


def load(path: str) -> Model:
    """Reads a .dnn file (checked fully; errors name the file, layer and field)."""
    return Model(_core.load(str(path)))


def import_onnx(path: str, input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Model:
    """Translates an ONNX model. Symbolic input dims stay dynamic; `input_shapes`
    fixes them ({"x": (1, 3, -1, -1)}: -1 keeps a dim dynamic)."""
    shapes = {k: [int(d) for d in v] for k, v in (input_shapes or {}).items()}
    return Model(_core.import_onnx(str(path), shapes))


def import_tflite(path: str) -> Model:
    """Translates a TensorFlow Lite model (.tflite; the operators softneuro/import.hpp lists).
    int8/uint8 inputs and outputs stay integers at the model's edge."""
    return Model(_core.import_tflite(str(path)))


def _as_inputs(sample: Mapping[str, object], model: Optional["Model"] = None) -> dict:
    """Each value as a C-contiguous array of its input's element type (token
    ids int64, masks as the model types them; float32 where the name is none
    of the model's inputs, which the session then reports)."""
    types = {t[0]: np.dtype(t[3]) for t in model._model.inputs} if model is not None else {}
    return {str(k): np.ascontiguousarray(v, dtype=types.get(str(k), np.float32)) for k, v in sample.items()}


def tune(
    model: Model,
    schemas: Optional[Sequence[str]] = None,
    calibration: Optional[Iterable[Mapping[str, object]]] = None,
    validation: Optional[Iterable[Mapping[str, object]]] = None,
    accuracy: Optional[str] = None,
    metric: Optional[Callable[[list], float]] = None,
    max_drop: float = 0.0,
    progress: object = False,
    cache_dir: Optional[str] = None,
    time_budget_s: float = 0.0,
    shapes: Optional[Sequence[Mapping[str, Sequence[int]]]] = None,
    keep_float_weights: bool = False,
    prepared_weights: bool = True,
    min_reduced_gain: float = 0.02,
) -> Model:
    """Measures the routines of every layer on this device and returns a new
    model with the fastest routine path (the given one is unchanged).

    schemas: e.g. ["cpu:float32:*", "cpu:qint8:*"] (hybrid); default every float32 CPU schema
        (and every qint8 one for a model its author quantised, e.g. an ONNX QDQ file).
    calibration: samples (dicts of arrays by input name) that calibrate qint8 ranges (and
        validate, where `validation` is not given).
    validation: samples the accuracy budget is measured on. Without samples of either,
        nothing below float32 is chosen (but a quantised model's own int8 layers), unless
        accuracy="none"; Model.accuracy_check says how the result was checked.
    accuracy: "top1:0.99", "seq:0.95" (the whole argmax sequence), "ctc:0.95" (the line a greedy
        CTC decoder reads), "cosine:0.999",
        "rel-l2:0.02" or "none" (reduced precision allowed unchecked); default: seq:0.95
        for outputs of several positions per sample, else top1:0.99 (qint8), cosine:0.999.
    metric: fn(outputs_list) -> float over the validation samples' outputs (dicts, in
        order; e.g. exact lines against your labels), or fn(outputs_list,
        references_list) -> float, references being the float32 model's outputs
        of the same samples; a path may score at most `max_drop` below the
        float32 model. Replaces `accuracy`.
    progress: True prints stages; or a function(stage, done, total, item).
    shapes: input shapes to tune at, one routine path each ([{"x": (1, 3, 48, 320)}, ...]).
    keep_float_weights: keep float32 weights where layers run in qint8 (default: int8 and scales).
    prepared_weights: also store the routine path's derived weights (packed, transformed), so that
        sessions of the saved file start without deriving any on a CPU like this one (a larger file).
    min_reduced_gain: a path below float32 is kept only where it is predicted at least this
        fraction faster than the fastest float32 one (0.02: 2%; 0: any gain); else float32, and
        no time is spent calibrating every sample or checking the budget.
    """
    if progress is True:
        def progress(stage, done, total, item):  # noqa: F811
            print(f"softneuro tune: {stage} {done}/{total} {item}", flush=True)
    elif progress is False:
        progress = None
    if metric is not None and accuracy:
        raise Error("give accuracy or metric, not both", field="accuracy")
    validation = [_as_inputs(s, model) for s in (validation or [])]
    if metric is not None and _positional_params(metric) >= 2:
        # fn(outputs, references): the float32 model's outputs, computed once here.
        float32 = _core.Session(model._model, 0, 0, ["cpu:float32:*"], 4)
        references = [float32.run(v) for v in validation]
        del float32
        two_args = metric

        def metric(outputs):  # noqa: F811
            return two_args(outputs, references)

        metric.__name__ = getattr(two_args, "__name__", "metric")
    tuned, report = _core.tune(
        model._model,
        list(schemas or []),
        cache_dir or "",
        [_as_inputs(s, model) for s in (calibration or [])],
        validation,
        accuracy or "",
        metric,
        float(max_drop),
        float(time_budget_s),
        progress,
        [{k: [int(d) for d in v] for k, v in b.items()} for b in (shapes or [])],
        bool(keep_float_weights),
        bool(prepared_weights),
        float(min_reduced_gain),
    )
    return Model(tuned, TuneReport(report))


def _positional_params(fn) -> int:
    """How many positional arguments `fn` takes (2 or more: fn(outputs, references))."""
    import inspect
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in kinds for p in params)


class Session:
    """Runs a model: one prepared plan per input shape met (shape_cache of them
    kept; beyond that, a new shape runs a kept plan of its shape bucket: dims
    rounded up to a power of two). threads: 0 = the default (the machine's
    cores); memory_limit in bytes (0: the default)."""

    def __init__(self, model: Model, threads: int = 0, memory_limit: int = 0,
                 schemas: Optional[Sequence[str]] = None, shape_cache: int = 4):
        self.model = model
        self._s = _core.Session(model._model, int(threads), int(memory_limit), list(schemas or []), int(shape_cache))

    def run(self, inputs: Mapping[str, object]) -> dict:
        """{input name: array} -> {output name: ndarray of the output's type}.
        C-contiguous arrays of each input's type (float32 images, int64 token
        ids) are read in place; others are converted to it."""
        return self._s.run(_as_inputs(inputs, self.model))

    def output_shape(self, name: str) -> list:
        return self._s.output_shape(name)

    def layers(self) -> list:
        """Each layer with the routine that runs it (dicts)."""
        return self._s.layers()

    def plan_counts(self) -> dict:
        """{"built": plans built, "rebound": plans run at another shape of their bucket}."""
        built, rebound = self._s.plan_counts()
        return {"built": built, "rebound": rebound}


__all__ = ["Error", "Model", "Session", "TuneReport", "TensorInfo", "chart_svg", "device_fingerprint", "import_onnx", "import_tflite", "load", "source_digest", "tune", "version"]
