"""Tests of tunebench/."""
