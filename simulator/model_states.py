"""Model-state bytes: precision recipes and ZeRO sharding, the one home of this formula.

A recipe gives bytes per parameter for (parameters, gradients, optimizer states):
  megatron  2 + 4 + 12 = 18: bf16 parameters, fp32 main gradients, fp32 main parameters and Adam
            momentum and variance (Megatron-LM `megatron/training/theoretical_memory_usage.py`,
            `num_bytes_per_parameter`; docs/user-guide/features/dist_optimizer.md);
  mixed     2 + 2 + 12 = 16: 16-bit parameters and gradients, fp32 master copy, momentum and
            variance (Rajbhandari et al. 2020, ZeRO, Sec. 3.1 and Fig. 1, K = 12);
  fp32      4 + 4 + 8  = 16: fp32 parameters and gradients, Adam momentum and variance;
  fp64      8 + 8 + 16 = 32: parasim's numpy runtime (float64 parameters, gradients, Adam m, v).
A recipe can also be given as its (p, g, k) tuple.
ZeRO stage over N_d data-parallel ranks (ZeRO Fig. 1 and Sec. 5), recipe (p, g, k):
  stage 0: (p + g + k) Psi;  1: (p + g) Psi + k Psi / N_d;  2: p Psi + (g + k) Psi / N_d;
  stage 3: (p + g + k) Psi / N_d.
Megatron-LM's distributed optimizer is stage 1 of the megatron recipe: 6 + 12/N_d bytes per
parameter. ZeRO Fig. 1 (Psi = 7.5e9, N_d = 64, mixed): 120, 31.4, 16.6, 1.9 GB.
"""

from __future__ import annotations

from simulator.errors import ParasimError

RECIPES = {"megatron": (2, 4, 12), "mixed": (2, 2, 12), "fp32": (4, 4, 8), "fp64": (8, 8, 16)}


def recipe_bytes(recipe) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter of `recipe` (module docstring)."""
    if isinstance(recipe, tuple) and len(recipe) == 3 and all(x >= 0 for x in recipe):
        return recipe
    if recipe not in RECIPES:
        raise ParasimError(f"unknown precision recipe {recipe!r}; known: {', '.join(RECIPES)}")
    return RECIPES[recipe]


def check_zero_stage(stage) -> None:
    """ZeRO has stages 0 (off) to 3 (Rajbhandari et al. 2020)."""
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise ParasimError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")


def model_state_parts(params: float, dp: int = 1, zero_stage: int = 0,
                      recipe: str = "mixed") -> tuple[float, float, float]:
    """(parameter, gradient, optimizer) bytes on one device of `params` parameters sharded by
    ZeRO `zero_stage` over `dp` ranks (module docstring: ZeRO Fig. 1, Megatron-LM 18 bytes)."""
    if not params > 0:
        raise ParasimError(f"params must be > 0, got {params}")
    if not (isinstance(dp, int) and dp >= 1):
        raise ParasimError(f"dp must be a positive integer, got {dp!r}")
    check_zero_stage(zero_stage)
    p, g, k = recipe_bytes(recipe)
    return (p * params / (dp if zero_stage >= 3 else 1),
            g * params / (dp if zero_stage >= 2 else 1),
            k * params / (dp if zero_stage >= 1 else 1))


def model_state_bytes(params: float, dp: int = 1, zero_stage: int = 0, recipe: str = "mixed") -> float:
    """Total model-state bytes on one device (sum of `model_state_parts`)."""
    return sum(model_state_parts(params, dp, zero_stage, recipe))
