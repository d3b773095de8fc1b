"""fms-acceleration's plugins as tunebench runs them: the typed setting (settings), the checks before anything runs
(checks), the fixes that let them run on today's libraries (compat), GPTQ bases for random weights (gptq) and the
seam the training entry drives them through (seam), as fms-hf-tuning's trainer does."""
