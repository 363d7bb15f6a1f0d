"""Shared fixtures of the Python tests (run by scripts/python-test.sh).

The module is imported from $PYTHONPATH (build/python); the C++ tools the tests compare with
are looked up in $KVEVICT_BUILD_DIR (default: build/ of this checkout), the models in
$KVEVICT_SHARED_DIR (default: ../shared beside the checkout). Missing models skip the model
tests, unless KVEVICT_REQUIRE_MODELS=1 (CI), which makes them fail.
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _path(env, default):
    return pathlib.Path(os.environ.get(env) or default).resolve()


@pytest.fixture(scope="session")
def build_dir():
    return _path("KVEVICT_BUILD_DIR", ROOT / "build")


def _tool(build_dir, rel):
    path = build_dir / rel
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it first (bash scripts/python-test.sh does)")
    return str(path)


@pytest.fixture(scope="session")
def replay_bin(build_dir):
    return _tool(build_dir, "tools/replay/kvevict-replay")


@pytest.fixture(scope="session")
def generate_bin(build_dir):
    return _tool(build_dir, "tools/llama2/kvevict-generate")


@pytest.fixture(scope="session")
def shared_dir():
    shared = _path("KVEVICT_SHARED_DIR", ROOT.parent / "shared")
    model = shared / "models/stories260K/stories260K.bin"
    if not model.is_file() or not (shared / "reference/stories260K_greedy_from_bos.ids").is_file():
        if os.environ.get("KVEVICT_REQUIRE_MODELS") == "1":
            pytest.fail(f"stories260K or its reference ids are missing under {shared} (KVEVICT_REQUIRE_MODELS=1)")
        pytest.skip(f"no stories260K under {shared}")
    return shared
