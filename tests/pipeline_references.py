"""Per-rank action orders of PyTorch's pipelining schedules and DeepSeek's DualPipeV, recorded as data.

Source: torch 2.14.1 (PyPI wheel, torch.distributed.pipelining.schedules): each schedule class built
from dummy PipelineStage objects (torch.nn.Linear) under the fake process group
(torch.testing._internal.distributed.fake_pg.FakeStore), its `pipeline_order[rank]` read with the
None slots dropped and OVERLAP_F_B expanded into its forward and full backward; DeepSeek's
DualPipeV from github.com/deepseek-ai/DualPipe at 3da1bbea53606543d7f5f232338fc58096db30e3
(dualpipe/dualpipev.py `step`, its compute and communication methods replaced by recorders). Both
give identical orders for DualPipeV. Notation: PyTorch's I (input gradient) is parasim's B, its B
(full backward) parasim's BW; ".1" is the device's second chunk (model stage r + p for the loop
placement, 2p-1-r for the V placement).

torch_grid_slots: the length of PyTorch's per-rank time-step grid (one slot per action, None slots
included): PyTorch's own unit-time figure, an upper bound (its Interleaved1F1B pads one alignment
slot per cooldown backward). parasim: `simulate_schedule` with t_f = t_b = 1 and t_w (0 for the
schedules that run whole backwards, so BW takes one slot as in PyTorch's grid; 1 for the split ones):
makespan, idle per rank, peak micro-batch chunks in flight per rank.
"""

TORCH_VERSION = "2.14.1"
DUALPIPE_COMMIT = "3da1bbea53606543d7f5f232338fc58096db30e3"

