"""A throwaway tunebench plugin (tests/test_plugins.py installs it): a tracker and a launcher by entry points."""
