"""Tests of the installed softneuro package (scripts/test.sh runs them in a fresh venv)."""
import os
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import softneuro

RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((16, 32)).astype(np.float32)
B1 = RNG.standard_normal(32).astype(np.float32)
W2 = RNG.standard_normal((32, 10)).astype(np.float32)


def mlp_onnx(path):
    """x [batch, 16] -> relu(x @ W1 + B1) @ W2 -> y [batch, 10], batch symbolic."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(B1, "b1"), numpy_helper.from_array(W2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


def reference(x):
    return np.maximum(x @ W1 + B1, 0) @ W2


def conv_onnx(path):
    """x [1, 8, H, W] -> conv 3x3 (8 -> 16) -> relu -> global average -> y [1, 16]: a net qint8 can run."""
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.fixture
def mlp(tmp_path):
    return softneuro.import_onnx(mlp_onnx(str(tmp_path / "mlp.onnx")))


def test_import_and_run_any_batch(mlp):
    assert softneuro.version() == softneuro.__version__
    assert len(softneuro.source_digest()) == 16 and int(softneuro.source_digest(), 16) >= 0
    assert mlp.inputs[0].name == "x" and mlp.inputs[0].shape == [-1, 16]
    s = softneuro.Session(mlp, threads=1)
    for batch in (1, 5, 2):
        x = RNG.standard_normal((batch, 16)).astype(np.float32)
        y = s.run({"x": x})["y"]
        assert y.shape == (batch, 10) and y.dtype == np.float32
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-4)
    # Other dtypes and layouts are converted.
    x = RNG.standard_normal((16, 3)).T
    np.testing.assert_allclose(s.run({"x": x})["y"], reference(x.astype(np.float32)), rtol=1e-4, atol=1e-4)


def test_outputs_match_the_cli(mlp, tmp_path):
    cli = os.environ.get("SOFTNEURO_CLI")
    if not cli:
        pytest.skip("SOFTNEURO_CLI (the softneuro command) not given")
    dnn, xin, yout = str(tmp_path / "m.dnn"), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")
    mlp.save(dnn)
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    np.save(xin, x)
    subprocess.run([cli, "run", dnn, "--input", f"x={xin}", "--output", f"y={yout}", "--repeat", "1", "--top", "0"],
                   check=True, capture_output=True)
    got = softneuro.Session(softneuro.load(dnn)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.load(yout))


def test_tune_save_load(mlp, tmp_path):
    t = softneuro.tune(mlp, cache_dir=str(tmp_path / "cache"))
    assert t is not mlp and t.report.layers and t.report.measured_ms > 0
    assert "predicted" in str(t.report) or t.report.text
    path = str(tmp_path / "tuned.dnn")
    t.save(path)
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    y = softneuro.Session(softneuro.load(path)).run({"x": x})["y"]
    np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-4)
    assert softneuro.load(path).prepared_weight_bytes() == t.prepared_weight_bytes()
    plain = softneuro.tune(mlp, cache_dir=str(tmp_path / "cache"), prepared_weights=False)
    assert plain.prepared_weight_bytes() == 0
    np.testing.assert_allclose(softneuro.Session(plain).run({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-4)


def test_hybrid_tuning_with_calibration_samples_and_a_python_metric(tmp_path):
    m = softneuro.import_onnx(conv_onnx(str(tmp_path / "conv.onnx")))
    samples = ({"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(8))  # any iterable
    validation = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(4)]
    float32 = softneuro.Session(m)
    labels = [int(np.argmax(float32.run(v)["y"])) for v in validation]
    seen = []

    def top1_hits(outputs):
        seen.append(len(outputs))
        return float(sum(int(np.argmax(o["y"])) == lab for o, lab in zip(outputs, labels)))

    t = softneuro.tune(m, schemas=["cpu:float32:*", "cpu:qint8:*"], calibration=samples, validation=validation,
                       metric=top1_hits, max_drop=4, cache_dir=str(tmp_path / "cache"))
    assert "top1_hits:max_drop=4" in t.report.accuracy_budget
    assert not t.report.accuracy_missed
    if t.report.accuracy >= 0:  # a qint8 path was measured by the metric
        assert seen and all(n == len(validation) for n in seen)
    y = softneuro.Session(t).run(validation[0])["y"]
    assert y.shape == (1, 16)


def test_a_python_metric_against_the_float32_references(tmp_path):
    # fn(outputs, references): references are the float32 model's outputs of the same samples.
    m = softneuro.import_onnx(conv_onnx(str(tmp_path / "conv.onnx")))
    calibration = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(6)]
    validation = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(3)]
    want = [softneuro.Session(m).run(v)["y"] for v in validation]
    calls = []

    def agreement(outputs, references):
        calls.append((len(outputs), len(references)))
        for r, w in zip(references, want):
            np.testing.assert_allclose(r["y"], w, rtol=1e-4, atol=1e-4)
        return float(sum(int(np.argmax(o["y"])) == int(np.argmax(r["y"])) for o, r in zip(outputs, references)))

    t = softneuro.tune(m, schemas=["cpu:qint8:*"], calibration=calibration, validation=validation,
                       metric=agreement, max_drop=3, cache_dir=str(tmp_path / "cache"))
    assert "agreement:max_drop=3" in t.report.accuracy_budget
    assert calls and all(c == (3, 3) for c in calls)


def test_the_report_as_an_object(tmp_path):
    m = softneuro.import_onnx(conv_onnx(str(tmp_path / "conv.onnx")))
    calibration = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(4)]
    t = softneuro.tune(m, schemas=["cpu:float32:*", "cpu:qint8:*"], calibration=calibration, accuracy="none",
                       cache_dir=str(tmp_path / "cache"))
    r = t.report
    assert r.device_fingerprint == softneuro.device_fingerprint() == t.tuned_fingerprint
    assert r.threads >= 1 and r.measured_ms > 0 and r.predicted_ms > 0
    assert r.layers
    for layer in r.layers:
        assert {"layer", "type", "descriptor", "routine_params", "unit_ms", "integrated_ms", "candidates"} <= set(layer)
    for adapt in r.adapts:
        assert {"blob", "consumer", "from", "to", "descriptor", "ms"} <= set(adapt)
    assert [s["stage"] for s in r.stages]
    assert r.other_shapes == []
    assert "TuneReport" in repr(r) and str(r) == r.text
    assert t.accuracy_check["budget"] == "none" and t.accuracy_check["recorded"]
    assert t.accuracy_check["checked"] == (not t.accuracy_check["reduced_precision"])


def test_no_samples_no_reduced_precision(tmp_path):
    """Without samples of the user's a qint8 tuning keeps float32 and says so; the file records it."""
    m = softneuro.import_onnx(conv_onnx(str(tmp_path / "conv.onnx")))
    t = softneuro.tune(m, schemas=["cpu:float32:*", "cpu:qint8:*"], cache_dir="-")
    assert t.report.reduced_refused
    assert all("qint8" not in layer["descriptor"] for layer in t.report.layers)
    path = str(tmp_path / "t.dnn")
    t.save(path)
    check = softneuro.load(path).accuracy_check
    assert check["recorded"] and not check["reduced_precision"] and check["checked"]
    assert softneuro.load(path).accuracy_check == check
    assert m.accuracy_check["recorded"] is False  # untuned: no record


