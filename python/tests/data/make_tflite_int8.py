"""Makes tiny_int8_{int8,uint8,requant}.tflite and their interpreter outputs
(tiny_int8_*.litert.npz: inputs x0.., outputs y0.. per seed), the golden
files of python/tests/test_tflite_int8.py.

    bench/compare/.venv-tflite/bin/python python/tests/data/make_tflite_int8.py

A small seeded network with the operators whose int8 arithmetic the
interpreter defines in integers (PRELU, ADD of two scales, RESIZE_BILINEAR,
QUANTIZE between grids at a uint8 edge), made full-integer by TFLiteConverter
and run by ai-edge-litert's default interpreter (its XNNPACK delegate), as
users run such files. tiny_int8_requant.tflite is the uint8 file with its
first QUANTIZE (uint8 -> int8) given another output scale and zero point, so
that it requantises through a fixed-point multiplier.
"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def model():
    import tensorflow as tf
    tf.keras.utils.set_random_seed(7)
    x = tf.keras.Input((12, 12, 3), batch_size=1)
    a = tf.keras.layers.Conv2D(8, 3, padding="same")(x)
    a = tf.keras.layers.PReLU(shared_axes=[1, 2], alpha_initializer=tf.keras.initializers.RandomUniform(0.05, 0.4))(a)
    b = tf.keras.layers.DepthwiseConv2D(3, padding="same")(a)
    b = tf.keras.layers.PReLU(shared_axes=[1, 2], alpha_initializer=tf.keras.initializers.RandomUniform(-0.2, 0.3))(b)
    c = tf.keras.layers.Add()([a, b])
    c = tf.keras.layers.MaxPool2D(2)(c)
    u = tf.keras.layers.Resizing(12, 12, interpolation="bilinear")(c)
    d = tf.keras.layers.Conv2D(8, 1)(tf.keras.layers.Concatenate()([u, a]))
    d = tf.keras.layers.PReLU(shared_axes=[1, 2])(d)
    y = tf.keras.layers.Conv2D(4, 3, strides=2)(d)
    return tf.keras.Model(x, y)


def convert(m, io):
    import tensorflow as tf

    def representative():
        rng = np.random.default_rng(0)
        for _ in range(16):
            yield [rng.uniform(-1, 1, size=(1, 12, 12, 3)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(m)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8 if io == "int8" else tf.uint8
    return conv.convert()


def requantising(tflite):
    """The file with its input's QUANTIZE writing onto another grid."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as sfb
    m = sfb.ModelT.InitFromObj(sfb.Model.GetRootAsModel(tflite, 0))
    g = m.subgraphs[0]
    op = next(o for o in g.operators if o.inputs[0] == g.inputs[0])
    q = g.tensors[op.outputs[0]].quantization
    q.scale = [q.scale[0] * 1.37]
    q.zeroPoint = [5]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def main():
    from ai_edge_litert.interpreter import Interpreter
    m = model()
    files = {"int8": convert(m, "int8"), "uint8": convert(m, "uint8")}
    files["requant"] = requantising(files["uint8"])
    for io, content in files.items():
        path = os.path.join(HERE, f"tiny_int8_{io}.tflite")
        with open(path, "wb") as f:
            f.write(content)
        it = Interpreter(model_path=path, num_threads=1)
        it.allocate_tensors()
        (i,), (o,) = it.get_input_details(), it.get_output_details()
        rng = np.random.default_rng(1)
        data = {}
        for seed in range(4):
            info = np.iinfo(i["dtype"])
            x = rng.integers(info.min, info.max + 1, size=tuple(i["shape"])).astype(i["dtype"])
            it.set_tensor(i["index"], x)
            it.invoke()
            data[f"x{seed}"], data[f"y{seed}"] = x, it.get_tensor(o["index"]).copy()
        np.savez(os.path.join(HERE, f"tiny_int8_{io}.litert.npz"), input_name=i["name"], output_name=o["name"], **data)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
