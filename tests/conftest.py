"""Shared test setup: quiet TensorFlow, repository root on sys.path, float32 policy."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest


@pytest.fixture(autouse=True)
def _float32_policy():
    """train.setup_devices sets a global Keras dtype policy; reset it after each test."""
    yield
    if "keras" in sys.modules:
        sys.modules["keras"].mixed_precision.set_global_policy("float32")
