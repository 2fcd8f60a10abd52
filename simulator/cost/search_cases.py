"""The searches docs/search.md times and tests pin (bench/bench_search.py runs them): each a name
and the (args, kwargs) of `search_training`.

  moe-cp         a mixture-of-experts Llama 3 8B (8 experts, top-2, expert FFN 7168) at 32k tokens
                 on 64 H100, B = 256: context parallelism (c up to 32) and expert-tensor parallelism
                 searched, 98,235 configurations
  megatron-7.5b  Megatron-LM's 7.5B on 64 A100-80GB, B = 512, the default space
  llama3-405b    Llama 3 405B on 24,576 H100, B = 3072, docs/search.md's case (b = 1, SP, ZeRO-1,
                 1F1B or interleaved, selective or full recomputation)
"""

from __future__ import annotations

from simulator.cost.model_presets import get_model

MOE_CP = get_model("llama3-8b", num_experts=8, moe_router_topk=2, moe_ffn_hidden=7168, seq=32768)
LLAMA_405B_KW = dict(schedules=("1f1b", "interleaved"), micro_batch_sizes=(1,), sequence_parallel=(True,),
                     zero_stages=(1,), recomputes=("selective", "full"), top=3)

CASES: dict[str, tuple[tuple, dict]] = {
    "moe-cp": ((MOE_CP, "h100-sxm", 64, 256), dict(top=5)),
    "megatron-7.5b": (("megatron-7.5b", "a100-80gb", 64, 512), dict(top=5)),
    "llama3-405b": (("llama3-405b", "h100-sxm", 24576, 3072), LLAMA_405B_KW),
}
