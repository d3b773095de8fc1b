"""`benchmark.py verify`: check the scanner's numbers on your own hardware against torch's MemTracker."""
