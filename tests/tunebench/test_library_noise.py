"""tunebench/library_noise.py: what is silenced is exactly the messages named there, nothing beside them."""

import logging
import warnings

from tunebench.library_noise import silence_known_noise


def test_only_the_named_messages_are_silenced(caplog):
    silence_known_noise()
    matmul = logging.getLogger("bitsandbytes.autograd._functions")
    with caplog.at_level(logging.WARNING, logger="bitsandbytes.autograd._functions"):
        matmul.warning("MatMul8bitLt: inputs will be cast from torch.float32 to float16 during quantization")
        matmul.warning("MatMul8bitLt: something else")
    assert [r.getMessage() for r in caplog.records] == ["MatMul8bitLt: something else"]
    assert logging.getLogger("bitsandbytes.backends.cpu.ops").getEffectiveLevel() == logging.ERROR
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silence_known_noise()  # after `always`: its filter is the newest, and wins for its own message only
        warnings.warn("`torch.jit.script_method` is deprecated", DeprecationWarning, stacklevel=1)
        warnings.warn("another deprecation", DeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another deprecation"]
