"""Tests of tunebench/results/compare/."""
