"""Tests of tunebench/planning/."""
