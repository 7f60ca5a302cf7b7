"""Paths every test folder shares: the repository root, the app's entry point, the tests' data."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
DATA = ROOT / "tests" / "data"
