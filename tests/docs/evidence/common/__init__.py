"""Tests of docs/evidence/common/: what the runs of several evidence pages share."""
