"""What the auto-parallel run tests share: a distributed run equals the stand-alone one."""

import numpy as np

RTOL = 1e-9


def assert_same(res, ref):
    """Losses, outputs, gradients and trained weights equal the stand-alone run (float64, rel 1e-9)."""
    np.testing.assert_allclose(res.losses, ref.losses, rtol=RTOL)
    np.testing.assert_allclose(res.output, ref.output, rtol=RTOL)
    for p in ref.params:
        np.testing.assert_allclose(res.grads[p], ref.grads[p], rtol=RTOL, atol=1e-13)
        np.testing.assert_allclose(res.params[p], ref.params[p], rtol=RTOL, atol=1e-13)
