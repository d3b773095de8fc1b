"""Tests of docs/evidence/: the code beside the evidence it produced."""
