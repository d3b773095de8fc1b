"""Messages of other libraries that no tunebench user can act on, silenced one by one (each with its reason):
applied once, when tunebench is imported, in the harness and in every training entry alike."""

import logging
import warnings

logger = logging.getLogger(__name__)


class DropInt8CastNotice(logging.Filter):
    """bitsandbytes' 8-bit matmul logs "inputs will be cast ... to float16" on every call of every layer (tens of
    thousands of lines a run, and the logging's own host time inside the measured step): a property of LLM.int8,
    documented in docs/guides/plan.md, not news for each matmul."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


def silence_known_noise() -> None:
    # bitsandbytes, imported by TRL/PEFT when installed, warns at import on CPUs with AVX512-BF16 that it could not
    # fetch an inference-only CPU kernel from a model hub: nothing tunebench runs uses it, and every harness start
    # and experiment would print it. Its errors still show.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    logging.getLogger("bitsandbytes.autograd._functions").addFilter(DropInt8CastNotice())
    # bitsandbytes compiles a kernel with torch.compile when imported (PEFT imports it whenever it is installed),
    # which imports inductor, which imports torch's own MKL-DNN module, whose class bodies use the deprecated
    # `torch.jit.script_method`: a DeprecationWarning from torch about torch, in every run, that neither the user
    # nor tunebench can act on. Only that message is silenced.
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script_method` is deprecated", category=DeprecationWarning)
