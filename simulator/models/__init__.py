"""Numpy models with hand-written backward passes: kernels, layers, configs, optimizers, data,
and the GPT size / FLOP formulas. float64 throughout."""

from .data import get_batch
from .flops import gpt_config_flops, gpt_iteration_flops, gpt_model_param_count, gpt_param_count
from .layers import CrossEntropy, Dense, Embedding, Layer, LMHead, TransformerBlock
from .model import GPTConfig, MLPConfig, Model, build_model, config_from_dict
from .optim import SGD, Adam, apply_updates, init_states

__all__ = [
    "Adam", "CrossEntropy", "Dense", "Embedding", "GPTConfig", "LMHead", "Layer", "MLPConfig", "Model",
    "SGD", "TransformerBlock", "apply_updates", "build_model", "config_from_dict", "get_batch",
    "gpt_config_flops", "gpt_iteration_flops", "gpt_model_param_count", "gpt_param_count", "init_states",
]  # fmt: skip
