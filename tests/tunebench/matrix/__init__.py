"""Tests of tunebench/matrix/."""