def test_path_picture(mlp, tmp_path):
    t = softneuro.tune(mlp, cache_dir=str(tmp_path / "cache"))
    svg = t.path_svg(str(tmp_path / "path.svg"), title="mlp")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert open(tmp_path / "path.svg").read() == svg
    for layer in t.report.layers:
        assert layer["layer"] in svg


def test_benchmark_chart(tmp_path):
    import xml.etree.ElementTree as ET
    panels = [("resnet50", [{"label": "softneuro", "median": 20.5, "min": 19.0, "max": 23.0, "colour": "#d62728"},
                            {"label": "ort int8 <QDQ>", "median": 14.0, "min": 13.5, "max": 15.0, "hatched": True},
                            {"label": "tflite", "note": "skipped"}]),
              ("mobilenet_v2", [{"label": "softneuro", "median": 3.1, "min": 3.0, "max": 3.3}])]
    svg = softneuro.chart_svg("peers", panels, path=str(tmp_path / "c.svg"))
    ET.fromstring(svg)  # well-formed, the label's '<' escaped
    assert open(tmp_path / "c.svg").read() == svg
    for text in ("resnet50", "mobilenet_v2", "ort int8 &lt;QDQ&gt;", "skipped", "20.5", "3.10", "url(#hatch)"):
        assert text in svg


def test_errors_carry_file_layer_and_field(mlp, tmp_path):
    with pytest.raises(softneuro.Error) as e:
        softneuro.load(str(tmp_path / "missing.dnn"))
    assert "missing.dnn" in e.value.file
    s = softneuro.Session(mlp)
    with pytest.raises(softneuro.Error) as e:
        s.run({"x": np.zeros((2, 15), np.float32)})
    assert e.value.field == "x" and "[?,16]" in str(e.value)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(softneuro.Error) as e:
        softneuro.import_onnx(str(bad))
    assert "bad.onnx" in e.value.file
    with pytest.raises(softneuro.Error):
        softneuro.tune(mlp, accuracy="top1:0.99", metric=lambda o: 0.0)


