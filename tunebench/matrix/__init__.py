"""What to run: the YAML inputs, their expansion into experiments, and validation before anything launches."""
