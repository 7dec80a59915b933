"""The trained third-party models of shared/real-models/: their .onnx files,
taken from packages on the Python package index (pip download, then unzip)."""
import glob
import os
import subprocess
import sys
import zipfile

PACKAGES = ["rapidocr-onnxruntime==1.4.4", "nudenet==3.4.2"]
DEFAULT_DIR = os.path.expanduser("~/.cache/softneuro/real-models")


def fetch(models=DEFAULT_DIR):
    """The packages' .onnx files into `models`; raises CalledProcessError (with
    pip's output) where the download fails."""
    wheels = os.path.join(models, "wheels")
    os.makedirs(wheels, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wheels] + PACKAGES, check=True,
                   capture_output=True, text=True)
    for whl in glob.glob(os.path.join(wheels, "*.whl")):
        with zipfile.ZipFile(whl) as z:
            for member in z.namelist():
                if member.endswith(".onnx"):
                    with open(os.path.join(models, os.path.basename(member)), "wb") as f:
                        f.write(z.read(member))
