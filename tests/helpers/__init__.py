"""Helpers shared by the test files of several folders: fixtures (registered in tests/conftest.py), builders and
assertions. Test files import from here, never from one another; conftest.py holds fixtures and hooks only."""
