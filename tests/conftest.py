"""Shared fixtures for the transformer_course test suite (kept deliberately small)."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh, seeded generator per test, so tests never share random state."""
    return np.random.default_rng(20240601)
