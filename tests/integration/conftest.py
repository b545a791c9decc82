"""Fixtures of the integration tests: the newcomer's machine after `make run` (embedded.py)."""

from pathlib import Path

import pytest

from .embedded import copy_var, fill_var


@pytest.fixture(scope="session")
def embedded_var_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A var/ as `make run` fills it (SQLite migrated and seeded, the secret key), made once."""
    var_dir = tmp_path_factory.mktemp("embedded") / "var"
    fill_var(var_dir)
    return var_dir


@pytest.fixture
def embedded_var(embedded_var_template: Path, tmp_path: Path) -> Path:
    """This test's own copy of it: every test gets a fresh machine."""
    return copy_var(embedded_var_template, tmp_path / "var")
