"""Paths the tests share, independent of which tests/ subfolder a test module lives in."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
STANDIN = TESTS / "standin"
FIXTURES = TESTS / "fixtures"
