"""What an unknown argument key most likely meant: the names other tools use for ours, then close spellings."""

from __future__ import annotations

import difflib
import logging

logger = logging.getLogger(__name__)

# Names people bring from PEFT's LoraConfig, axolotl, LLaMA-Factory, older TRL and their own scripts. Spelling
# similarity alone gets these wrong: `lora_rank` is closest to the Trainer's `local_rank`, not the LoRA rank `r`.
ALIASES: dict[str, str] = {
    **dict.fromkeys(("lora_rank", "lora_r", "rank", "lora_dim"), "r"),
    **dict.fromkeys(("alpha", "lora_scale", "lora_scaling"), "lora_alpha"),
    **dict.fromkeys(("lora_target_modules", "lora_target", "target_module", "lora_modules", "lora_target_linear"),
                    "target_modules"),
    **dict.fromkeys(("lora_dropout_p", "dropout", "lora_drop"), "lora_dropout"),
    **dict.fromkeys(("max_seq_length", "seq_len", "sequence_len", "sequence_length", "max_len",
                     "cutoff_len", "context_length", "block_size", "model_max_length"), "max_seq_len"),
    **dict.fromkeys(("model_name", "model", "model_id", "model_path", "base_model", "pretrained_model_name_or_path"),
                    "model_name_or_path"),
    **dict.fromkeys(("batch_size", "micro_batch_size", "train_batch_size", "per_device_batch_size", "bs"),
                    "per_device_train_batch_size"),
    **dict.fromkeys(("grad_accum", "gradient_accumulation", "grad_accumulation_steps", "accumulation_steps",
                     "grad_acc_steps", "gradient_accumulation_step"), "gradient_accumulation_steps"),
    **dict.fromkeys(("dataset_path", "data_path", "dataset", "train_file", "train_data", "data_file",
                     "dataset_name", "training_data"), "training_data_path"),
    **dict.fromkeys(("lr",), "learning_rate"),
    **dict.fromkeys(("epochs", "num_epochs", "n_epochs"), "num_train_epochs"),
    **dict.fromkeys(("steps", "num_steps", "train_steps", "total_steps"), "max_steps"),
    **dict.fromkeys(("dtype", "model_dtype"), "torch_dtype"),
    **dict.fromkeys(("adapter", "peft", "peft_type", "use_peft", "finetuning_type"), "peft_method"),
    **dict.fromkeys(("attn_implementation_name", "attention", "attention_implementation", "attn"),
                    "attn_implementation"),
    **dict.fromkeys(("warmup",), "warmup_steps"),
    **dict.fromkeys(("prompt_tuning_tokens", "virtual_tokens", "n_virtual_tokens"), "num_virtual_tokens"),
}


def suggestion(key: str, known: set[str]) -> str | None:
    """The known key `key` most likely stands for: an alias first, then the closest spelling; None when neither."""
    target = ALIASES.get(str(key).strip().lower().replace("-", "_"))
    if target in known:
        return target
    close = difflib.get_close_matches(str(key), known, n=1)
    return close[0] if close else None
