"""Tests of tunebench/history/."""
