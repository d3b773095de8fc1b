"""Running experiments: one subprocess each (launch, process groups), failure classes, the matrix loop."""
