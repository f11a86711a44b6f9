"""Fixtures for the hook tests; the helpers themselves are in hookutil.py."""

import pytest
from hookutil import HookRunner


@pytest.fixture
def hooks(tmp_path) -> HookRunner:
    """Runs hook scripts with HOME, the log and the state folder inside tmp_path."""
    return HookRunner(tmp_path)
