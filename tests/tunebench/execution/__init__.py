"""Tests of tunebench/execution/."""