def test_sessions_in_two_threads(mlp):
    xs = [RNG.standard_normal((b, 16)).astype(np.float32) for b in (1, 3, 7, 2)]
    want = [reference(x) for x in xs]
    errors = []

    def work(k):
        try:
            s = softneuro.Session(mlp, threads=1)
            for _ in range(50):
                for x, w in zip(xs[k::2], want[k::2]):
                    np.testing.assert_allclose(s.run({"x": x})["y"], w, rtol=1e-4, atol=1e-4)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_one_session_shared_by_four_threads(mlp):
    """One Session used from several threads at once (shapes changing under
    each other) is serialised: every output right (the heap was corrupted,
    outputs wrong or shapes refused before)."""
    xs = [RNG.standard_normal((b, 16)).astype(np.float32) for b in (1, 3, 7, 2, 5)]
    want = [reference(x) for x in xs]
    s = softneuro.Session(mlp, threads=1)
    errors = []

    def work(k):
        try:
            for i in range(60):
                j = (i + k) % len(xs)
                np.testing.assert_allclose(s.run({"x": xs[j]})["y"], want[j], rtol=1e-4, atol=1e-4)
                assert s.output_shape("y") in ([b, 10] for b in (1, 3, 7, 2, 5))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def embedding_argmax_onnx(path, table):
    """ids [1, sequence] (int64) -> rows of `table` (y) and each row's arg max (int64 `best`)."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["y"]),
        helper.make_node("ArgMax", ["y"], ["best"], axis=-1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "sequence"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "sequence", table.shape[1]]),
         helper.make_tensor_value_info("best", TensorProto.INT64, [1, "sequence"])],
        [numpy_helper.from_array(table, "table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_token_ids_in_and_integer_outputs_out(tmp_path):
    table = RNG.standard_normal((50, 8)).astype(np.float32)
    m = softneuro.import_onnx(embedding_argmax_onnx(str(tmp_path / "embedding.onnx"), table))
    assert m.inputs[0].dtype == np.int64 and m.inputs[0].shape == [1, -1]
    assert m.outputs[1].dtype == np.int64
    s = softneuro.Session(m, threads=1)
    for ids in (np.array([[3, 49, 0, 7]], dtype=np.int64), [[1, 2, 3, 4, 5, 6, 7]]):  # a list is converted
        out = s.run({"ids": ids})
        want = table[np.asarray(ids)]
        np.testing.assert_array_equal(out["y"], want)
        assert out["best"].dtype == np.int64  # the values, not float32 bit patterns
        np.testing.assert_array_equal(out["best"], want.argmax(-1))
    with pytest.raises(softneuro.Error, match="out of range"):
        s.run({"ids": np.array([[50]], dtype=np.int64)})


def test_a_lambda_metric_works_and_keyboard_interrupt_propagates(tmp_path):
    """A lambda is a metric like any function (its name reports as "metric"); a
    KeyboardInterrupt in a metric reaches the caller as itself, not as softneuro.Error."""
    m = softneuro.import_onnx(conv_onnx(str(tmp_path / "conv.onnx")))
    calibration = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(4)]
    validation = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(2)]
    pin = ["cpu:qint8:*"]  # every layer that can: the metric is then called
    t = softneuro.tune(m, schemas=pin, calibration=calibration, validation=validation,
                       metric=lambda outputs: 1.0, max_drop=0.5, cache_dir="-")
    assert t.report.accuracy_budget.startswith("metric:")

    def interrupted(outputs):
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt):
        softneuro.tune(m, schemas=pin, calibration=calibration, validation=validation, metric=interrupted,
                       cache_dir="-")

    def failing(outputs):
        raise ValueError("bad metric")

    with pytest.raises(softneuro.Error, match="bad metric"):
        softneuro.tune(m, schemas=pin, calibration=calibration, validation=validation, metric=failing,
                       cache_dir="-")


def _relu_tflite(tmp_path):
    """A one-operator .tflite (x [1, 4] -> RELU -> y), written with FlatBuffers' Python object API
    from the project's schema (flatc generates it here)."""
    import shutil
    import subprocess
    flatc = shutil.which("flatc")
    if flatc is None:
        pytest.skip("no flatc")
    flatbuffers = pytest.importorskip("flatbuffers")
    # The schema under a namespace of its own (softneuro.* is this package).
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "tflite.fbs")) as f:
        text = f.read().replace("namespace softneuro.tflite_fb;", "namespace tflite_schema;")
    (tmp_path / "tflite.fbs").write_text(text)
    subprocess.run([flatc, "--python", "--gen-object-api", "-o", str(tmp_path / "fb"), str(tmp_path / "tflite.fbs")],
                   check=True)
    sys.path.insert(0, str(tmp_path / "fb"))
    try:
        from tflite_schema import Buffer, Model, Operator, OperatorCode, SubGraph, Tensor
    finally:
        sys.path.pop(0)

    def tensor(name):
        t = Tensor.TensorT()
        t.name, t.shape, t.type, t.buffer = name, [1, 4], 0, 0
        return t

    op = Operator.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0], [1]
    sg = SubGraph.SubGraphT()
    sg.tensors, sg.operators, sg.inputs, sg.outputs, sg.name = [tensor("x"), tensor("y")], [op], [0], [1], "main"
    code = OperatorCode.OperatorCodeT()
    code.deprecatedBuiltinCode, code.builtinCode, code.version = 19, 19, 1  # RELU
    m = Model.ModelT()
    m.version, m.operatorCodes, m.subgraphs, m.buffers = 3, [code], [sg], [Buffer.BufferT()]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path = tmp_path / "relu.tflite"
    path.write_bytes(bytes(b.Output()))
    return str(path)


