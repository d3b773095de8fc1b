"""What runs inside one experiment's training subprocess: arguments, model, data, trainer, measurements."""
