"""Will it fit? Each experiment's memory by category predicted before launch, from a step under fake tensors."""
