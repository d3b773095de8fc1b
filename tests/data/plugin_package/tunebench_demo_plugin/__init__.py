"""A throwaway tunebench plugin (tests/tunebench/test_plugins.py installs it): a tracker and a launcher by entry
points."""