def test_import_tflite(tmp_path):
    model = softneuro.import_tflite(_relu_tflite(tmp_path))
    assert [t.name for t in model.inputs] == ["x"] and [t.name for t in model.outputs] == ["y"]
    x = np.array([[-1.5, 0.0, 2.0, -0.25]], np.float32)
    np.testing.assert_array_equal(softneuro.Session(model).run({"x": x})["y"], np.maximum(x, 0))
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"12345678 not a model")
    with pytest.raises(softneuro.Error) as e:
        softneuro.import_tflite(str(bad))
    assert "bad.tflite" in e.value.file and "TensorFlow Lite" in str(e.value)


def test_read_only_inputs_run(mlp):
    """An input array NumPy marks read-only (np.frombuffer of bytes, a read-only memmap) runs as any other:
    before, the binding refused it as an incompatible argument."""
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    ro = np.frombuffer(x.tobytes(), dtype=np.float32).reshape(2, 16)
    assert not ro.flags.writeable
    np.testing.assert_allclose(softneuro.Session(mlp).run({"x": ro})["y"], reference(x), rtol=1e-4, atol=1e-4)


def test_xnnpack_bound_to_another_pthreadpool_first(tmp_path):
    """A process that loaded XNNPACK before softneuro (PyTorch does) has XNNPACK's
    thread pool calls bound to the real libpthreadpool: our pool handles must never
    reach it (they crashed or hung it); XNNPACK layers then run on one thread."""
    import ctypes.util
    cli = os.environ.get("SOFTNEURO_CLI")
    if not cli:
        pytest.skip("SOFTNEURO_CLI (the softneuro command) not given")
    if "xnnpack" not in subprocess.run([cli, "routines", "conv2"], capture_output=True, text=True).stdout:
        pytest.skip("no XNNPACK routines in this build")
    lib = ctypes.util.find_library("XNNPACK")
    if not lib:
        pytest.skip("libXNNPACK not found")
    imported, tuned = str(tmp_path / "conv0.dnn"), str(tmp_path / "conv.dnn")
    subprocess.run([cli, "import", conv_onnx(str(tmp_path / "conv.onnx")), "-o", imported], check=True,
                   capture_output=True)
    subprocess.run([cli, "tune", imported, "--pin", "Conv*=*xnnpack*", "--cache", "-", "-o", tuned], check=True,
                   capture_output=True)
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = softneuro.Session(softneuro.load(tuned), threads=1).run({"x": x})["y"]
    script = f"""
import ctypes, os
ctypes.CDLL({lib!r}, mode=os.RTLD_LOCAL | os.RTLD_NOW)
import numpy as np
import softneuro
s = softneuro.Session(softneuro.load({tuned!r}), threads=2)
assert any("xnnpack" in l["descriptor"] for l in s.layers())
x = np.load({str(tmp_path / "x.npy")!r})
for _ in range(20):
    y = s.run({{"x": x}})["y"]
np.save({str(tmp_path / "y.npy")!r}, y)
softneuro.tune(softneuro.load({imported!r}), cache_dir={str(tmp_path / "cache")!r})
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "XNNPACK layers run on one thread" in r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-5)
    # Times measured so are kept apart in the profile cache from a normal process's.
    assert "xnnpack-one-thread" in (tmp_path / "cache" / "profiles.tsv").read_text()
    softneuro.tune(softneuro.load(imported), cache_dir=str(tmp_path / "normal"))
    assert "xnnpack-one-thread" not in (tmp_path / "normal" / "profiles.tsv").read_text()
