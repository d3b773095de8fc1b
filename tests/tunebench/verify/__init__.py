"""Tests of tunebench/verify/."""
