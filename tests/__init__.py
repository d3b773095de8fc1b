"""The test suite, laid out like the code: tests/<package path>/test_<module>.py (tests/tunebench/, tests/scanner/,
tests/scripts/); repository-wide tests here; shared fixtures in tests/fixtures/ and tests/conftest.py."""
