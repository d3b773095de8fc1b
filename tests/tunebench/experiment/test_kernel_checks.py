"""tunebench/experiment/kernel_checks.py: a row says when the kernels it ran are not the ones its configuration is
about (padding-free without a variable-length attention kernel; a prediction made for another attention kernel)."""

from tunebench.experiment.kernel_checks import VARLEN_ATTENTION, attention_mismatch, padding_free_problem


def test_padding_free_needs_a_variable_length_kernel():
    assert padding_free_problem(True, True, "sdpa").startswith("padding-free ran with sdpa attention")
    assert padding_free_problem(True, True, None).startswith("padding-free ran with the default attention")
    assert all(padding_free_problem(True, True, kernel) is None for kernel in VARLEN_ATTENTION)
    assert padding_free_problem(True, False, "sdpa") is None and padding_free_problem(False, True, "sdpa") is None


def test_a_prediction_for_another_attention_kernel_is_said():
    assert attention_mismatch("flash", "efficient").startswith("the memory prediction assumed the flash attention "
                                                               "kernel, the run used efficient")
    assert attention_mismatch("flash", "flash") is None
    assert attention_mismatch(None, "flash") is None and attention_mismatch("flash", None) is None
    assert attention_mismatch("flash", "none") is None  # the scanner saw no attention kernel: nothing to compare
