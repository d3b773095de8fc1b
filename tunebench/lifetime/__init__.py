"""How tunebench's processes end: none outlives the harness, and one harness holds a results folder at a time."""