CASES = [{'schedule': 'interleaved',
  'p': 4,
  'm': 8,
  'rows': ['F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 BW0.1 F7 BW1.1 F4.1 BW2.1 F5.1 BW3.1 F6.1 BW0 F7.1 BW1 '
           'BW2 BW3 BW4.1 BW5.1 BW6.1 BW7.1 BW4 BW5 BW6 BW7',
           'F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 BW0.1 F5 BW1.1 F6 BW2.1 F7 BW3.1 F4.1 BW0 F5.1 BW1 F6.1 BW2 '
           'F7.1 BW3 BW4.1 BW5.1 BW6.1 BW7.1 BW4 BW5 BW6 BW7',
           'F0 F1 F2 F3 F0.1 F1.1 F2.1 BW0.1 F3.1 BW1.1 F4 BW2.1 F5 BW3.1 F6 BW0 F7 BW1 F4.1 BW2 F5.1 BW3 F6.1 '
           'BW4.1 F7.1 BW5.1 BW6.1 BW7.1 BW4 BW5 BW6 BW7',
           'F0 F1 F2 F3 F0.1 BW0.1 F1.1 BW1.1 F2.1 BW2.1 F3.1 BW3.1 F4 BW0 F5 BW1 F6 BW2 F7 BW3 F4.1 BW4.1 '
           'F5.1 BW5.1 F6.1 BW6.1 F7.1 BW7.1 BW4 BW5 BW6 BW7'],
  'torch_grid_slots': [46, 44, 42, 40],
  'parasim': {'t_w': 0, 'makespan': 38.0, 'idle': [6.0, 6.0, 6.0, 6.0], 'peak_in_flight': [11, 9, 7, 5]}},
 {'schedule': 'interleaved',
  'p': 4,
  'm': 10,
  'rows': ['F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 F4.1 F5 F6 BW0.1 F7 BW1.1 F8 BW2.1 F9 BW3.1 F5.1 BW4.1 F6.1 BW0 '
           'F7.1 BW1 F8.1 BW2 F9.1 BW3 BW4 BW5.1 BW6.1 BW7.1 BW8.1 BW9.1 BW5 BW6 BW7 BW8 BW9',
           'F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 F4.1 BW0.1 F5 BW1.1 F6 BW2.1 F7 BW3.1 F8 BW4.1 F9 BW0 F5.1 BW1 '
           'F6.1 BW2 F7.1 BW3 F8.1 BW4 F9.1 BW5.1 BW6.1 BW7.1 BW8.1 BW9.1 BW5 BW6 BW7 BW8 BW9',
           'F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 BW0.1 F3.1 BW1.1 F4.1 BW2.1 F5 BW3.1 F6 BW4.1 F7 BW0 F8 BW1 F9 BW2 '
           'F5.1 BW3 F6.1 BW4 F7.1 BW5.1 F8.1 BW6.1 F9.1 BW7.1 BW8.1 BW9.1 BW5 BW6 BW7 BW8 BW9',
           'F0 F1 F2 F3 F4 F0.1 BW0.1 F1.1 BW1.1 F2.1 BW2.1 F3.1 BW3.1 F4.1 BW4.1 F5 BW0 F6 BW1 F7 BW2 F8 BW3 '
           'F9 BW4 F5.1 BW5.1 F6.1 BW6.1 F7.1 BW7.1 F8.1 BW8.1 F9.1 BW9.1 BW5 BW6 BW7 BW8 BW9'],
  'torch_grid_slots': [54, 52, 50, 48],
  'parasim': {'t_w': 0, 'makespan': 46.0, 'idle': [6.0, 6.0, 6.0, 6.0], 'peak_in_flight': [12, 10, 8, 6]}},
 {'schedule': 'interleaved',
  'p': 4,
  'm': 6,
  'rows': ['F0 F1 F2 F3 F4 F5 F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 BW0.1 BW1.1 BW2.1 BW3.1 BW4.1 BW5.1 BW0 BW1 BW2 '
           'BW3 BW4 BW5',
           'F0 F1 F2 F3 F4 F5 F0.1 F1.1 F2.1 F3.1 F4.1 BW0.1 F5.1 BW1.1 BW2.1 BW3.1 BW4.1 BW5.1 BW0 BW1 BW2 '
           'BW3 BW4 BW5',
           'F0 F1 F2 F3 F4 F5 F0.1 F1.1 F2.1 BW0.1 F3.1 BW1.1 F4.1 BW2.1 F5.1 BW3.1 BW4.1 BW5.1 BW0 BW1 BW2 '
           'BW3 BW4 BW5',
           'F0 F1 F2 F3 F4 F5 F0.1 BW0.1 F1.1 BW1.1 F2.1 BW2.1 F3.1 BW3.1 F4.1 BW4.1 F5.1 BW5.1 BW0 BW1 BW2 '
           'BW3 BW4 BW5'],
  'torch_grid_slots': [38, 36, 34, 33],
  'parasim': {'t_w': 0, 'makespan': 30.0, 'idle': [6.0, 6.0, 6.0, 6.0], 'peak_in_flight': [12, 11, 9, 7]}},
 {'schedule': 'interleaved',
  'p': 4,
  'm': 4,
  'rows': ['F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 BW0.1 BW1.1 BW2.1 BW3.1 BW0 BW1 BW2 BW3',
           'F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 BW0.1 BW1.1 BW2.1 BW3.1 BW0 BW1 BW2 BW3',
           'F0 F1 F2 F3 F0.1 F1.1 F2.1 BW0.1 F3.1 BW1.1 BW2.1 BW3.1 BW0 BW1 BW2 BW3',
           'F0 F1 F2 F3 F0.1 BW0.1 F1.1 BW1.1 F2.1 BW2.1 F3.1 BW3.1 BW0 BW1 BW2 BW3'],
  'torch_grid_slots': [30, 28, 26, 24],
  'parasim': {'t_w': 0, 'makespan': 22.0, 'idle': [6.0, 6.0, 6.0, 6.0], 'peak_in_flight': [8, 8, 7, 5]}},
 {'schedule': 'interleaved',
  'p': 3,
  'm': 5,
  'rows': ['F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 F4.1 BW0.1 BW1.1 BW2.1 BW3.1 BW4.1 BW0 BW1 BW2 BW3 BW4',
           'F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 BW0.1 F3.1 BW1.1 F4.1 BW2.1 BW3.1 BW4.1 BW0 BW1 BW2 BW3 BW4',
           'F0 F1 F2 F3 F4 F0.1 BW0.1 F1.1 BW1.1 F2.1 BW2.1 F3.1 BW3.1 F4.1 BW4.1 BW0 BW1 BW2 BW3 BW4'],
  'torch_grid_slots': [30, 28, 27],
  'parasim': {'t_w': 0, 'makespan': 24.0, 'idle': [4.0, 4.0, 4.0], 'peak_in_flight': [10, 8, 6]}},
 {'schedule': 'looped-bfs',
  'p': 4,
  'm': 8,
  'rows': ['F0 F1 F2 F3 F4 F5 F6 F7 F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 F6.1 F7.1 BW7.1 BW6.1 BW5.1 BW4.1 BW3.1 '
           'BW2.1 BW1.1 BW0.1 BW7 BW6 BW5 BW4 BW3 BW2 BW1 BW0',
           'F0 F1 F2 F3 F4 F5 F6 F7 F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 F6.1 F7.1 BW7.1 BW6.1 BW5.1 BW4.1 BW3.1 '
           'BW2.1 BW1.1 BW0.1 BW7 BW6 BW5 BW4 BW3 BW2 BW1 BW0',
           'F0 F1 F2 F3 F4 F5 F6 F7 F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 F6.1 F7.1 BW7.1 BW6.1 BW5.1 BW4.1 BW3.1 '
           'BW2.1 BW1.1 BW0.1 BW7 BW6 BW5 BW4 BW3 BW2 BW1 BW0',
           'F0 F1 F2 F3 F4 F5 F6 F7 F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 F6.1 F7.1 BW7.1 BW6.1 BW5.1 BW4.1 BW3.1 '
           'BW2.1 BW1.1 BW0.1 BW7 BW6 BW5 BW4 BW3 BW2 BW1 BW0'],
  'torch_grid_slots': [38, 37, 36, 35],
  'parasim': {'t_w': 0, 'makespan': 38.0, 'idle': [6.0, 6.0, 6.0, 6.0], 'peak_in_flight': [16, 16, 16, 16]}},
 {'schedule': 'looped-bfs',
  'p': 3,
  'm': 5,
  'rows': ['F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 F4.1 BW4.1 BW3.1 BW2.1 BW1.1 BW0.1 BW4 BW3 BW2 BW1 BW0',
           'F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 F4.1 BW4.1 BW3.1 BW2.1 BW1.1 BW0.1 BW4 BW3 BW2 BW1 BW0',
           'F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 F4.1 BW4.1 BW3.1 BW2.1 BW1.1 BW0.1 BW4 BW3 BW2 BW1 BW0'],
  'torch_grid_slots': [24, 23, 22],
  'parasim': {'t_w': 0, 'makespan': 24.0, 'idle': [4.0, 4.0, 4.0], 'peak_in_flight': [10, 10, 10]}},
 {'schedule': 'interleaved-zb',
  'p': 4,
  'm': 8,
  'rows': ['F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 B0.1 W0.1 F4 B1.1 W1.1 F5 B2.1 W2.1 F6 B3.1 W3.1 F7 B0 W0 F4.1 B1 '
           'W1 F5.1 B2 W2 F6.1 B3 W3 F7.1 B4.1 W4.1 B5.1 W5.1 B6.1 W6.1 B7.1 W7.1 B4 W4 B5 W5 B6 W6 B7 W7',
           'F0 F1 F2 F3 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 W0.1 F4 B2.1 W1.1 F5 B3.1 W2.1 F6 B0 W3.1 F7 B1 W0 F4.1 '
           'B2 W1 F5.1 B3 W2 F6.1 B4.1 W3 F7.1 B5.1 W4.1 B6.1 W5.1 B7.1 W6.1 B4 W7.1 B5 W4 B6 W5 B7 W6 W7',
           'F0 F1 F2 F3 F0.1 F1.1 B0.1 F2.1 B1.1 F3.1 B2.1 W0.1 F4 B3.1 W1.1 F5 B0 W2.1 F6 B1 W3.1 F7 B2 W0 '
           'F4.1 B3 W1 F5.1 B4.1 W2 F6.1 B5.1 W3 F7.1 B6.1 W4.1 B7.1 W5.1 B4 W6.1 B5 W7.1 B6 W4 B7 W5 W6 W7',
           'F0 F1 F2 F3 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 W0.1 F4 B0 W1.1 F5 B1 W2.1 F6 B2 W3.1 F7 B3 W0 '
           'F4.1 B4.1 W1 F5.1 B5.1 W2 F6.1 B6.1 W3 F7.1 B7.1 W4.1 B4 W5.1 B5 W6.1 B6 W7.1 B7 W4 W5 W6 W7'],
  'torch_grid_slots': [51, 51, 51, 51],
  'parasim': {'t_w': 1, 'makespan': 51.0, 'idle': [3.0, 3.0, 3.0, 3.0], 'peak_in_flight': [8, 8, 8, 8]}},
 {'schedule': 'interleaved-zb',
  'p': 4,
  'm': 10,
  'rows': ['F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 F3.1 B0.1 W0.1 F4.1 B1.1 W1.1 F5 B2.1 W2.1 F6 B3.1 W3.1 F7 B4.1 W4.1 '
           'F8 B0 W0 F9 B1 W1 F5.1 B2 W2 F6.1 B3 W3 F7.1 B4 W4 F8.1 B5.1 W5.1 F9.1 B6.1 W6.1 B7.1 W7.1 B8.1 '
           'W8.1 B9.1 W9.1 B5 W5 B6 W6 B7 W7 B8 W8 B9 W9',
           'F0 F1 F2 F3 F4 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 W0.1 F4.1 B2.1 W1.1 F5 B3.1 W2.1 F6 B4.1 W3.1 F7 B0 '
           'W4.1 F8 B1 W0 F9 B2 W1 F5.1 B3 W2 F6.1 B4 W3 F7.1 B5.1 W4 F8.1 B6.1 W5.1 F9.1 B7.1 W6.1 B8.1 W7.1 '
           'B9.1 W8.1 B5 W9.1 B6 W5 B7 W6 B8 W7 B9 W8 W9',
           'F0 F1 F2 F3 F4 F0.1 F1.1 B0.1 F2.1 B1.1 F3.1 B2.1 W0.1 F4.1 B3.1 W1.1 F5 B4.1 W2.1 F6 B0 W3.1 F7 '
           'B1 W4.1 F8 B2 W0 F9 B3 W1 F5.1 B4 W2 F6.1 B5.1 W3 F7.1 B6.1 W4 F8.1 B7.1 W5.1 F9.1 B8.1 W6.1 B9.1 '
           'W7.1 B5 W8.1 B6 W9.1 B7 W5 B8 W6 B9 W7 W8 W9',
           'F0 F1 F2 F3 F4 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 W0.1 F4.1 B4.1 W1.1 F5 B0 W2.1 F6 B1 W3.1 '
           'F7 B2 W4.1 F8 B3 W0 F9 B4 W1 F5.1 B5.1 W2 F6.1 B6.1 W3 F7.1 B7.1 W4 F8.1 B8.1 W5.1 F9.1 B9.1 W6.1 '
           'B5 W7.1 B6 W8.1 B7 W9.1 B8 W5 B9 W6 W7 W8 W9'],
  'torch_grid_slots': [63, 63, 63, 63],
  'parasim': {'t_w': 1, 'makespan': 63.0, 'idle': [3.0, 3.0, 3.0, 3.0], 'peak_in_flight': [9, 9, 9, 9]}},
 {'schedule': 'interleaved-zb',
  'p': 3,
  'm': 3,
  'rows': ['F0 F1 F2 F0.1 F1.1 F2.1 B0.1 W0.1 B1.1 W1.1 B2.1 W2.1 B0 W0 B1 W1 B2 W2',
           'F0 F1 F2 F0.1 F1.1 B0.1 F2.1 B1.1 W0.1 B2.1 W1.1 B0 W2.1 B1 W0 B2 W1 W2',
           'F0 F1 F2 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 W0.1 B0 W1.1 B1 W2.1 B2 W0 W1 W2'],
  'torch_grid_slots': [20, 20, 20],
  'parasim': {'t_w': 1, 'makespan': 20.0, 'idle': [2.0, 2.0, 2.0], 'peak_in_flight': [6, 6, 6]}},
 {'schedule': 'zb-v',
  'p': 4,
  'm': 8,
  'rows': ['F0 F1 F2 F3 F4 F5 F6 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 B3.1 W3.1 F7 B0 W0 F4.1 '
           'B4.1 W4.1 B1 W1 F5.1 B5.1 W5.1 B2 W2 F6.1 B6.1 W6.1 B3 W3 F7.1 B7.1 W7.1 B4 W4 B5 W5 B6 W6 B7 W7',
           'F0 F1 F2 F3 F4 F0.1 F5 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 B2.1 W2.1 F6 B0 W0 F4.1 B3.1 W3.1 F7 B1 '
           'W1 F5.1 B4.1 W4.1 B2 W2 F6.1 B5.1 W5.1 B3 W3 F7.1 B6.1 W6.1 B4 B7.1 B5 W4 B6 W5 B7 W6 W7.1 W7',
           'F0 F1 F2 F0.1 F3 F1.1 F4 F2.1 B0.1 W0.1 F3.1 B1.1 W1.1 F5 B0 W0 F4.1 B2.1 W2.1 F6 B1 W1 F5.1 B3.1 '
           'W3.1 F7 B2 W2 F6.1 B4.1 W4.1 B3 W3 F7.1 B5.1 W5.1 B4 B6.1 B5 B7.1 B6 W4 B7 W5 W6.1 W7.1 W6 W7',
           'F0 F0.1 F1 F1.1 F2 F2.1 F3 F3.1 B0.1 W0.1 F4 B0 W0 F4.1 B1.1 W1.1 F5 B1 W1 F5.1 B2.1 W2.1 F6 B2 W2 '
           'F6.1 B3.1 W3.1 F7 B3 W3 F7.1 B4.1 W4.1 B4 B5.1 B5 B6.1 B6 B7.1 B7 W4 W5.1 W6.1 W7.1 W5 W6 W7'],
  'torch_grid_slots': [48, 49, 50, 51],
  'parasim': {'t_w': 1, 'makespan': 51.0, 'idle': [3.0, 3.0, 3.0, 3.0], 'peak_in_flight': [8, 8, 8, 8]}},
 {'schedule': 'zb-v',
  'p': 4,
  'm': 5,
  'rows': ['F0 F1 F2 F3 F4 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 B3.1 W3.1 B0 W0 F4.1 B4.1 W4.1 B1 '
           'W1 B2 W2 B3 W3 B4 W4',
           'F0 F1 F2 F3 F4 F0.1 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 B2.1 W2.1 B0 W0 F4.1 B3.1 W3.1 B1 W1 B4.1 '
           'W4.1 B2 W2 B3 B4 W3 W4',
           'F0 F1 F2 F0.1 F3 F1.1 F4 F2.1 B0.1 W0.1 F3.1 B1.1 W1.1 B0 W0 F4.1 B2.1 W2.1 B1 W1 B3.1 W3.1 B2 W2 '
           'B4.1 W4.1 B3 B4 W3 W4',
           'F0 F0.1 F1 F1.1 F2 F2.1 F3 F3.1 B0.1 W0.1 F4 B0 W0 F4.1 B1.1 W1.1 B1 W1 B2.1 W2.1 B2 W2 B3.1 W3.1 '
           'B3 B4.1 B4 W3 W4.1 W4'],
  'torch_grid_slots': [42, 43, 44, 45],
  'parasim': {'t_w': 1, 'makespan': 34.0, 'idle': [4.0, 4.0, 4.0, 4.0], 'peak_in_flight': [6, 7, 8, 8]}},
 {'schedule': 'zb-v',
  'p': 3,
  'm': 9,
  'rows': ['F0 F1 F2 F3 F4 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F5 B0 W0 F3.1 B3.1 W3.1 F6 B1 W1 F4.1 '
           'B4.1 W4.1 F7 B2 W2 F5.1 B5.1 W5.1 F8 B3 W3 F6.1 B6.1 W6.1 B4 W4 F7.1 B7.1 W7.1 B5 W5 F8.1 B8.1 '
           'W8.1 B6 W6 B7 W7 B8 W8',
           'F0 F1 F2 F0.1 F3 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F4 B0 W0 F3.1 B2.1 W2.1 F5 B1 W1 F4.1 B3.1 W3.1 F6 '
           'B2 W2 F5.1 B4.1 W4.1 F7 B3 W3 F6.1 B5.1 W5.1 F8 B4 W4 F7.1 B6.1 W6.1 B5 W5 F8.1 B7.1 W7.1 B6 B8.1 '
           'B7 W6 B8 W7 W8.1 W8',
           'F0 F0.1 F1 F1.1 F2 F2.1 B0.1 W0.1 F3 B0 W0 F3.1 B1.1 W1.1 F4 B1 W1 F4.1 B2.1 W2.1 F5 B2 W2 F5.1 '
           'B3.1 W3.1 F6 B3 W3 F6.1 B4.1 W4.1 F7 B4 W4 F7.1 B5.1 W5.1 F8 B5 W5 F8.1 B6.1 W6.1 B6 B7.1 B7 B8.1 '
           'B8 W6 W7.1 W8.1 W7 W8'],
  'torch_grid_slots': [54, 55, 56],
  'parasim': {'t_w': 1, 'makespan': 56.0, 'idle': [2.0, 2.0, 2.0], 'peak_in_flight': [6, 6, 6]}},
 {'schedule': 'dualpipev',
  'p': 4,
  'm': 8,
  'rows': ['F0 F1 F2 F3 F4 F5 F6 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 F7 BW3.1 F4.1 BW0 BW4.1 '
           'F5.1 BW1 BW5.1 F6.1 BW2 BW6.1 F7.1 BW3 BW7.1 B4 W4 B5 W5 B6 W6 B7 W7',
           'F0 F1 F2 F3 F4 F0.1 F5 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 F6 BW2.1 F4.1 BW0 F7 BW3.1 F5.1 BW1 '
           'BW4.1 F6.1 BW2 BW5.1 F7.1 BW3 BW6.1 BW4 B7.1 B5 W7.1 B6 W5 B7 W6 W7',
           'F0 F1 F2 F0.1 F3 F1.1 F4 F2.1 B0.1 W0.1 F3.1 F5 BW1.1 F4.1 BW0 F6 BW2.1 F5.1 BW1 F7 BW3.1 F6.1 BW2 '
           'BW4.1 F7.1 BW3 BW5.1 BW4 BW6.1 B5 B7.1 B6 W5 B7 W7.1 W6 W7',
           'F0 F0.1 F1 F1.1 F2 F2.1 F3 F3.1 F4 BW0.1 F4.1 BW0 F5 BW1.1 F5.1 BW1 F6 BW2.1 F6.1 BW2 F7 BW3.1 '
           'F7.1 BW3 BW4.1 BW4 BW5.1 BW5 B6.1 B6 B7.1 B7 W6.1 W6 W7.1 W7'],
  'parasim': {'t_w': 1, 'makespan': 51.0, 'idle': [3.0, 3.0, 3.0, 3.0], 'peak_in_flight': [9, 9, 9, 9]}},
 {'schedule': 'dualpipev',
  'p': 4,
  'm': 10,
  'rows': ['F0 F1 F2 F3 F4 F5 F6 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 F7 BW3.1 F4.1 BW0 F8 BW4.1 '
           'F5.1 BW1 F9 BW5.1 F6.1 BW2 BW6.1 F7.1 BW3 BW7.1 F8.1 BW4 BW8.1 F9.1 BW5 BW9.1 B6 W6 B7 W7 B8 W8 B9 '
           'W9',
           'F0 F1 F2 F3 F4 F0.1 F5 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 F6 BW2.1 F4.1 BW0 F7 BW3.1 F5.1 BW1 F8 '
           'BW4.1 F6.1 BW2 F9 BW5.1 F7.1 BW3 BW6.1 F8.1 BW4 BW7.1 F9.1 BW5 BW8.1 BW6 B9.1 B7 W9.1 B8 W7 B9 W8 '
           'W9',
           'F0 F1 F2 F0.1 F3 F1.1 F4 F2.1 B0.1 W0.1 F3.1 F5 BW1.1 F4.1 BW0 F6 BW2.1 F5.1 BW1 F7 BW3.1 F6.1 BW2 '
           'F8 BW4.1 F7.1 BW3 F9 BW5.1 F8.1 BW4 BW6.1 F9.1 BW5 BW7.1 BW6 BW8.1 B7 B9.1 B8 W7 B9 W9.1 W8 W9',
           'F0 F0.1 F1 F1.1 F2 F2.1 F3 F3.1 F4 BW0.1 F4.1 BW0 F5 BW1.1 F5.1 BW1 F6 BW2.1 F6.1 BW2 F7 BW3.1 '
           'F7.1 BW3 F8 BW4.1 F8.1 BW4 F9 BW5.1 F9.1 BW5 BW6.1 BW6 BW7.1 BW7 B8.1 B8 B9.1 B9 W8.1 W8 W9.1 W9'],
  'parasim': {'t_w': 1, 'makespan': 63.0, 'idle': [3.0, 3.0, 3.0, 3.0], 'peak_in_flight': [9, 9, 9, 9]}},
 {'schedule': 'dualpipev',
  'p': 3,
  'm': 7,
  'rows': ['F0 F1 F2 F3 F4 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 F5 BW2.1 F3.1 BW0 F6 BW3.1 F4.1 BW1 BW4.1 F5.1 '
           'BW2 BW5.1 F6.1 BW3 BW6.1 B4 W4 B5 W5 B6 W6',
           'F0 F1 F2 F0.1 F3 F1.1 B0.1 W0.1 F2.1 F4 BW1.1 F3.1 BW0 F5 BW2.1 F4.1 BW1 F6 BW3.1 F5.1 BW2 BW4.1 '
           'F6.1 BW3 BW5.1 BW4 B6.1 B5 W6.1 B6 W5 W6',
           'F0 F0.1 F1 F1.1 F2 F2.1 F3 BW0.1 F3.1 BW0 F4 BW1.1 F4.1 BW1 F5 BW2.1 F5.1 BW2 F6 BW3.1 F6.1 BW3 '
           'BW4.1 BW4 BW5.1 B5 B6.1 B6 W5 W6.1 W6'],
  'parasim': {'t_w': 1, 'makespan': 44.0, 'idle': [2.0, 2.0, 2.0], 'peak_in_flight': [7, 7, 7]}}]
