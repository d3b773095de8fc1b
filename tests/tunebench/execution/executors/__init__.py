"""Tests of tunebench/execution/executors/."""
