#!/usr/bin/env python3
"""A tuned .dnn served on Ray Serve: N replicas, each one process holding the
model's weights once and one softneuro.Session; batch-1 requests over HTTP.

    python examples/serve/softneuro_serve.py MODEL.dnn|DIR [--replicas 2] [--threads 1] [--port 8000]

DIR: one tuned .dnn per device class (tuned on each kind of machine of the
fleet); each replica loads the file tuned on a device like its own (equal
softneuro.device_fingerprint()), else the first file, saying so.

A request is a POST of an .npz file of the inputs by name (np.savez); the
answer is an .npz file of the outputs, with the replica's process id in the
header x-softneuro-replica. A bad request (a missing input, a wrong shape, an
input that is not numbers, more than MAX_REQUEST_BYTES once read: checked from
each array's header before its data is read) is answered 400 with what, and
which input or layer. See
client.py for a client and a load test, README.md for fleets.
"""
import argparse
import asyncio
import io
import os
import threading

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import Response


def choose_model_file(path: str) -> str:
    """`path` itself, or of a folder's .dnn files the one tuned on this device class."""
    import logging

    import softneuro

    if not os.path.isdir(path):
        return path
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".dnn"))
    if not files:
        raise FileNotFoundError(f"{path}: no .dnn file")
    here = softneuro.device_fingerprint()
    tuned_on = {f: softneuro.load(f).tuned_fingerprint for f in files}
    for f in files:
        if tuned_on[f] == here:
            return f
    logging.getLogger("ray.serve").warning(
        "%s: no file tuned on this device (%s); running %s (tuned on %s): its routines run where they can, "
        "the default choice elsewhere", path, here, files[0], tuned_on[files[0]] or "none")
    return files[0]


class BadRequest(ValueError):
    """A request the replica refuses with a 400 and this message."""


# The most bytes one request's arrays may take once read (a 1 MB .npz of zeros
# can inflate to 1 GiB): each member's size is checked from its .npy header,
# before its data is read.
MAX_REQUEST_BYTES = 256 * 1024 * 1024


def read_request(body: bytes, input_names, max_bytes: int = MAX_REQUEST_BYTES) -> dict:
    """The inputs of an .npz request body by name. Each member's name, element
    type (bool, integers or floats: no strings, objects or records) and size
    (within `max_bytes` for the whole request) are checked from its .npy
    header before its data is read; what fails is a BadRequest saying why."""
    import zipfile

    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
    except Exception as e:  # zipfile raises more than BadZipFile (NotImplementedError for a version field, ...)
        raise BadRequest(f"the request body is not an .npz file of the inputs: {e}") from None
    inputs, total = {}, 0
    with archive:
        for member in archive.infolist():
            name = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
            if name not in input_names:
                raise BadRequest(f"'{name[:80]}' is not an input of the model (its inputs: {', '.join(input_names)})")
            try:
                with archive.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, fortran, dtype = read_header(f)
                    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
                        raise BadRequest(f"input '{name}' holds {dtype} values: numbers are (bool, integers, floats)")
                    if any(d < 0 for d in shape):  # numpy's header parser lets (0, -1) through
                        raise BadRequest(f"input '{name}' has a negative dim in its shape {tuple(shape)}")
                    count = int(np.prod(shape, dtype=np.int64))
                    total += count * dtype.itemsize
                    if total > max_bytes:
                        raise BadRequest(f"input '{name}' of shape {tuple(shape)} {dtype}: the request holds more than "
                                         f"{max_bytes} bytes")
                    data = f.read(count * dtype.itemsize)
            except BadRequest:
                raise
            except Exception as e:  # a damaged member or header
                raise BadRequest(f"input '{name}': not a readable .npy array: {e}") from None
            if len(data) != count * dtype.itemsize:
                raise BadRequest(f"input '{name}': {len(data)} bytes of data for shape {tuple(shape)} {dtype}")
            inputs[name] = np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order="F" if fortran else "C")
    return inputs


@serve.deployment
class SoftneuroModel:
    """One replica: the model loaded once, one session running one request at a time."""

    def __init__(self, path: str, threads: int = 1):
        import softneuro  # in the replica's process

        self._error = softneuro.Error
        self.path = choose_model_file(path)
        self.model = softneuro.load(self.path)
        self.session = softneuro.Session(self.model, threads=threads)
        self.input_names = [t.name for t in self.model.inputs]
        self.lock = threading.Lock()  # a session runs one input at a time

    def _run(self, inputs):
        with self.lock:
            return self.session.run(inputs)

    async def __call__(self, request: Request) -> Response:
        try:
            inputs = read_request(await request.body(), self.input_names)
        except BadRequest as e:
            return Response(str(e), status_code=400)
        try:
            # Off the event loop (Session.run releases the GIL): the replica keeps taking requests.
            outputs = await asyncio.get_running_loop().run_in_executor(None, self._run, inputs)
        except self._error as e:
            return Response(str(e), status_code=400)
        buf = io.BytesIO()
        np.savez(buf, **outputs)
        return Response(buf.getvalue(), media_type="application/octet-stream",
                        headers={"x-softneuro-replica": str(os.getpid()),
                                 "x-softneuro-model": os.path.basename(self.path)})


def application(path: str, replicas: int = 1, threads: int = 1):
    """The deployment of `path` with `replicas` replicas of `threads` threads each (and as many CPUs reserved)."""
    return SoftneuroModel.options(num_replicas=replicas, ray_actor_options={"num_cpus": threads}).bind(
        os.path.abspath(path), threads)


def start(path: str, replicas: int = 1, threads: int = 1, port: int = 8000, host: str = "127.0.0.1",
          num_cpus: int = 0) -> str:
    """Starts a local Ray instance (where none is connected) and the deployment; returns its URL."""
    import ray

    if not ray.is_initialized():
        # The replicas' processes import this module by name: on their path.
        here = os.path.dirname(os.path.abspath(__file__))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 object_store_memory=100 * 1024 * 1024)
    serve.start(http_options={"host": host, "port": port})
    serve.run(application(path, replicas, threads), name="softneuro", route_prefix="/")
    return f"http://{host}:{port}/"


def stop() -> None:
    import ray

    serve.shutdown()
    ray.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a tuned .dnn file, or a folder of them (one per device class)")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="threads per replica's session")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    a = ap.parse_args()
    url = start(a.model, a.replicas, a.threads, a.port, a.host)
    print(f"serving {a.model} at {url} ({a.replicas} replicas x {a.threads} threads); Ctrl-C stops", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop()


if __name__ == "__main__":
    main()
