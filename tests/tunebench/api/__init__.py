"""Tests of tunebench/api/."""
