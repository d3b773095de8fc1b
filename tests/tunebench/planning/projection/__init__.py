"""Tests of tunebench/planning/projection/."""
