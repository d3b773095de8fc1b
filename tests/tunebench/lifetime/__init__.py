"""Tests of tunebench/lifetime/."""
