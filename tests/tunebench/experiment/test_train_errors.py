"""An experiment's error record keeps the exception's own line, however long its message and traceback."""

import traceback

import pytest

from tunebench.experiment.train import ERROR_CHARS, error_record

HEADLINE = "backend='inductor' raised: LoweringException: the line that says what went wrong"


def _raised(user_frames: int) -> BaseException:
    """Like torch.compile's errors: the message's first line says what failed, then a trace of the user's code
    (`from user code:`) that can run to thousands of characters."""
    frames = "".join(f'  File "model.py", line {i}, in forward\n    hidden = layer_{i}(hidden)\n'
                     for i in range(user_frames))
    try:
        raise RuntimeError(f"{HEADLINE}\n\nfrom user code:\n{frames}\nSet TORCHDYNAMO_VERBOSE=1 for more")
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize("user_frames", [0, 3, 200])
def test_the_exceptions_line_comes_first_and_the_record_stays_bounded(user_frames):
    exc = _raised(user_frames)
    record = error_record(exc)
    assert record.startswith(f"RuntimeError: {HEADLINE}\n") and len(record) <= ERROR_CHARS
    trace = "".join(traceback.format_exception(exc))
    assert record.endswith(trace[-200:])  # then the traceback's end
    if user_frames == 200:  # the tail alone (what was kept before) had lost the line
        assert HEADLINE not in trace[-ERROR_CHARS:]
