"""Tests of tunebench/results/report/."""
