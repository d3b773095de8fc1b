"""Tests of tunebench/cli/."""
